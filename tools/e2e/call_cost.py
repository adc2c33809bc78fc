"""Host time of one allocation and free through PyTorch, per allocator: what a framework's step
pays for each tensor it creates, with PyTorch's own dispatch included (the same for every
allocator) and the allocator's wrapper (CUDAPluggableAllocator, or strata's native adapter).

    python3 tools/e2e/call_cost.py --lib <libstrata_c.so> [--allocators a,b] [--rounds 3]

Each (allocator, round) runs in a fresh process; rounds alternate the allocators' order. Two
loops a process: `pair` creates and drops one tensor of each size in turn (a cached block each
time); `mixed` keeps 256 tensors live and replaces a random one with a tensor of a random size
from 512 B to 8 MiB (a seeded draw, the same in every process). Prints ns per pair, the fastest
of 15 repeats of 5,000 (the host's slow phases double every figure; the fastest repeat is the
host at full speed), and a table of the medians over rounds.
"""

import argparse
import json
import os
import random
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import launch  # noqa: E402

PREFIX = "CALL_COST "


def child(allocator, lib):
    import torch
    import allocators

    allocators.setup(allocator, 0, lib)
    torch.empty(1, device="cuda")
    sizes = [4096, 65536, 1 << 20, 16 << 20]
    rng = random.Random(1)
    mixed_sizes = [int(2 ** rng.uniform(9, 23)) for _ in range(4096)]
    mixed_slots = [rng.randrange(256) for _ in range(4096)]
    empty, uint8 = torch.empty, torch.uint8

    def pair_loop(n):
        for i in range(n):
            t = empty(sizes[i & 3], dtype=uint8, device="cuda")
            del t

    live = [empty(4096, dtype=uint8, device="cuda") for _ in range(256)]

    def mixed_loop(n):
        for i in range(n):
            j = i & 4095
            live[mixed_slots[j]] = empty(mixed_sizes[j], dtype=uint8, device="cuda")

    result = {"allocator": allocator}
    for name, loop in (("pair", pair_loop), ("mixed", mixed_loop)):
        loop(20000)  # warm: every size cached
        times = []
        for _ in range(15):
            t0 = time.perf_counter_ns()
            loop(5000)
            times.append((time.perf_counter_ns() - t0) / 5000)
        result[name] = min(times)
    torch.cuda.synchronize()
    print(PREFIX + json.dumps(result), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lib", help="libstrata_c.so, for the strata allocators")
    p.add_argument("--allocators", default="torch_default,strata,strata_native")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.lib)
        return
    allocs = [a for a in args.allocators.split(",") if a]
    for a in allocs:
        if a not in launch.ALLOCATORS:
            p.error(f"unknown allocator {a!r}; known: {', '.join(launch.ALLOCATORS)}")
    runs = {a: [] for a in allocs}
    for r in range(args.rounds):
        order = allocs if r % 2 == 0 else list(reversed(allocs))
        for a in order:
            cmd = [sys.executable, os.path.abspath(__file__), "--child", a]
            if args.lib:
                cmd += ["--lib", args.lib]
            env = launch.child_env(a, args.lib, launch.ALLOCATOR_ENV[a])
            result, err, rc, _ = launch.run_child(cmd, env, args.timeout, PREFIX)
            if result is None:
                print(f"{a} round {r}: failed (rc {rc})\n{err[-2000:]}", flush=True)
                continue
            runs[a].append(result)
            print(f"{a} round {r}: pair {result['pair']:.0f} ns, mixed {result['mixed']:.0f} ns",
                  flush=True)
    print("\n| allocator | pair, ns (median of rounds; range) | mixed, ns |")
    print("|---|---|---|")
    for a in allocs:
        if not runs[a]:
            print(f"| {a} | failed | failed |")
            continue
        cells = []
        for key in ("pair", "mixed"):
            v = [x[key] for x in runs[a]]
            cells.append(f"{statistics.median(v):.0f} ({min(v):.0f}-{max(v):.0f})")
        print(f"| {a} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
