"""The host's speed around each timed step, and the steps a run took while the host was fast.

The hosts these benchmarks run on (shared virtual machines) run in phases: on an H100 host a
pure-Python loop took 68-79 ns an iteration in some stretches and 127-146 ns in others, and
`torch.empty` + `del` took twice as long in the same stretches under every allocator
(docs/benchmarks/2026-11-27-run32.md). A step whose time is the host's (a decoder's token loop
launches small kernels one after the other) then takes up to twice as long whatever the allocator,
and medians over processes that ran in different phases rank the phases, not the allocators.

So each run times the loop below before every timed step and once after the last
(`host_probe_ns`), outside the timed region, and `fast_steps` keeps the steps whose probes on both
sides are within `tolerance` of the fastest probe among the runs compared: the steps taken at the
host's full speed. Standard library only.
"""

import statistics
import time

# About 0.5 ms at full speed (26-30 ns an iteration on run 32's H100s, up to 168 in a slow
# phase): small beside a step, long enough to be seen in a slow phase.
PROBE_ITERATIONS = 20000
# Fast and slow phases differ by 1.6-2x; probes within one phase by up to 1.16x.
DEFAULT_TOLERANCE = 1.25


def probe():
    """Nanoseconds per iteration of a fixed pure-Python loop."""
    t0 = time.perf_counter_ns()
    s = 0
    for i in range(PROBE_ITERATIONS):
        s += i
    return (time.perf_counter_ns() - t0) / PROBE_ITERATIONS


def fast_steps(step_ms, probes, reference, tolerance=DEFAULT_TOLERANCE):
    """The times of the steps of one run taken at the host's full speed: step j counts when
    probes[j] (before it) and probes[j + 1] (after it) are both at most `tolerance` times
    `reference`. Raises ValueError unless there is one probe more than steps."""
    if len(probes) != len(step_ms) + 1:
        raise ValueError(f"{len(step_ms)} steps need {len(step_ms) + 1} probes, not {len(probes)}")
    if reference <= 0 or tolerance < 1:
        raise ValueError(f"reference {reference} and tolerance {tolerance}: need > 0 and >= 1")
    limit = reference * tolerance
    return [t for j, t in enumerate(step_ms) if max(probes[j], probes[j + 1]) <= limit]


def fast_phase_medians(runs, tolerance=DEFAULT_TOLERANCE):
    """Per allocator, over `runs` (one workload's successful runs: dicts with "allocator",
    "step_ms" and "host_probe_ns"; several rounds pool their steps): (median of the steps taken at
    full speed or None, how many, how many steps in all). The reference is the fastest probe of
    all the runs. Runs without probes are left out; {} when none has them."""
    probed = [r for r in runs if r.get("host_probe_ns") and r.get("step_ms")]
    if not probed:
        return {}
    reference = min(min(r["host_probe_ns"]) for r in probed)
    fast, total = {}, {}
    for r in probed:
        a = r["allocator"]
        fast.setdefault(a, []).extend(
            fast_steps(r["step_ms"], r["host_probe_ns"], reference, tolerance))
        total[a] = total.get(a, 0) + len(r["step_ms"])
    return {a: (statistics.median(f) if f else None, len(f), total[a]) for a, f in fast.items()}
