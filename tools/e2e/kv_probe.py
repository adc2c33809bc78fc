"""KV caches grown by concatenation, alone: the allocation pattern of a decoder that appends each
token's keys and values with torch.cat (transformers' DynamicCache) at a large batch.

`caches` tensors are each replaced every token by one a row larger (the new one allocated before
the old one goes), from one row up to `rows` rows of `row_kib` KiB, for `prompts` prompts a pass;
the pass ends with every cache freed. Nothing runs on the device: only the allocator works.

    python3 tools/e2e/kv_probe.py --allocator torch_expandable [--lib libstrata_c.so] \
        [--row-kib 256] [--caches 8] [--rows 256] [--prompts 4] [--passes 16]
    python3 tools/e2e/kv_probe.py --trace kv_probe.trace.gz [--row-kib ...]   # for strata-replay

With --allocator (torch_default, torch_expandable, torch_cuda_async, strata, strata_chunk; the
process's environment must already select a PyTorch mode, as run_e2e.py sets it) it prints one
line `KV_PROBE {json}`: per pass the host ns per allocation (torch.empty, Python included) and,
for strata, the maps it made; then peak reserved over peak allocated. With --trace it writes the
same pattern (one pass) as a strata trace instead, and needs no torch.
"""

import argparse
import gzip
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def pattern(caches, rows, prompts):
    """Yields (cache, rows) for each allocation of one pass, in order."""
    for _ in range(prompts):
        for r in range(1, rows + 1):
            for k in range(caches):
                yield k, r


def write_trace(path, args):
    row = args.row_kib * 1024
    lines = ["# " + json.dumps({"workload": "kv_probe", "row_kib": args.row_kib,
                                "caches": args.caches, "rows": args.rows,
                                "prompts": args.prompts})]
    live = [None] * args.caches
    next_id = 0
    for k, r in pattern(args.caches, args.rows, args.prompts):
        lines.append(f"a {next_id} {r * row} 0")
        if live[k] is not None:
            lines.append(f"f {live[k]} 0")
        live[k] = next_id
        next_id += 1
    lines += [f"f {i} 0" for i in live if i is not None]
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")


def run(args):
    sys.path.insert(0, HERE)
    import torch

    import allocators

    alloc = allocators.setup(args.allocator, 0, args.lib)
    dev = torch.device("cuda", 0)
    row = args.row_kib * 1024

    def maps():
        return alloc.stats().get("num_device_map")

    result = {"allocator": args.allocator, "row_kib": args.row_kib, "caches": args.caches,
              "rows": args.rows, "prompts": args.prompts, "passes": []}
    for _ in range(args.passes):
        before = maps()
        live = [None] * args.caches
        n = 0
        t0 = time.perf_counter()
        for k, r in pattern(args.caches, args.rows, args.prompts):
            live[k] = torch.empty(r * row, dtype=torch.uint8, device=dev)
            n += 1
        live = None
        ns = (time.perf_counter() - t0) / n * 1e9
        after = maps()
        result["passes"].append({"ns_per_alloc": round(ns),
                                 "maps": None if after is None else after - before})
    s = alloc.stats()
    reserved, allocated = s.get("reserved_bytes.all.peak", 0), s.get("allocated_bytes.all.peak", 0)
    result["peak_reserved_gib"] = round(reserved / 2**30, 3)
    result["reserved_over_allocated"] = round(reserved / allocated, 4) if allocated else None
    print("KV_PROBE " + json.dumps(result), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--allocator", help="run the pattern under this allocator")
    p.add_argument("--lib", default=os.environ.get("STRATA_C_LIB"),
                   help="libstrata_c.so for the strata allocators")
    p.add_argument("--trace", help="write the pattern as a strata trace (.trace.gz) instead")
    p.add_argument("--row-kib", type=int, default=256)
    p.add_argument("--caches", type=int, default=8)
    p.add_argument("--rows", type=int, default=256)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--passes", type=int, default=16)
    args = p.parse_args()
    for name in ("row_kib", "caches", "rows", "prompts", "passes"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if (args.trace is None) == (args.allocator is None):
        p.error("give exactly one of --allocator and --trace")
    if args.trace:
        write_trace(args.trace, args)
    else:
        run(args)


if __name__ == "__main__":
    main()
