"""replay_min_cap: the smallest memory cap each trace replays under (standard library).

Capacity without a GPU: the capacity benchmark (tools/e2e/capacity.py) caps strata with
``gpu_memory_limit_mb`` and looks for the largest batch that runs; on a recording of one batch
the same question reads the other way: the smallest limit, in MiB, under which ``strata-replay``
runs the trace to its end without running out of memory. The table gives it next to the trace's
peak requested bytes, once with the device in step with the host and once ``--lag`` kernels
behind (pages of pending work cannot be stitched, so a cap can hold at lag 0 and not under lag).
A cap is found by bisection between the peak requested and ``--max-over`` times it, so it
assumes that a larger cap never fails where a smaller one ran.

    python3 tools/replay_min_cap.py [--replay build/bin/strata-replay] [--trace-dir DIR ...]
        [--lag 8] [--max-over 1.3] [--json out.json] [-- <strata-replay flags>]

Traces: every ``*.trace`` and ``*.trace.gz`` of each ``--trace-dir`` (default:
tools/traces/capacity). Exit status 1 when a replay fails for another reason than memory, 2 on
bad arguments.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from typing import Callable, Dict, List, Optional, Sequence

import replay_set

MIB = 1 << 20


def smallest_cap(fits: Callable[[int], bool], low: int, high: int) -> Optional[int]:
    """The smallest cap c in [low, high] with fits(c), by bisection (fits must be monotone);
    None when high does not fit."""
    if low > high:
        raise ValueError(f"empty range [{low}, {high}]")
    if not fits(high):
        return None
    while low < high:
        mid = (low + high) // 2
        if fits(mid):
            high = mid
        else:
            low = mid + 1
    return high


def ran_to_the_end(result: Dict) -> bool:
    """Whether a strata-replay --json result replayed every event (no out-of-memory)."""
    return not result.get("oom_message") and int(result.get("ooms", 0)) == 0


def replay_capped(binary: str, trace: str, flags: Sequence[str], timeout: float) -> Dict:
    """One strata-replay --json run whose running out of memory is a result, not a failure (it
    exits non-zero then, with its JSON); raises RuntimeError on any other failure."""
    proc = subprocess.run([binary, f"--trace={trace}", "--json", *flags], capture_output=True,
                          text=True, timeout=timeout, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    result = json.loads(lines[-1]) if lines else None
    if result is not None and (proc.returncode == 0 or not ran_to_the_end(result)):
        return result
    raise RuntimeError((proc.stderr.strip() or proc.stdout.strip() or "no output")[-300:])


def min_cap(binary: str, trace: str, lag: int, max_over: float, flags: Sequence[str],
            timeout: float) -> Dict:
    """The trace's peak requested (MiB) and its smallest cap (MiB, None past max_over)."""
    lag_flags = [f"--device_lag={lag}"] if lag else []
    free = replay_set.replay(binary, trace, [*lag_flags, *flags], timeout)
    requested = int(free["peak_requested_bytes"]) / MIB

    def fits(cap: int) -> bool:
        r = replay_capped(binary, trace, [f"--gpu_memory_limit_mb={cap}", *lag_flags, *flags],
                          timeout)
        return ran_to_the_end(r)

    cap = smallest_cap(fits, max(1, math.floor(requested)), math.ceil(requested * max_over))
    return {"requested_mib": requested, "cap_mib": cap}


def format_cell(c: Optional[Dict]) -> str:
    if c is None:
        return "error"
    if c["cap_mib"] is None:
        return "none"
    return f"{c['cap_mib']} ({c['cap_mib'] / c['requested_mib']:.4f})"


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv, extra = replay_set.split_flags(argv)
    p = replay_set.parser(__doc__)
    p.add_argument("--lag", type=int, default=8, help="device lag of the second column")
    p.add_argument("--max-over", type=float, default=1.3,
                   help="the largest cap tried, over the peak requested")
    args = p.parse_args(argv)
    if args.lag < 1 or not args.max_over >= 1.0:
        p.error("--lag must be at least 1 and --max-over at least 1")
    traces = replay_set.traces_to_replay(
        p, args, [os.path.join(replay_set.ROOT, "tools", "traces", "capacity")])

    titles = ["smallest cap, MiB (over requested)", f"the same, lag {args.lag}"]
    out = ["| trace | peak requested, MiB | " + " | ".join(titles) + " |", "|---" * 4 + "|"]
    cells: Dict[str, List[Optional[Dict]]] = {}
    failed = False
    for t in traces:
        name = os.path.basename(t).split(".trace")[0]
        row: List[Optional[Dict]] = []
        for lag in (0, args.lag):
            try:
                row.append(min_cap(args.replay, t, lag, args.max_over, extra, args.timeout))
            except (RuntimeError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
                print(f"{name}, lag {lag}: {e}", file=sys.stderr)
                row.append(None)
                failed = True
        cells[name] = row
        requested = next((c["requested_mib"] for c in row if c is not None), None)
        out.append(f"| {name} | " + (f"{requested:.2f}" if requested is not None else "-") +
                   " | " + " | ".join(format_cell(c) for c in row) + " |")
    print("\n".join(out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"flags": extra, "lag": args.lag, "traces": cells}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
