#!/usr/bin/env python3
"""End-to-end benchmark: real PyTorch models under several CUDA allocators, one process per run.

For each workload (tools/e2e/workloads.py) and allocator (tools/e2e/allocators.py) the driver
starts a fresh Python process that installs the allocator before any CUDA allocation, builds the
model from fixed seeds, runs a few warm-up steps and then the timed steps, and prints one JSON
line. The driver then prints one markdown table and writes all results as JSON.

    python3 tools/e2e/run_e2e.py --lib gpu-bundle/e2e/libstrata_c.so \\
        [--workloads resnet50_train,gpt2_train] [--allocators torch_default,strata] \\
        [--warmup 3] [--steps 10] [--rounds 3] [--timeout 180] [--out results.json] \\
        [--strata-conf K:V,...] [--kernel-time]

Allocators: torch_default (PyTorch's caching allocator), torch_expandable
(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), torch_cuda_async
(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync), strata (libstrata_c.so through
CUDAPluggableAllocator; needs --lib: its defaults, the device-wide pool on virtual memory),
strata_chunk (the same with STRATA_ALLOC_CONF=expandable_segments:False: the chunk pool). For strata runs, the folder `lib/` beside the library (what
a bundle of its shared-library dependencies holds) is put in front of LD_LIBRARY_PATH when it
exists.

Figures per run: peak reserved and peak allocated bytes over the whole process (model set-up
included): torch.cuda.memory_stats() for PyTorch's modes, strata_memory_stats_json for strata
(same keys, "reserved_bytes.all.peak" and "allocated_bytes.all.peak"); the median time of the
timed steps (torch.cuda.synchronize() before and after each), and the time of the first step (the
cold one: the allocator's growth, with the model's own first-call costs); device allocation / free counts
where the allocator reports them, over the whole run and over the timed steps alone (with map /
unmap and cross-stream wait counts for strata: what a warm step still costs). Per workload, "reserved / min alloc" is an allocator's peak
reserved divided by the smallest peak allocated among the successful runs of that workload (the
memory the workload needed at least); the last rows give each allocator's geometric mean of that
ratio over the workloads it completed, and of its step time relative to torch_default. A run
that fails or times out shows as an error cell; the driver carries on.

Step times move by tens of percent between processes on a shared host, so one run per allocator
does not rank them. `--rounds N` runs each workload's allocators N times, alternating the order
(as given, then reversed, ...), and the table gives the median of the rounds' medians with their
range (min-max); memory and device calls are the largest of the rounds. The host itself runs in
phases up to twice as fast as each other, which move a host-bound step as much: a second table
gives each allocator's median over the steps taken while the host ran at full speed (a pure-Python
probe around each step, tools/e2e/host_phase.py; `--phase-tolerance`). With `--kernel-time` it
also gives the device time of one more step, profiled: the summed durations of its kernels. Where
that is the same under every allocator, a difference in step time is the host's, not the
memory's layout.

Python 3 standard library only in the driver; the runs need torch, torchvision and transformers.
Internal: `run_e2e.py --child WORKLOAD ALLOCATOR ...` is one run (what the driver starts).
"""

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time

import host_phase
import launch

HERE = os.path.dirname(os.path.abspath(__file__))
RESULT_PREFIX = "E2E_RESULT "
ALLOCATORS = launch.ALLOCATORS
WORKLOADS = ["resnet50_train", "gpt2_train", "bert_infer_dynamic", "resnet18_side_stream",
             "multi_model_streams", "llm_decode_kv", "resnet50_varbatch_train",
             "detection_varsize_train", "seq2seq_random_len_train", "llm_generate_hf"]


# ---- one run (child process) ----------------------------------------------------------------


def child(args):
    result = {"workload": args.child[0], "allocator": args.child[1], "ok": False}
    try:
        _child_run(args, result)
        result["ok"] = True
    except BaseException as e:  # noqa: BLE001 - reported to the driver, whatever it is
        result["error"] = f"{type(e).__name__}: {e}"[:500]
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    sys.exit(0 if result["ok"] else 1)


def _child_run(args, result):
    sys.path.insert(0, HERE)
    import torch

    import allocators
    import workloads

    workload, allocator = args.child
    dev = args.device
    alloc = allocators.setup(allocator, dev, args.lib)  # before any CUDA allocation
    torch.cuda.set_device(dev)
    device = torch.device("cuda", dev)
    alloc.check()
    result.update({
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(device),
        "allocator_info": alloc.info,
    })

    w = workloads.build(workload, device)
    result["description"] = w.description
    times_ms = []
    probes_ns = []  # the host's speed before each timed step and after the last (host_phase.py)
    loss = None
    warm_from = {}
    for i in range(args.warmup + args.steps):
        torch.cuda.synchronize(device)
        if i == args.warmup:
            warm_from = alloc.stats()
        if i >= args.warmup:
            probes_ns.append(host_phase.probe())
        if args.log_steps:  # marks the allocator's log (stderr) between steps
            print(f"E2E_STEP {i}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        loss = w.step()
        torch.cuda.synchronize(device)
        if i == 0:  # the cold step: what the allocator's growth costs a fresh process
            result["first_step_ms"] = (time.perf_counter() - t0) * 1e3
        if i >= args.warmup:
            times_ms.append((time.perf_counter() - t0) * 1e3)
    if times_ms:
        probes_ns.append(host_phase.probe())
    if args.kernel_time:
        result["kernel_ms"], result["kernels"] = kernel_time(w.step, device)
    if isinstance(loss, (list, tuple)):
        values = [float(v) for v in loss]
    else:
        values = [] if loss is None else [float(loss)]
    if not all(math.isfinite(v) for v in values):
        raise RuntimeError(f"non-finite loss {values}")
    result["last_loss"] = values
    result["step_ms"] = times_ms
    result["host_probe_ns"] = probes_ns
    result["median_ms"] = statistics.median(times_ms) if times_ms else None

    stats = alloc.stats()
    # What the timed (warm) steps cost the allocator: device calls and stream waits there.
    result["warm_stats"] = {k: stats[k] - warm_from[k] for k in allocators.EXTRA_KEYS
                            if k.startswith("num_") and k in stats and k in warm_from}
    result["peak_reserved"] = stats.get("reserved_bytes.all.peak")
    result["peak_allocated"] = stats.get("allocated_bytes.all.peak")
    result["stats"] = {k: stats[k] for k in allocators.EXTRA_KEYS if k in stats}
    if result["peak_reserved"] is None or result["peak_allocated"] is None:
        raise RuntimeError("the allocator reported no peak reserved/allocated bytes")

    # empty_cache reaches the allocator (strata: through the reset_fn hook)?
    del w, loss
    import gc

    gc.collect()
    torch.cuda.synchronize(device)
    before = alloc.stats().get("reserved_bytes.all.current")
    alloc.empty_cache()
    after = alloc.stats().get("reserved_bytes.all.current")
    result["empty_cache_reserved_before_after"] = [before, after]


def kernel_time(step, device):
    """The device time of one more step: the summed durations of its kernels and copies
    (torch.profiler), and their number. A step that is host-bound spends the same device time under
    every allocator unless the allocator's memory slows the kernels: this tells the two apart."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize(device)
    total_us, count = 0.0, 0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            total_us += e.device_time_total
            count += 1
    return total_us / 1e3, count


# ---- the driver -----------------------------------------------------------------------------


def gib(n):
    return f"{n / 2**30:.2f}"


def run_one(args, workload, allocator):
    conf = dict(launch.ALLOCATOR_ENV[allocator])
    if args.strata_conf and allocator == "strata":
        conf["STRATA_ALLOC_CONF"] = args.strata_conf
    env = launch.child_env(allocator, args.lib, conf)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", workload, allocator,
           "--warmup", str(args.warmup), "--steps", str(args.steps), "--device", str(args.device)]
    if args.lib:
        cmd += ["--lib", os.path.abspath(args.lib)]
    if args.kernel_time:
        cmd.append("--kernel-time")
    r, err, rc, wall = launch.run_child(cmd, env, args.timeout, RESULT_PREFIX)
    if r is None:
        r = {"workload": workload, "allocator": allocator, "ok": False}
        if rc is None:
            r["error"] = f"timeout after {args.timeout} s"
        else:
            tail = [l for l in err.strip().splitlines() if l.strip()][-3:]
            r["error"] = f"exit status {rc}: " + " | ".join(tail)[-400:]
    if not r["ok"]:
        r["stderr_tail"] = err[-3000:]
    r["wall_s"] = round(wall, 1)
    return r


def merge_rounds(rounds):
    """One row from the runs of one (workload, allocator) in several rounds: the median of the
    medians and their range, the largest peaks and device-call counts (the worst round), the
    smallest peak allocated (what the workload needed at least)."""
    if len(rounds) == 1:
        return rounds[0]
    failed = [r for r in rounds if not r["ok"]]
    if failed:
        return failed[0]
    m = dict(rounds[0])
    medians = [r["median_ms"] for r in rounds if r.get("median_ms") is not None]
    m["median_ms"] = statistics.median(medians) if medians else None
    m["round_medians_ms"] = medians
    m["first_step_ms"] = statistics.median(r.get("first_step_ms", 0) for r in rounds)
    m["peak_reserved"] = max(r["peak_reserved"] for r in rounds)
    m["peak_allocated"] = min(r["peak_allocated"] for r in rounds)
    for key in ("stats", "warm_stats"):
        merged = {}
        for r in rounds:
            for k, v in r.get(key, {}).items():
                if isinstance(v, (int, float)):
                    merged[k] = max(merged.get(k, v), v)
        m[key] = merged
    return m


def round_orders(allocs, rounds):
    """The allocators' order in each round: as given, then reversed, and so on, so that no
    allocator always runs first on a fresh machine or right after the same neighbour."""
    return [list(allocs) if i % 2 == 0 else list(reversed(allocs)) for i in range(rounds)]


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


WARM_CALLS = [("num_device_alloc", "alloc"), ("num_device_free", "free"),
              ("num_device_map", "map"), ("num_device_unmap", "unmap"),
              ("num_stream_waits", "stream wait"), ("num_host_waits", "host wait")]


def warm_calls(allocator, warm):
    """The device calls (and stream waits) of the timed steps, those that happened."""
    if allocator == "torch_cuda_async" or not warm:
        return "n/a"
    parts = [f"{warm[k]} {name}" for k, name in WARM_CALLS if warm.get(k)]
    return ", ".join(parts) if parts else "0"


def step_ms(r):
    """The median step, with the range of the rounds' medians when there were several."""
    spread = r.get("round_medians_ms")
    if not spread:
        return f"{r['median_ms']:.1f}"
    return f"{r['median_ms']:.1f} ({min(spread):.1f}-{max(spread):.1f})"


def make_table(runs, workloads, allocs):
    grouped = {}
    for r in runs:
        grouped.setdefault((r["workload"], r["allocator"]), []).append(r)
    by = {k: merge_rounds(v) for k, v in grouped.items()}
    rows = ["| workload | allocator | peak reserved GiB | peak allocated GiB | reserved / min alloc "
            "| median step ms | step vs default | first step ms | device allocs / frees "
            "| warm-step device calls |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    ratios = {a: [] for a in allocs}
    speed = {a: [] for a in allocs}
    for w in workloads:
        ok = [by[(w, a)] for a in allocs if (w, a) in by and by[(w, a)]["ok"]]
        floor = min((r["peak_allocated"] for r in ok), default=None)
        base = by.get((w, "torch_default"))
        base_ms = base["median_ms"] if base and base["ok"] else None
        for a in allocs:
            r = by.get((w, a))
            if r is None:
                continue
            if not r["ok"]:
                rows.append(f"| {w} | {a} | ERROR: {r.get('error', '?').replace('|', '/')} "
                            "| | | | | | | |")
                continue
            ratio = r["peak_reserved"] / floor if floor else None
            ratios[a].append(ratio)
            rel = r["median_ms"] / base_ms if base_ms and r["median_ms"] else None
            speed[a].append(rel)
            s = r.get("stats", {})
            # cudaMallocAsync's pool grows without PyTorch seeing device allocations.
            dev = (f"{s['num_device_alloc']} / {s['num_device_free']}"
                   if a != "torch_cuda_async" and "num_device_alloc" in s
                   and "num_device_free" in s else "n/a")
            rows.append(f"| {w} | {a} | {gib(r['peak_reserved'])} | {gib(r['peak_allocated'])} "
                        f"| {ratio:.3f} | {step_ms(r)} "
                        f"| {'' if rel is None else f'{rel:.2f}'} "
                        f"| {r.get('first_step_ms', 0):.1f} | {dev} "
                        f"| {warm_calls(a, r.get('warm_stats', {}))} |")
    for a in allocs:
        gm, gs = geomean(ratios[a]), geomean(speed[a])
        n = len([x for x in ratios[a] if x])
        rows.append(f"| **geometric mean** ({n}/{len(workloads)} workloads) | {a} | | "
                    f"| **{'' if gm is None else f'{gm:.3f}'}** | "
                    f"| {'' if gs is None else f'{gs:.2f}'} | | | |")
    return "\n".join(rows)


def kernel_ms(runs):
    """The median over `runs` (one workload and allocator) of the profiled step's device time, or
    None when none was profiled."""
    ms = [r["kernel_ms"] for r in runs if r.get("kernel_ms") is not None]
    return statistics.median(ms) if ms else None


def make_phase_table(runs, workloads, allocs, tolerance):
    """Per workload and allocator, the median of the timed steps taken at the host's full speed
    (host_phase.py), pooled over the rounds, and its ratio to the fastest allocator's; with
    --kernel-time, the device time of a profiled step too (the median over the rounds)."""
    profiled = any(r.get("kernel_ms") is not None for r in runs)
    extra = (" device ms of a step (kernels) |", "---|") if profiled else ("", "")
    rows = ["| workload | allocator | median step ms, host at full speed | steps at full speed "
            "| vs fastest |" + extra[0], "|---|---|---|---|---|" + extra[1]]
    for w in workloads:
        ok = [r for r in runs if r["workload"] == w and r["ok"]]
        med = host_phase.fast_phase_medians(ok, tolerance)
        best = min((m for m, _, _ in med.values() if m is not None), default=None)
        for a in allocs:
            if a not in med:
                continue
            m, n, total = med[a]
            row = (f"| {w} | {a} | {'' if m is None else f'{m:.1f}'} | {n} of {total} "
                   f"| {'' if m is None or not best else f'{m / best:.2f}'} |")
            if profiled:
                k = kernel_ms([r for r in ok if r["allocator"] == a])
                row += f" {'' if k is None else f'{k:.1f}'} |"
            rows.append(row)
    return "\n".join(rows)


def _selected(text, known, what):
    """The names in the comma-separated `text`, in order; exits at the first that is not in
    `known`."""
    names = [n for n in text.split(",") if n]
    for n in names:
        if n not in known:
            sys.exit(f"unknown {what} {n!r}; known: {', '.join(known)}")
    return names


def report(r, w, a, t_start, args):
    """One line on stderr as each run ends."""
    if r["ok"]:
        msg = (f"reserved {gib(r['peak_reserved'])} GiB, allocated "
               f"{gib(r['peak_allocated'])} GiB, {r['median_ms']:.1f} ms/step")
    else:
        msg = "FAILED: " + r.get("error", "?")
    rnd = f" round {r['round']}" if args.rounds > 1 else ""
    print(f"[{time.time() - t_start:6.1f} s] {w} / {a}{rnd} ({r['wall_s']} s): {msg}",
          file=sys.stderr, flush=True)
    if not r["ok"] and args.verbose:
        print(r.get("stderr_tail", ""), file=sys.stderr, flush=True)


def driver(args):
    allocs = _selected(args.allocators, ALLOCATORS, "allocator")
    workloads = _selected(args.workloads, WORKLOADS, "workload")
    if args.rounds < 1:
        sys.exit(f"--rounds must be at least 1, not {args.rounds}")
    if not args.phase_tolerance >= 1:
        sys.exit(f"--phase-tolerance must be at least 1, not {args.phase_tolerance}")
    if any(a.startswith("strata") for a in allocs) and not args.lib:
        sys.exit("the strata allocator needs --lib PATH/libstrata_c.so")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    driver_version = ""
    try:
        driver_version = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=30,
        ).stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    runs = []
    t_start = time.time()
    orders = round_orders(allocs, args.rounds)
    for w in workloads:
        for rnd, order in enumerate(orders):
            for a in order:
                r = run_one(args, w, a)
                r["round"] = rnd + 1
                runs.append(r)
                report(r, w, a, t_start, args)
                if args.out:  # so far, in case the whole benchmark is stopped
                    with open(args.out, "w") as f:
                        json.dump({"runs": runs}, f, indent=1)
    meta_src = next((r for r in runs if r.get("gpu")), {})
    strata_run = next((r for r in runs if r["allocator"] == "strata" and r.get("allocator_info")),
                      None)
    meta = {
        "date": date,
        "gpu": meta_src.get("gpu", "?"),
        "driver": driver_version,
        "torch": meta_src.get("torch", "?"),
        "cuda": meta_src.get("cuda", "?"),
        "warmup_steps": args.warmup,
        "timed_steps": args.steps,
        "rounds": args.rounds,
        "command": " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]),
        "strata_hooks": strata_run["allocator_info"] if strata_run else None,
        "total_s": round(time.time() - t_start, 1),
    }
    table = make_table(runs, workloads, allocs)
    phase_table = make_phase_table(runs, workloads, allocs, args.phase_tolerance)
    print(f"GPU: {meta['gpu']} (driver {meta['driver'] or '?'}), torch {meta['torch']} "
          f"(CUDA {meta['cuda']}), {meta['date']}; {args.warmup} warm-up + {args.steps} timed "
          f"steps per run; {args.rounds} round(s); total {meta['total_s']} s")
    if strata_run:
        info = strata_run["allocator_info"]
        print(f"strata hooks: record_stream_fn: {info.get('record_stream_fn')}; "
              f"reset_fn: {info.get('reset_fn')}")
    print()
    print(table)
    print()
    print(f"Steps taken while the host ran at full speed (its probes within "
          f"{args.phase_tolerance}x of the fastest of the workload's runs: host_phase.py):")
    print()
    print(phase_table)
    print()
    for r in runs:
        if r["ok"]:
            print(f"- {r['workload']} / {r['allocator']}: last loss {r.get('last_loss')}, "
                  f"empty_cache reserved before/after {r.get('empty_cache_reserved_before_after')}"
                  f", stats {r.get('stats')}")
    descs = {}
    for r in runs:
        if r.get("description"):
            descs.setdefault(r["workload"], r["description"])
    print()
    for w in workloads:
        print(f"- {w}: {descs.get(w, '?')}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "runs": runs, "table": table, "phase_table": phase_table},
                      f, indent=1)
    return 0 if all(r["ok"] for r in runs) else 1


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", default=os.environ.get("STRATA_C_LIB"),
                   help="path of libstrata_c.so (default: $STRATA_C_LIB)")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--allocators", default=",".join(ALLOCATORS))
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--steps", type=int, default=10, help="timed steps (default 10)")
    p.add_argument("--timeout", type=float, default=180, help="seconds per run (default 180)")
    p.add_argument("--rounds", type=int, default=1,
                   help="run each workload's allocators this many times, alternating the order; "
                        "the table gives the median step of the rounds and its range (default 1)")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--phase-tolerance", type=float, default=host_phase.DEFAULT_TOLERANCE,
                   help="steps count as taken at the host's full speed when the host probes "
                        "around them are within this factor of the fastest (default "
                        f"{host_phase.DEFAULT_TOLERANCE}; host_phase.py)")
    p.add_argument("--kernel-time", action="store_true",
                   help="profile one more step (torch.profiler) and give its device time: the "
                        "kernels' summed durations, which host phases do not move")
    p.add_argument("--strata-conf", default=None,
                   help="STRATA_ALLOC_CONF for the strata runs (default: strata's defaults)")
    p.add_argument("--out", default=None, help="write all results as JSON here")
    p.add_argument("--verbose", action="store_true", help="print the stderr of failed runs")
    p.add_argument("--log-steps", action="store_true",
                   help="with --child: print E2E_STEP <i> to stderr before each step")
    p.add_argument("--child", nargs=2, metavar=("WORKLOAD", "ALLOCATOR"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
    sys.exit(driver(args))


if __name__ == "__main__":
    main()
