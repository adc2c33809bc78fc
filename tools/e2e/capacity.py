#!/usr/bin/env python3
"""Capacity: the largest size (batch) of a workload that trains under a fixed memory cap, per
allocator, next to the physical floor.

For each workload (one with a size: tools/e2e/workloads.py SIZE_PARAM) and allocator
(tools/e2e/allocators.py) the driver starts one process that installs the allocator under the
cap, then grows the size by one from --start, building the workload afresh and running --steps
steps at each size, until a step runs out of memory or (PyTorch's modes) the size's peak
reserved passes the cap. The figure is the largest size whose steps all ran within the cap.

    python3 tools/e2e/capacity.py --lib gpu-bundle/e2e/libstrata_c.so --cap-gib 16 \\
        [--workloads gpt2_train] [--allocators torch_default,strata] [--start 1] \\
        [--steps 2] [--timeout 600] [--out capacity.json]

The cap: torch.cuda.set_per_process_memory_fraction(cap / device memory) for PyTorch's three
modes; for strata, STRATA_ALLOC_CONF's gpu_memory_limit_mb (strata's physical memory limit),
since a pluggable allocator does not see PyTorch's fraction.

The physical floor is the largest size whose peak allocated bytes (the tensors alone, whatever
the allocator) fit the cap: a straight line through the peak allocated of the sizes that trained
(every allocator's, least squares), solved for the cap. An allocator at the floor wastes nothing
that would have held another size step. It is an estimate from the sizes that ran: the table says
"~" before it.

Python 3 standard library only in the driver; the runs need torch (and what the workload needs).
Internal: `capacity.py --child WORKLOAD ALLOCATOR ...` is one run.
"""

import argparse
import gc
import json
import math
import os
import sys

import launch

HERE = os.path.dirname(os.path.abspath(__file__))
RESULT_PREFIX = "CAPACITY_RESULT "
ALLOCATORS = launch.ALLOCATORS
GIB = 2**30


# ---- one run (child process) ----------------------------------------------------------------


def _is_oom(e):
    text = str(e).lower()
    return type(e).__name__ == "OutOfMemoryError" or "out of memory" in text


def child(args):
    sys.path.insert(0, HERE)
    import torch

    import allocators
    import workloads

    workload, allocator = args.child
    result = {"workload": workload, "allocator": allocator, "cap_bytes": int(args.cap_gib * GIB),
              "sizes": [], "ok": False}
    try:
        dev = args.device
        alloc = allocators.setup(allocator, dev, args.lib)  # before any CUDA allocation
        torch.cuda.set_device(dev)
        device = torch.device("cuda", dev)
        alloc.check()
        if allocator.startswith("torch"):
            total = torch.cuda.get_device_properties(device).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, result["cap_bytes"] / total), dev)
        result["gpu"] = torch.cuda.get_device_name(device)
        result["torch"] = torch.__version__
        size = args.start
        while size <= args.max_size:
            w = None
            ooms_before = alloc.stats().get("num_ooms", 0)
            try:
                alloc.reset_peak()
                w = workloads.build(workload, device, size=size)
                for _ in range(args.steps):
                    w.step()
                    torch.cuda.synchronize(device)
            except Exception as e:  # noqa: BLE001 - an out-of-memory ends the search
                # A pluggable allocator's refusal reaches PyTorch as a RuntimeError (strata's
                # message), or, from an allocator that returns NULL, as a later CUDA error: not as
                # an OutOfMemoryError. The allocator's own count of refusals tells.
                if not _is_oom(e) and alloc.stats().get("num_ooms", 0) == ooms_before:
                    raise
                result["stopped_at"] = size
                result["stop_reason"] = f"{type(e).__name__}: {e}"[:300]
                break
            finally:
                del w
                gc.collect()
            stats = alloc.stats()
            entry = {"size": size, "peak_allocated": stats.get("allocated_bytes.all.peak"),
                     "peak_reserved": stats.get("reserved_bytes.all.peak")}
            # PyTorch's fraction bounds what cudaMallocAsync hands out, not what its pool keeps:
            # a size that reserved past the cap would not have run on a device of that size.
            # strata's limit bounds its device memory itself.
            if (not allocator.startswith("strata")
                    and (entry["peak_reserved"] or 0) > result["cap_bytes"]):
                result["stopped_at"] = size
                result["stop_reason"] = (f"peak reserved {entry['peak_reserved'] / GIB:.3f} GiB "
                                         "passed the cap")
                result["over_cap"] = entry
                break
            result["sizes"].append(entry)
            print(f"CAPACITY_PROGRESS {workload} {allocator} size {size} ok", file=sys.stderr,
                  flush=True)
            size += 1
        result["largest"] = result["sizes"][-1]["size"] if result["sizes"] else 0
        result["ok"] = True
    except BaseException as e:  # noqa: BLE001 - reported to the driver, whatever it is
        result["error"] = f"{type(e).__name__}: {e}"[:500]
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    sys.exit(0 if result["ok"] else 1)


# ---- the driver -----------------------------------------------------------------------------


def run_one(args, workload, allocator):
    conf = dict(launch.ALLOCATOR_ENV[allocator])
    if allocator.startswith("strata"):
        # The cap as strata's physical memory limit: a pluggable allocator does not see PyTorch's
        # fraction.
        conf["STRATA_ALLOC_CONF"] = ",".join(
            filter(None, [conf.get("STRATA_ALLOC_CONF"),
                          f"gpu_memory_limit_mb:{int(args.cap_gib * 1024)}"]))
    env = launch.child_env(allocator, args.lib, conf)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", workload, allocator,
           "--cap-gib", str(args.cap_gib), "--start", str(args.start), "--steps",
           str(args.steps), "--max-size", str(args.max_size), "--device", str(args.device)]
    if args.lib:
        cmd += ["--lib", os.path.abspath(args.lib)]
    r, err, rc, wall = launch.run_child(cmd, env, args.timeout, RESULT_PREFIX)
    if r is None:
        r = {"workload": workload, "allocator": allocator, "ok": False,
             "error": f"timeout after {args.timeout} s" if rc is None else
             f"exit status {rc}: " + " | ".join(err.strip().splitlines()[-3:])[-400:]}
        # A search stopped by the timeout still tells how far it got.
        done = [int(line.split()[4]) for line in err.splitlines()
                if line.startswith("CAPACITY_PROGRESS ") and len(line.split()) >= 6]
        if done:
            r["at_least"] = max(done)
    r["wall_s"] = round(wall, 1)
    return r


def physical_floor(runs, cap):
    """The largest size whose peak allocated fits `cap`, from a least-squares line through the
    (size, peak allocated) points of every run; None with fewer than two sizes, or where the
    peak does not grow with the size in most steps."""
    points = [(s["size"], s["peak_allocated"]) for r in runs if r.get("ok")
              for s in r["sizes"] if s.get("peak_allocated")]
    sizes = {p[0] for p in points}
    if len(sizes) < 2:
        return None
    # A workload whose size only bounds random draws (bert_infer_dynamic's batch) peaks with the
    # draws: most steps of one size to the next leave the peak where it was, and a line through
    # such points says nothing about the cap.
    steps = [(a["peak_allocated"], b["peak_allocated"]) for r in runs if r.get("ok")
             for a, b in zip(r["sizes"], r["sizes"][1:])
             if a.get("peak_allocated") and b.get("peak_allocated")]
    if steps and sum(b > a for a, b in steps) * 2 < len(steps):
        return None
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    slope = sum((p[0] - mx) * (p[1] - my) for p in points) / sxx
    if slope <= 0:
        return None
    return math.floor((cap - (my - slope * mx)) / slope)


def make_table(results, workloads, allocs, cap_gib):
    lines = [f"Largest size that trains under a cap of {cap_gib:g} GiB (floor: the largest size "
             "whose peak allocated fits the cap, estimated)", "",
             "| workload | floor | " + " | ".join(allocs) + " |",
             "|---|---|" + "---|" * len(allocs)]
    for w in workloads:
        runs = [r for r in results if r["workload"] == w]
        floor = physical_floor(runs, cap_gib * GIB)
        cells = []
        for a in allocs:
            r = next((x for x in runs if x["allocator"] == a), None)
            cells.append(str(r["largest"]) if r and r.get("ok") else
                         f"≥{r['at_least']} (stopped: {r['error']})" if r and "at_least" in r else
                         "error" if r else "")
        lines.append(f"| {w} | {'~' + str(floor) if floor is not None else '?'} | " +
                     " | ".join(cells) + " |")
    return "\n".join(lines)


def driver(args):
    workloads = [w for w in args.workloads.split(",") if w]
    allocs = [a for a in args.allocators.split(",") if a]
    for a in allocs:
        if a not in ALLOCATORS:
            sys.exit(f"capacity: unknown allocator {a!r}; known: {', '.join(ALLOCATORS)}")
        if a.startswith("strata") and not args.lib:
            sys.exit("capacity: the strata allocators need --lib (path of libstrata_c.so)")
    results = []
    for w in workloads:
        for a in allocs:
            r = run_one(args, w, a)
            results.append(r)
            status = f"largest {r['largest']}" if r.get("ok") else f"error: {r.get('error')}"
            print(f"{w} {a}: {status} ({r['wall_s']} s)", file=sys.stderr, flush=True)
    print(make_table(results, workloads, allocs, args.cap_gib))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"cap_gib": args.cap_gib, "results": results}, f, indent=1)
    return 0 if all(r.get("ok") for r in results) else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lib", default=os.environ.get("STRATA_C_LIB"),
                   help="libstrata_c.so (for the strata allocators)")
    p.add_argument("--cap-gib", type=float, required=True, help="the memory cap, GiB")
    p.add_argument("--workloads", default="gpt2_train")
    p.add_argument("--allocators", default=",".join(ALLOCATORS))
    p.add_argument("--start", type=int, default=1, help="the first size tried (default 1)")
    p.add_argument("--max-size", type=int, default=1024, help="the last size tried")
    p.add_argument("--steps", type=int, default=2, help="steps at each size (default 2)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per run (default 600)")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--out", default=None, help="write all results as JSON here")
    p.add_argument("--child", nargs=2, metavar=("WORKLOAD", "ALLOCATOR"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.cap_gib <= 0:
        p.error("--cap-gib must be positive")
    if args.start < 1 or args.max_size < args.start:
        p.error("--start must be at least 1 and at most --max-size")
    if args.child:
        child(args)
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
