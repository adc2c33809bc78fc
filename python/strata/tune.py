"""strata-tune: replays one trace under each allocator setting and recommends the leanest.

Usage::

    strata-tune TRACE_OR_SNAPSHOT [--json] [--jobs N] [--replay PATH] [--quick] [--device N]

or ``strata.tune.tune(path) -> list[dict]`` (one row a setting; also ``strata.tune(path)``).

Input: a trace (``strata-replay``'s format, plain or gzip) or a PyTorch memory snapshot pickle,
which is converted first (:mod:`strata.convert`).

Each setting is replayed twice by ``strata-replay --json`` on the emulated device: once as is
(peak reserved, fragmentation, device calls, host waits, speed) and once with ``--device_lag=64
--repeat=3``, the device 64 kernels behind the host and the trace run three times as a training
loop runs its step (peak reserved again, and the steady state's device calls: the last pass's
device mallocs, frees, maps and unmaps). A setting is given to the replay as
``STRATA_ALLOC_CONF``, so the line recommended is the one that was run; ``FLAGS_*`` and
``STRATA_ALLOC_CONF`` of the caller's environment are not passed on.

A row's ``peak_reserved_bytes`` is the higher of the two replays' peaks. The recommendation is
the row with the lowest peak among those whose steady state makes no device call (ties: fewer
device calls, then the simpler setting); if none does, the row with the fewest steady-state
calls, and the recommendation says so.

Errors: :class:`TuneError` (no strata-replay, an unreadable trace; a snapshot that cannot be
converted raises :class:`strata.convert.SnapshotError`). A replay that fails or runs out of
memory makes its row carry ``error`` and leaves it out of the recommendation.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import types
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from strata.convert import SnapshotError, convert, format_bytes

__all__ = ["TuneError", "Setting", "SETTINGS", "QUICK_SETTINGS", "find_replay", "tune",
           "recommend", "report", "main"]

LAG_FLAGS = ("--device_lag=64", "--repeat=3")
REPLAY_TIMEOUT_S = 1800


class TuneError(RuntimeError):
    """strata-tune cannot run: the message says what is missing or wrong."""


class Setting:
    """One allocator setting: ``conf`` is its STRATA_ALLOC_CONF text ("" for the defaults)."""

    def __init__(self, conf: str):
        self.conf = conf

    @property
    def name(self) -> str:
        return self.conf or "default"

    def flags(self) -> List[str]:
        """The equivalent command-line flags (expandable_segments is PyTorch's name of
        use_virtual_memory_auto_growth)."""
        out = []
        for entry in filter(None, self.conf.split(",")):
            key, _, value = entry.partition(":")
            if key == "expandable_segments":
                key, value = "use_virtual_memory_auto_growth", value.lower()
            out.append(f"--{key}={value}")
        return out

    def __repr__(self) -> str:
        return f"Setting({self.conf!r})"


# The pools (the default is the virtual-memory pool; expandable_segments:False is the chunk pool),
# the virtual-memory pool with no first stitching slack (less memory where its steps settle
# without remapping anyway), then PyTorch's knobs, which the chunk pool takes, at a few values.
# max_split_size_mb must be over 20; roundup_power2_divisions a power of two;
# garbage_collection_threshold in (0, 1).
_CHUNK = "expandable_segments:False"
_NO_SLACK = "virtual_memory_stitch_slack_permille:0"
SETTINGS = [Setting(c) for c in (
    "",
    _NO_SLACK,
    _CHUNK,
    "allocator_strategy:naive_best_fit",
    "allocator_strategy:thread_local",
    f"{_CHUNK},max_split_size_mb:64",
    f"{_CHUNK},max_split_size_mb:256",
    f"{_CHUNK},max_split_size_mb:1024",
    f"{_CHUNK},roundup_power2_divisions:2",
    f"{_CHUNK},roundup_power2_divisions:4",
    f"{_CHUNK},roundup_power2_divisions:8",
    f"{_CHUNK},garbage_collection_threshold:0.6",
    f"{_CHUNK},garbage_collection_threshold:0.8",
)]
QUICK_SETTINGS = [s for s in SETTINGS if s.conf in (
    "", _NO_SLACK, _CHUNK, "allocator_strategy:thread_local", f"{_CHUNK},max_split_size_mb:256",
    f"{_CHUNK},roundup_power2_divisions:4", f"{_CHUNK},garbage_collection_threshold:0.8")]


def find_replay(replay: Optional[str] = None) -> str:
    """The strata-replay binary: ``replay``, else $STRATA_REPLAY, else strata-replay on PATH.
    Raises TuneError when none is found or the one named is not an executable file."""
    for candidate, origin in ((replay, "--replay"), (os.environ.get("STRATA_REPLAY"),
                                                     "$STRATA_REPLAY")):
        if candidate:
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
            raise TuneError(f"{origin} names {candidate}, which is not an executable file")
    found = shutil.which("strata-replay")
    if found:
        return found
    raise TuneError("no strata-replay found: pass --replay PATH, set STRATA_REPLAY, or put the "
                    "build's bin folder on PATH (`make` builds build/bin/strata-replay)")


def _is_snapshot(path: str) -> bool:
    if os.path.exists(path) and not os.path.isfile(path):  # a FIFO would block, a device not end
        raise TuneError(f"{path}: not a regular file")
    try:
        with open(path, "rb") as f:
            return f.read(1) == b"\x80"  # a pickle of protocol 2 or later; traces are text/gzip
    except OSError as e:
        raise TuneError(f"{path}: cannot read: {e.strerror or e}") from e


def _clean_env(conf: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FLAGS_") and k != "STRATA_ALLOC_CONF"}
    env["STRATA_ALLOC_CONF"] = conf
    return env


def _replay(binary: str, trace: str, setting: Setting, lag: bool) -> Dict[str, Any]:
    """One replay's JSON, or {"error": message}."""
    cmd = [binary, f"--trace={trace}", "--json", *(LAG_FLAGS if lag else ())]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=_clean_env(setting.conf),
                           timeout=REPLAY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"the replay ran over {REPLAY_TIMEOUT_S} s"}
    except OSError as e:
        return {"error": f"cannot run {binary}: {e}"}
    if r.returncode != 0:
        lines = (r.stderr or r.stdout).strip().splitlines()
        return {"error": f"exit status {r.returncode}: {lines[-1] if lines else 'no output'}"}
    try:
        return json.loads(r.stdout)
    except ValueError:
        return {"error": f"the replay printed no JSON: {r.stdout[:200]!r}"}


def _device_calls(d: Dict[str, Any]) -> int:
    return (d.get("device_mallocs", 0) + d.get("device_frees", 0) + d.get("num_device_map", 0)
            + d.get("num_device_unmap", 0))


def _row(setting: Setting, plain: Dict[str, Any], lagged: Dict[str, Any]) -> Dict[str, Any]:
    row: Dict[str, Any] = {"setting": setting.name, "conf": setting.conf,
                           "flags": setting.flags(), "recommended": False, "error": None}
    errors = [f"{what}: {d['error']}" for what, d in (("replay", plain), ("lag replay", lagged))
              if "error" in d]
    if errors:
        row["error"] = "; ".join(errors)
        return row
    peak = max(plain["peak_reserved_bytes"], lagged["peak_reserved_bytes"])
    requested = plain["peak_requested_bytes"]
    torch_peak = plain.get("torch_peak_reserved_bytes", 0)
    row.update({
        "peak_reserved_bytes": peak,
        "peak_reserved_no_lag_bytes": plain["peak_reserved_bytes"],
        "peak_reserved_lag_bytes": lagged["peak_reserved_bytes"],
        "peak_requested_bytes": requested,
        "fragmentation": peak / requested if requested else None,
        "device_calls": _device_calls(plain),
        "host_waits": plain.get("syncs", 0),
        "ns_per_event": plain.get("ns_per_event"),
        "steady_state_device_calls": _device_calls(lagged.get("last_pass", {})),
        "ooms": plain.get("ooms", 0) + lagged.get("ooms", 0),
        "torch_peak_reserved_bytes": torch_peak,
        "vs_torch": peak / torch_peak if torch_peak else None,
        "replay": plain,
        "lag_replay": lagged,
    })
    if row["ooms"]:
        row["error"] = f"{row['ooms']} allocations ran out of memory"
    return row


def tune(path: str, replay: Optional[str] = None, jobs: Optional[int] = None,
         settings: Optional[Sequence[Setting]] = None, quick: bool = False,
         device: Optional[int] = None,
         progress: Optional[Callable[[int, int, str], None]] = None) -> List[Dict[str, Any]]:
    """Replays ``path`` (a trace, or a PyTorch snapshot converted first, its ``device`` or the
    one with the most events) under each setting (``SETTINGS``, ``QUICK_SETTINGS`` when
    ``quick``), ``jobs`` replays at a time (default: the cores).

    Returns one row per setting, in the settings' order: ``setting``, ``conf`` (the
    STRATA_ALLOC_CONF text), ``flags``, ``peak_reserved_bytes`` (the higher of the replays
    without and with lag), ``fragmentation`` (that over the trace's peak requested bytes),
    ``device_calls`` and ``host_waits`` (without lag), ``ns_per_event``,
    ``steady_state_device_calls`` (the last pass under lag), ``torch_peak_reserved_bytes`` (the
    trace header's PyTorch figure, 0 when absent), ``vs_torch``, ``recommended`` (exactly one
    row, see :func:`recommend`, unless every row failed), ``error`` (None, or why the row is
    left out), and both replays' JSON (``replay``, ``lag_replay``).

    ``progress(done, total, what)`` is called after each replay. Raises TuneError (no
    strata-replay, unreadable input) or SnapshotError (a snapshot that cannot be converted).
    """
    binary = find_replay(replay)
    chosen = list(settings) if settings is not None else (QUICK_SETTINGS if quick else SETTINGS)
    if not chosen:
        raise TuneError("no settings to replay")
    for s in chosen:
        if not isinstance(s, Setting):
            raise TuneError(f"settings must be strata.tune.Setting objects, got {s!r}")
    jobs = jobs or os.cpu_count() or 1
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise TuneError(f"--jobs must be an int of at least 1, got {jobs!r}")
    with tempfile.TemporaryDirectory(prefix="strata-tune-") as tmp:
        trace = path
        if _is_snapshot(path):
            trace = os.path.join(tmp, "snapshot.trace.gz")
            convert(path, trace, device)
        elif not os.path.isfile(path):
            raise TuneError(f"{path}: not a file")
        work = [(s, lag) for s in chosen for lag in (False, True)]
        results: Dict[Tuple[int, bool], Dict[str, Any]] = {}
        done = 0
        lock = threading.Lock()
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(_replay, binary, trace, s, lag): (i // 2, lag)
                       for i, (s, lag) in enumerate(work)}
            for f in concurrent.futures.as_completed(futures):
                key = futures[f]
                results[key] = f.result()
                with lock:
                    done += 1
                    if progress:
                        progress(done, len(work),
                                 chosen[key[0]].name + (" (lag)" if key[1] else ""))
    rows = [_row(s, results[(i, False)], results[(i, True)]) for i, s in enumerate(chosen)]
    best = recommend(rows)
    if best is not None:
        best["recommended"] = True
    return rows


def recommend(rows: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The row to recommend (see the module's docstring), or None when every row failed."""
    ok = [r for r in rows if r["error"] is None]
    if not ok:
        return None
    pool = [r for r in ok if r["steady_state_device_calls"] == 0]
    if not pool:
        fewest = min(r["steady_state_device_calls"] for r in ok)
        pool = [r for r in ok if r["steady_state_device_calls"] == fewest]
    order = {id(r): i for i, r in enumerate(rows)}
    return min(pool, key=lambda r: (r["peak_reserved_bytes"], r["device_calls"], order[id(r)]))


def recommendation_lines(row: Dict[str, Any]) -> List[str]:
    """How to use ``row``'s setting: the STRATA_ALLOC_CONF line, the flags, the Python call."""
    conf = row["conf"]
    lines = [f"STRATA_ALLOC_CONF={conf}" + ("   (empty: strata's defaults)" if not conf else "")]
    lines.append("flags: " + (" ".join(row["flags"]) if row["flags"] else "(none)"))
    lines.append(f'python: strata.torch.enable("{conf}")' if conf
                 else "python: strata.torch.enable()")
    return lines


def _fmt(n: Optional[float], spec: str) -> str:
    return "-" if n is None else format(n, spec)


def report(rows: List[Dict[str, Any]], trace_name: str = "", seconds: float = 0.0,
           jobs: int = 0) -> str:
    """The table and the recommendation, as strata-tune prints them."""
    ok = [r for r in rows if r["error"] is None]
    head = f"strata-tune: {trace_name}"
    if ok:
        first = ok[0]["replay"]
        head += (f" ({first['events']:,} events, peak requested "
                 f"{format_bytes(first['peak_requested_bytes'])})")
    head += f": {2 * len(rows)} replays in {seconds:.1f} s, {jobs} at a time"
    cols = ("setting", "peak reserved", "frag", "vs torch", "device calls", "host waits",
            "ns/event", "steady calls")
    table = [cols]
    torch_peak = next((r["torch_peak_reserved_bytes"] for r in ok), 0)
    if torch_peak:
        requested = ok[0]["peak_requested_bytes"]
        table.append(("PyTorch (recorded)", format_bytes(torch_peak),
                      _fmt(torch_peak / requested if requested else None, ".3f"), "1.000",
                      "-", "-", "-", "-"))
    for r in rows:
        name = ("* " if r["recommended"] else "  ") + r["setting"]
        if r["error"] is not None:
            table.append((name, "failed: " + r["error"], "", "", "", "", "", ""))
            continue
        table.append((name, format_bytes(r["peak_reserved_bytes"]),
                      _fmt(r["fragmentation"], ".3f"), _fmt(r["vs_torch"], ".3f"),
                      str(r["device_calls"]), str(r["host_waits"]),
                      _fmt(r["ns_per_event"], ".0f"), str(r["steady_state_device_calls"])))
    widths = [max(len(t[i]) for t in table if i == 0 or not t[1].startswith("failed:"))
              for i in range(len(cols))]
    out = [head, ""]
    for t in table:
        if t[1].startswith("failed:"):
            out.append(f"{t[0]:<{widths[0]}}  {t[1]}")
            continue
        out.append("  ".join([f"{t[0]:<{widths[0]}}"] +
                             [f"{c:>{w}}" for c, w in zip(t[1:], widths[1:])]).rstrip())
    out.append("")
    out += textwrap.wrap(
        "peak reserved: the higher of the replays without and with device lag; frag: that over "
        "the peak requested; device calls (mallocs, frees, maps, unmaps), host waits and "
        "ns/event: the replay without lag, on the emulated device (144 GiB); steady calls: "
        f"device calls of the last pass under {' '.join(LAG_FLAGS)}.", 100)
    best = next((r for r in rows if r["recommended"]), None)
    if best is None:
        out.append("No recommendation: every replay failed.")
    else:
        if best["steady_state_device_calls"] == 0:
            out.append("Recommended (* : the lowest peak reserved among the settings with no "
                       "device calls in the steady state):")
        else:
            out.append("No setting avoids device calls in the steady state; recommended (* : "
                       "the fewest such calls, then the lowest peak reserved):")
        out += ["  " + line for line in recommendation_lines(best)]
    return "\n".join(out)


def _json_report(rows: List[Dict[str, Any]], path: str, seconds: float,
                 jobs: int) -> Dict[str, Any]:
    best = next((r for r in rows if r["recommended"]), None)
    rec = None
    if best is not None:
        rec = {"setting": best["setting"], "conf": best["conf"],
               "strata_alloc_conf": f"STRATA_ALLOC_CONF={best['conf']}", "flags": best["flags"],
               "peak_reserved_bytes": best["peak_reserved_bytes"],
               "steady_state_device_calls": best["steady_state_device_calls"]}
    return {"input": path, "seconds": round(seconds, 3), "jobs": jobs, "lag_flags": LAG_FLAGS,
            "settings": rows, "recommendation": rec}


def main(argv: Optional[List[str]] = None) -> int:
    """The command line; returns the exit status (2 with the message when it cannot run)."""
    p = argparse.ArgumentParser(
        prog="strata-tune",
        description="Replay a trace (or a PyTorch memory snapshot) under each allocator setting "
                    "and recommend the one that reserves the least without device calls in the "
                    "steady state.")
    p.add_argument("input", metavar="TRACE_OR_SNAPSHOT")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--jobs", type=int, default=None,
                   help="replays run at once (default: the number of cores)")
    p.add_argument("--replay", default=None,
                   help="the strata-replay binary (default: $STRATA_REPLAY, else on PATH)")
    p.add_argument("--quick", action="store_true",
                   help=f"{len(QUICK_SETTINGS)} settings rather than {len(SETTINGS)}")
    p.add_argument("--device", type=int, default=None,
                   help="for a snapshot: the device to replay (default: most events)")
    args = p.parse_args(argv)
    jobs = args.jobs or os.cpu_count() or 1
    start = time.monotonic()

    def progress(done: int, total: int, what: str) -> None:
        # Quiet for a short sweep; a line a replay once it has run for a few seconds.
        if time.monotonic() - start > 3:
            print(f"strata-tune: [{done}/{total}] {what}", file=sys.stderr, flush=True)

    try:
        rows = tune(args.input, replay=args.replay, jobs=jobs, quick=args.quick,
                    device=args.device, progress=progress)
    except (TuneError, SnapshotError) as e:
        print(f"strata-tune: {e}", file=sys.stderr)
        return 2
    seconds = time.monotonic() - start
    if args.json:
        print(json.dumps(_json_report(rows, args.input, seconds, jobs), indent=1))
    else:
        name = next((r["replay"].get("trace", "") for r in rows if r["error"] is None),
                    os.path.basename(args.input))
        print(report(rows, name, seconds, jobs))
    return 0 if any(r["recommended"] for r in rows) else 1


class _CallableModule(types.ModuleType):
    """Lets ``strata.tune(path, ...)`` call :func:`tune` while ``strata.tune`` stays this
    module."""

    def __call__(self, *args: Any, **kwargs: Any) -> List[Dict[str, Any]]:
        return tune(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    sys.exit(main())
