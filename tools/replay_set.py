"""replay_set: the virtual-memory pool's figures over a set of traces, three ways (standard library).

Each trace is replayed by ``strata-replay --json`` on the emulated device:

- once (``1 pass``): the cold run;
- three times on one allocator (``3 passes``): the last pass is a warm step of a loop;
- three times with the device 64 kernels behind the host (``3 passes, lag 64``).

Each cell gives peak reserved over peak requested, then the last pass's device calls (creates,
releases, maps and unmaps; none for one pass). The last row gives each column's geometric mean
and its total of calls. This is the table the runs in docs/benchmarks compare a change with:
run it before and after, on the same traces.

With ``--tail P`` the traces are long recordings of workloads whose shapes are drawn at random
(tools/traces/long): repeating one would replay the same shapes, so each is replayed once, at lag
0 and at ``--lag``, and the calls are those of its last P % of events (``--tail_percent``): the
warm steps, which meet shapes the first steps did not.

    python3 tools/replay_set.py [--replay build/bin/strata-replay] [--trace-dir DIR ...]
        [--lag 64] [--repeat 3 | --tail P] [--json out.json] [-- <strata-replay flags>]

Traces: every ``*.trace`` and ``*.trace.gz`` of each ``--trace-dir`` (default: tools/traces, and
``$STRATA_TRACE_DIR`` when it is set), by name; a name met twice is replayed once. Flags after
``--`` go to every replay (``--virtual_memory_page_mb=8``, say). Exit status 1 when a replay
fails (its cell says ``error``), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from typing import Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CALL_KEYS = ("device_mallocs", "device_frees", "num_device_map", "num_device_unmap")


def columns(lag: int, repeat: int, tail: int = 0) -> List[Dict]:
    """The ways each trace is replayed: a title and the flags (two with a tail, else three)."""
    if tail:
        flags = [f"--tail_percent={tail}"]
        return [{"title": f"1 pass, last {tail} %", "flags": flags},
                {"title": f"1 pass, last {tail} %, lag {lag}",
                 "flags": flags + [f"--device_lag={lag}"]}]
    return [
        {"title": "1 pass", "flags": []},
        {"title": f"{repeat} passes", "flags": [f"--repeat={repeat}"]},
        {"title": f"{repeat} passes, lag {lag}",
         "flags": [f"--repeat={repeat}", f"--device_lag={lag}"]},
    ]


def cell(result: Dict) -> Dict:
    """One replay's JSON -> its figures: fragmentation, and the last pass's device calls, or
    those of the tail of events it reported apart (None for a single pass without one, whose
    calls are the cold growth)."""
    if "fragmentation" not in result:
        raise ValueError("not a strata-replay result: no fragmentation")
    calls = None
    if "tail" in result:
        calls = sum(int(result["tail"].get(k, 0)) for k in CALL_KEYS)
    elif result.get("repeat", 1) > 1:
        last = result.get("last_pass", {})
        calls = sum(int(last.get(k, 0)) for k in CALL_KEYS)
    return {"fragmentation": float(result["fragmentation"]), "calls": calls,
            "oom": bool(result.get("oom_message"))}


def geomean(values: Sequence[float]) -> Optional[float]:
    """The geometric mean of positive values; None for none."""
    if not values:
        return None
    if any(v <= 0 for v in values):
        raise ValueError("a geometric mean needs positive values")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def find_traces(dirs: Sequence[str]) -> List[str]:
    """Every trace of `dirs`, ordered by name; the first of a name wins."""
    seen: Dict[str, str] = {}
    for d in dirs:
        if not os.path.isdir(d):
            raise ValueError(f"{d} is no directory")
        for f in sorted(os.listdir(d)):
            if f.endswith(".trace") or f.endswith(".trace.gz"):
                seen.setdefault(f.split(".trace")[0], os.path.join(d, f))
    return [seen[n] for n in sorted(seen)]


def replay(binary: str, trace: str, flags: Sequence[str], timeout: float) -> Dict:
    """One strata-replay --json run; raises RuntimeError with its message when it fails."""
    proc = subprocess.run([binary, f"--trace={trace}", "--json", *flags], capture_output=True,
                          text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError((proc.stderr.strip() or proc.stdout.strip() or "no output")[-300:])
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError("no JSON line in strata-replay's output")
    return json.loads(lines[-1])


def format_cell(c: Optional[Dict]) -> str:
    if c is None:
        return "error"
    text = f"{c['fragmentation']:.4f}"
    if c["calls"] is not None:
        text += f" / {c['calls']}"
    return text + (" (out of memory)" if c["oom"] else "")


def table(names: Sequence[str], titles: Sequence[str], rows: Sequence[Sequence[Optional[Dict]]]) -> str:
    """A markdown table of the cells, with a last row of geometric means and summed calls
    (over the traces whose three replays all ran)."""
    out = ["| trace | " + " | ".join(titles) + " |", "|---" * (len(titles) + 1) + "|"]
    for name, row in zip(names, rows):
        out.append(f"| {name} | " + " | ".join(format_cell(c) for c in row) + " |")
    complete = [row for row in rows if all(c is not None for c in row)]
    summary = []
    for i in range(len(titles)):
        g = geomean([row[i]["fragmentation"] for row in complete])
        if g is None:
            summary.append("-")
            continue
        calls = [row[i]["calls"] for row in complete if row[i]["calls"] is not None]
        summary.append(f"{g:.4f}" + (f" / {sum(calls)}" if calls else ""))
    out.append(f"| geometric mean ({len(complete)} traces) | " + " | ".join(summary) + " |")
    return "\n".join(out)


def split_flags(argv: Optional[Sequence[str]]) -> Tuple[List[str], List[str]]:
    """The command line (sys.argv's when None) before ``--``, and the strata-replay flags after."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        return argv, []
    return argv[:argv.index("--")], argv[argv.index("--") + 1:]


def parser(doc: str) -> argparse.ArgumentParser:
    """A parser with the options every replay tool here takes: --replay, --trace-dir,
    --timeout and --json."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--replay", default=os.environ.get(
        "STRATA_REPLAY", os.path.join(ROOT, "build", "bin", "strata-replay")))
    p.add_argument("--trace-dir", action="append", dest="trace_dirs")
    p.add_argument("--timeout", type=float, default=600, help="seconds a replay may take")
    p.add_argument("--json", help="also write every cell here")
    return p


def traces_to_replay(p: argparse.ArgumentParser, args: argparse.Namespace,
                     default_dirs: Sequence[str]) -> List[str]:
    """The traces of --trace-dir (else `default_dirs`), once a strata-replay is at --replay;
    a usage error (exit status 2) otherwise."""
    if not os.access(args.replay, os.X_OK):
        p.error(f"no strata-replay at {args.replay} (build it, or pass --replay)")
    dirs = args.trace_dirs or list(default_dirs)
    try:
        traces = find_traces(dirs)
    except ValueError as e:
        p.error(str(e))
    if not traces:
        p.error("no *.trace or *.trace.gz in " + ", ".join(dirs))
    return traces


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv, extra = split_flags(argv)
    p = parser(__doc__)
    p.add_argument("--lag", type=int, default=64, help="device lag of the third column")
    p.add_argument("--repeat", type=int, default=3, help="passes of the second and third")
    p.add_argument("--tail", type=int, default=0,
                   help="long recordings: one pass, lag 0 and --lag, calls of the last TAIL %%")
    args = p.parse_args(argv)
    if args.lag < 1 or args.repeat < 2:
        p.error("--lag must be at least 1 and --repeat at least 2")
    if not 0 <= args.tail <= 99:
        p.error("--tail must be a percentage from 1 to 99 (0: none)")
    traces = traces_to_replay(p, args, [os.path.join(ROOT, "tools", "traces")] + (
        [os.environ["STRATA_TRACE_DIR"]] if os.environ.get("STRATA_TRACE_DIR") else []))

    cols = columns(args.lag, args.repeat, args.tail)
    names, rows, failed = [], [], False
    for t in traces:
        names.append(os.path.basename(t).split(".trace")[0])
        row = []
        for col in cols:
            try:
                row.append(cell(replay(args.replay, t, col["flags"] + extra, args.timeout)))
            except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
                print(f"{names[-1]}, {col['title']}: {e}", file=sys.stderr)
                row.append(None)
                failed = True
        rows.append(row)
    print(table(names, [c["title"] for c in cols], rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"flags": extra, "columns": [c["title"] for c in cols],
                       "traces": dict(zip(names, rows))}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
