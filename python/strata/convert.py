"""PyTorch memory snapshots to strata traces, so ``strata-replay`` can replay a user's own model.

Usage::

    python -m strata.convert snap.pickle out.trace.gz [--device N|all]

or ``strata.convert.convert("snap.pickle", "out.trace.gz") -> dict`` (a summary).

Input: the pickle ``torch.cuda.memory._dump_snapshot()`` writes, a dict with ``segments`` (the
allocator's segments at snapshot time: ``device``, ``total_size``, ...) and ``device_traces``
(one list of events per device; each a dict with ``action``, ``addr``, ``size``, ``stream``,
``time_us`` and maybe ``frames``). It is read with a restricted unpickler that refuses every
global (a snapshot holds only dicts, lists, strings, numbers, booleans and None), so a malicious
pickle cannot run code; every problem raises :class:`SnapshotError` naming it.

Output: a trace (the format of ``strata-replay --trace``): a ``# {json}`` header, then
``a <id> <bytes> <stream>`` and ``f <id> <stream>`` lines.

- ``alloc`` becomes ``a``. Addresses are reused after a free, so each alloc gets a new id.
- ``free_completed`` becomes ``f``: PyTorch gives the block back to its pool then, which for a
  block used on another stream (``record_stream``) is after that stream's work, and a trace has
  no other way to say so. A ``free_requested`` with no ``free_completed`` after it (the snapshot
  was taken while the free waited on another stream, or the address was allocated again without
  one) becomes the ``f`` at the position of the request.
- Frees of blocks allocated before the recording began are skipped and counted.
- ``segment_alloc``/``segment_free``/``segment_map``/``segment_unmap`` give PyTorch's reserved
  memory over time (``torch_peak_reserved``); ``snapshot``, ``oom`` and any action this module
  does not know (from a newer PyTorch) are skipped and counted, never an error.
- Streams: PyTorch reports the default stream as 0, which stays 0; other streams are numbered
  1, 2, ... in order of first use.
- Truncation: PyTorch keeps the newest ``max_entries`` events of a device in a ring buffer. The
  trace is marked ``"truncated": true`` (header and summary, with the reasons) when its first
  alloc/free event frees a block the trace never allocated, when the device's event count is a
  power of two of at least 1024 (a full ring of that size), or when the snapshot says so
  (a top-level ``"truncated": True``).

The header carries ``events``, ``allocs``, ``streams`` and ``trace_peak_live`` (which
strata-replay checks against the events), ``torch_peak_requested`` (the peak of live requested
bytes over the converted events), ``torch_reserved_at_snapshot`` (the sum of ``total_size`` of
the device's segments) and ``torch_peak_reserved``: PyTorch's peak reserved memory, replayed from
the segment events back from the reserved memory at snapshot time when the device has segment
events, otherwise the reserved memory at snapshot time
(``torch_peak_reserved_source`` says which).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import gzip
import io
import json
import os
import pickle
import sys
import time
from typing import Any, Dict, List, Optional, Union

__all__ = ["SnapshotError", "load_snapshot", "convert", "convert_all", "main"]

# No single allocation of a real device is larger than this (256 TiB); bigger sizes are junk.
MAX_BYTES = 1 << 48
MAX_ADDR = (1 << 64) - 1
MAX_STREAMS = 0xFFFF + 1  # strata-replay numbers streams 0..65535
TRUNCATION_MIN_RING = 1024

_ALLOC, _FREE_REQ, _FREE_DONE = "alloc", "free_requested", "free_completed"
_SEGMENT_GROW = ("segment_alloc", "segment_map")
_SEGMENT_SHRINK = ("segment_free", "segment_unmap")


class SnapshotError(ValueError):
    """The file is not a PyTorch memory snapshot this module can convert; the message says why
    (with the device, event index and value where one applies)."""


@contextlib.contextmanager
def _gc_paused():
    """No cyclic garbage collection meanwhile: building millions of dicts and tuples otherwise
    triggers it over and over (half the time of a large snapshot); none of them form cycles."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _virtual_size() -> Optional[int]:
    """This process's virtual memory size in bytes (Linux), None where unknown."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


@contextlib.contextmanager
def _memory_capped(extra: int):
    """Caps this process's address space at its current size plus ``extra`` bytes meanwhile
    (where the platform allows it), so allocations past that raise MemoryError.

    Why: Python's C unpickler grows its memo to twice the index a LONG_BINPUT names, so a pickle
    of a dozen bytes can make it allocate and clear gigabytes; with the cap that is a
    MemoryError, not a machine out of memory. The cap is process-wide while it lasts.
    """
    try:
        import resource
    except ImportError:  # not a Unix
        yield
        return
    now = _virtual_size()
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, ValueError):
        soft = hard = None
    if now is None or soft is None:
        yield
        return
    cap = now + extra
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft != resource.RLIM_INFINITY and soft <= cap:
        yield  # already capped as tightly
        return
    try:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (OSError, ValueError):
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


class _NoGlobalsUnpickler(pickle.Unpickler):
    """An unpickler that builds only the pickle format's own types: every global is refused, so
    no class is instantiated and no function called."""

    def find_class(self, module: str, name: str) -> Any:
        raise SnapshotError(
            f"the pickle references the global {module}.{name}; a PyTorch memory snapshot holds "
            "only dicts, lists, strings, numbers, booleans and None, so it is refused (it could "
            "run code)")

    def persistent_load(self, pid: Any) -> Any:
        raise SnapshotError("the pickle uses a persistent id; a PyTorch memory snapshot has none")


def load_snapshot(path: str) -> Dict[str, Any]:
    """Reads and unpickles ``path`` without running any code from it.

    Returns the snapshot dict (checked: a dict with a ``device_traces`` list of lists and a
    ``segments`` list). Raises SnapshotError for a file that cannot be read, a truncated or
    corrupt pickle, a pickle that references a global, or the wrong top-level structure.
    """
    try:
        if os.path.exists(path) and not os.path.isfile(path):  # a FIFO would block, a device not end
            raise SnapshotError(f"{path}: not a regular file")
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise SnapshotError(f"{path}: cannot read: {e.strerror or e}") from e
    return _loads(data, path)


def _loads(data: bytes, name: str) -> Dict[str, Any]:
    if not data:
        raise SnapshotError(f"{name}: the file is empty")
    if data[:2] == b"\x1f\x8b":
        raise SnapshotError(f"{name}: this is a gzip file (a strata trace?), not a snapshot "
                            "pickle from torch.cuda.memory._dump_snapshot()")
    if data[:1] != b"\x80":
        raise SnapshotError(f"{name}: not a pickle of protocol 2 or later (first byte "
                            f"{data[:1]!r}); expected torch.cuda.memory._dump_snapshot()'s file")
    try:
        # What unpickling may take: generous for real snapshots (a 40 MB pickle of a million
        # events needs about 0.6 GB), bounded for hostile ones.
        with _gc_paused(), _memory_capped((1 << 30) + 64 * len(data)):
            snap = _NoGlobalsUnpickler(io.BytesIO(data)).load()
    except SnapshotError as e:
        raise SnapshotError(f"{name}: {e}") from None
    except RecursionError:
        raise SnapshotError(f"{name}: the pickle nests too deeply") from None
    except MemoryError:
        raise SnapshotError(f"{name}: unpickling needs more memory than a snapshot of "
                            f"{len(data)} bytes can (a corrupt or hostile pickle?)") from None
    except EOFError:
        raise SnapshotError(f"{name}: the pickle is truncated ({len(data)} bytes)") from None
    except Exception as e:  # any other malformation: UnpicklingError, ValueError, TypeError ...
        what = str(e) or type(e).__name__
        if "truncated" in what:
            raise SnapshotError(f"{name}: the pickle is truncated ({len(data)} bytes)") from None
        raise SnapshotError(f"{name}: corrupt pickle: {what}") from None
    _check_top_level(snap, name)
    return snap


def _check_top_level(snap: Any, name: str) -> None:
    if not isinstance(snap, dict):
        raise SnapshotError(f"{name}: the pickle holds a {type(snap).__name__}, expected a dict "
                            "with 'segments' and 'device_traces'")
    for key in ("segments", "device_traces"):
        if key not in snap:
            hint = (" (record the history first: torch.cuda.memory._record_memory_history())"
                    if key == "device_traces" else "")
            raise SnapshotError(f"{name}: the snapshot has no '{key}' key{hint}")
    if not isinstance(snap["segments"], list):
        raise SnapshotError(f"{name}: 'segments' is a {type(snap['segments']).__name__}, "
                            "expected a list")
    traces = snap["device_traces"]
    if not isinstance(traces, list):
        raise SnapshotError(f"{name}: 'device_traces' is a {type(traces).__name__}, "
                            "expected a list (one list of events per device)")
    for i, t in enumerate(traces):
        if not isinstance(t, list):
            raise SnapshotError(f"{name}: device_traces[{i}] is a {type(t).__name__}, "
                                "expected a list of events")


def _int_field(ev: Any, key: str, device: int, index: int, limit: int) -> int:
    """ev[key] as an int in [0, limit]; SnapshotError otherwise."""
    try:
        value = ev[key]
    except (KeyError, TypeError):
        if not isinstance(ev, dict):
            raise SnapshotError(f"device {device} event {index} is a {type(ev).__name__}, "
                                "expected a dict") from None
        raise SnapshotError(f"device {device} event {index} ({ev.get('action')!r}) has no "
                            f"'{key}'") from None
    if type(value) is not int:
        raise SnapshotError(f"device {device} event {index}: '{key}' is "
                            f"{type(value).__name__} {value!r:.40}, expected an integer")
    if value < 0:
        raise SnapshotError(f"device {device} event {index}: '{key}' is negative ({value})")
    if value > limit:
        unit = " bytes (more than 256 TiB)" if key == "size" else ""
        raise SnapshotError(f"device {device} event {index}: '{key}' is {value}{unit}, "
                            f"larger than {limit}")
    return value


def _check_fields(ev: Any, device: int, index: int, keys: tuple) -> None:
    """Raises SnapshotError for the first of ``keys`` that is not a valid integer field."""
    for key in keys:
        _int_field(ev, key, device, index, MAX_BYTES if key == "size" else MAX_ADDR)
    raise AssertionError("_check_fields found no bad field")  # the callers checked first


def _reserved_at_snapshot(segments: List[Any], device: int) -> int:
    total = 0
    for i, seg in enumerate(segments):
        if not isinstance(seg, dict):
            raise SnapshotError(f"segments[{i}] is a {type(seg).__name__}, expected a dict")
        for key in ("device", "total_size"):
            if key not in seg:
                raise SnapshotError(f"segments[{i}] has no '{key}'")
            v = seg[key]
            if type(v) is not int or v < 0 or v > MAX_BYTES:
                raise SnapshotError(f"segments[{i}]: '{key}' is {v!r:.40}, expected an integer "
                                    f"in [0, {MAX_BYTES}]")
        if seg["device"] == device:
            total += seg["total_size"]
    return total


def _event_counts(snap: Dict[str, Any]) -> Dict[int, int]:
    return {d: len(t) for d, t in enumerate(snap["device_traces"])}


def _pick_device(snap: Dict[str, Any], device: Optional[int]) -> int:
    counts = _event_counts(snap)
    if not counts:
        raise SnapshotError("the snapshot has no device traces (device_traces is empty): was "
                            "the history recorded? torch.cuda.memory._record_memory_history()")
    listing = ", ".join(f"{d}: {n}" for d, n in counts.items())
    if device is None:
        best = max(counts, key=lambda d: (counts[d], -d))
        if counts[best] == 0:
            raise SnapshotError(f"every device trace is empty (events per device: {listing})")
        return best
    if type(device) is not int or device not in counts:
        raise SnapshotError(f"unknown device {device!r}: the snapshot has devices "
                            f"0-{len(counts) - 1} (events per device: {listing})")
    if counts[device] == 0:
        raise SnapshotError(f"device {device} has no events (events per device: {listing})")
    return device


class _Converted:
    """The trace lines of one device and what the summary reports."""

    def __init__(self) -> None:
        self.lines: List[str] = []
        self.allocs = 0
        self.frees = 0
        self.peak_live = 0
        self.stream_map: Dict[int, int] = {}
        self.skipped: Dict[str, int] = {}
        self.pre_recording_frees = 0
        self.frees_from_requested = 0
        self.missing_frees = 0
        self.unfreed = 0
        self.segment_events = 0
        self.reserved_delta_peak = 0
        self.reserved_delta_end = 0
        self.first_is_unknown_free = False


def _convert_events(events: List[Any], device: int) -> _Converted:
    """Walks the device's events once, then numbers streams and formats the kept events."""
    out = _Converted()
    # Kept events: (is_alloc, id, bytes, PyTorch's stream); a free placed at a free_requested
    # is set to None when its free_completed comes.
    kept: List[Optional[tuple]] = []
    append = kept.append
    live: Dict[int, tuple] = {}  # addr -> (id, bytes)
    pending: Dict[int, tuple] = {}  # addr -> (id, bytes, index in kept of its free)
    unknown_requested: set = set()  # addrs of pre-recording blocks whose free was requested
    skipped = out.skipped
    next_id = 0
    reserved = 0
    reserved_peak = 0
    seen_alloc_or_free = False

    for i, ev in enumerate(events):
        try:
            action = ev["action"]
        except (KeyError, TypeError, IndexError):
            if not isinstance(ev, dict):
                raise SnapshotError(f"device {device} event {i} is a {type(ev).__name__}, "
                                    "expected a dict") from None
            raise SnapshotError(f"device {device} event {i} has no 'action'") from None
        if action == _ALLOC:
            # The checks inline (this loop runs a million times), _int_field for the message.
            addr, size, stream = ev.get("addr"), ev.get("size"), ev.get("stream")
            if not (type(addr) is int and type(size) is int and type(stream) is int
                    and 0 <= addr <= MAX_ADDR and 0 <= size <= MAX_BYTES
                    and 0 <= stream <= MAX_ADDR):
                _check_fields(ev, device, i, ("addr", "size", "stream"))
            seen_alloc_or_free = True
            if addr in pending:  # allocated again before its free completed: the f stays put
                del pending[addr]
                out.frees_from_requested += 1
            old = live.pop(addr, None)
            if old is not None:  # allocated again without any free: close the old block here
                out.missing_frees += 1
                append((False, old[0], old[1], stream))
            unknown_requested.discard(addr)
            live[addr] = (next_id, size)
            append((True, next_id, size, stream))
            next_id += 1
        elif action == _FREE_DONE or action == _FREE_REQ:
            addr, stream = ev.get("addr"), ev.get("stream")
            if not (type(addr) is int and type(stream) is int
                    and 0 <= addr <= MAX_ADDR and 0 <= stream <= MAX_ADDR):
                _check_fields(ev, device, i, ("addr", "stream"))
            first = not seen_alloc_or_free
            seen_alloc_or_free = True
            if action == _FREE_REQ:
                block = live.pop(addr, None)
                if block is None:
                    if addr in pending:
                        key = "free_requested (repeated)"
                        skipped[key] = skipped.get(key, 0) + 1
                    else:
                        out.pre_recording_frees += 1
                        unknown_requested.add(addr)
                        out.first_is_unknown_free |= first
                    continue
                pending[addr] = (block[0], block[1], len(kept))
                append((False, block[0], block[1], stream))  # moved if a free_completed comes
            else:
                req = pending.pop(addr, None)
                if req is not None:  # move the f from the request to here
                    kept[req[2]] = None
                    append((False, req[0], req[1], stream))
                    continue
                block = live.pop(addr, None)
                if block is not None:  # completed without a request: free here
                    append((False, block[0], block[1], stream))
                elif addr in unknown_requested:
                    unknown_requested.discard(addr)
                else:
                    out.pre_recording_frees += 1
                    out.first_is_unknown_free |= first
        elif action in _SEGMENT_GROW or action in _SEGMENT_SHRINK:
            size = _int_field(ev, "size", device, i, MAX_BYTES)
            out.segment_events += 1
            reserved += size if action in _SEGMENT_GROW else -size
            if reserved > reserved_peak:
                reserved_peak = reserved
        else:
            key = action if isinstance(action, str) else f"<{type(action).__name__} action>"
            skipped[key] = skipped.get(key, 0) + 1
    out.frees_from_requested += len(pending)
    out.unfreed = len(live)
    out.allocs = next_id
    out.reserved_delta_peak = reserved_peak
    out.reserved_delta_end = reserved

    # Streams in order of first use in the kept events (0, the default stream, stays 0), the
    # live bytes and their peak as strata-replay computes them from the lines.
    stream_map = out.stream_map
    lines = out.lines
    line = lines.append
    live_bytes = peak = frees = 0
    for e in kept:
        if e is None:
            continue
        is_alloc, block_id, size, raw = e
        s = stream_map.get(raw)
        if s is None:
            s = 0 if raw == 0 else len(stream_map) + (0 if 0 in stream_map else 1)
            if s >= MAX_STREAMS:
                raise SnapshotError(f"device {device}: more than {MAX_STREAMS} streams")
            stream_map[raw] = s
        if is_alloc:
            line(f"a {block_id} {size} {s}")
            live_bytes += size
            if live_bytes > peak:
                peak = live_bytes
        else:
            line(f"f {block_id} {s}")
            live_bytes -= size
            frees += 1
    out.frees = frees
    out.peak_live = peak
    return out


def _out_name(out: str) -> str:
    base = os.path.basename(out)
    for suffix in (".gz", ".trace", ".txt"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base or "snapshot"


def _convert_device(snap: Dict[str, Any], source: str, out: str, device: int,
                    choice: str) -> Dict[str, Any]:
    start = time.perf_counter()
    events = snap["device_traces"][device]
    reserved_now = _reserved_at_snapshot(snap["segments"], device)
    with _gc_paused():
        c = _convert_events(events, device)

    reasons = []
    if c.first_is_unknown_free:
        reasons.append("the first alloc/free event frees a block the trace never allocated (the "
                       "ring buffer dropped the oldest events, or recording began mid-run)")
    n = len(events)
    if n >= TRUNCATION_MIN_RING and n & (n - 1) == 0:
        reasons.append(f"the device has exactly {n} events, a power of two: a full ring buffer "
                       "(torch.cuda.memory._record_memory_history(max_entries=...))")
    if snap.get("truncated") is True:
        reasons.append("the snapshot is marked truncated")

    if c.segment_events:
        # Reserved memory when recording began, from the figure at snapshot time and the net
        # change the segment events made; a truncated ring can make this an underestimate.
        start_reserved = max(0, reserved_now - c.reserved_delta_end)
        peak_reserved = max(reserved_now, start_reserved + c.reserved_delta_peak)
        source_of_peak = "segment events"
    else:
        peak_reserved = reserved_now
        source_of_peak = "segments at snapshot time"

    lines = c.lines
    header: Dict[str, Any] = {
        "workload": _out_name(out),
        "converted_from": "pytorch memory snapshot",
        "snapshot": os.path.basename(source),
        "device": device,
        "events": len(lines),
        "allocs": c.allocs,
        "streams": len(c.stream_map),
        "trace_peak_live": c.peak_live,
        "torch_peak_requested": c.peak_live,
        "torch_peak_reserved": peak_reserved,
        "torch_peak_reserved_source": source_of_peak,
        "torch_reserved_at_snapshot": reserved_now,
        "truncated": bool(reasons),
    }
    text = "# " + json.dumps(header) + "\n" + "\n".join(lines) + ("\n" if lines else "")
    try:
        if out.endswith(".gz"):
            with gzip.open(out, "wt", compresslevel=6, encoding="ascii") as f:
                f.write(text)
        else:
            with open(out, "w", encoding="ascii") as f:
                f.write(text)
    except OSError as e:
        raise SnapshotError(f"{out}: cannot write: {e.strerror or e}") from e

    return {
        "snapshot": source,
        "out": out,
        "device": device,
        "device_choice": choice,
        "events_per_device": _event_counts(snap),
        "snapshot_events": n,
        "events": len(lines),
        "allocs": c.allocs,
        "frees": c.frees,
        "frees_from_requested": c.frees_from_requested,
        "unfreed": c.unfreed,
        "missing_frees": c.missing_frees,
        "pre_recording_frees": c.pre_recording_frees,
        "segment_events": c.segment_events,
        "skipped": dict(sorted(c.skipped.items())),
        "streams": len(c.stream_map),
        "stream_map": {str(k): v for k, v in sorted(c.stream_map.items(), key=lambda kv: kv[1])},
        "torch_peak_requested": c.peak_live,
        "torch_peak_reserved": peak_reserved,
        "torch_peak_reserved_source": source_of_peak,
        "torch_reserved_at_snapshot": reserved_now,
        "truncated": bool(reasons),
        "truncated_reasons": reasons,
        "seconds": round(time.perf_counter() - start, 3),
    }


def convert(path: str, out: str, device: Optional[int] = None) -> Dict[str, Any]:
    """Converts device ``device`` of the snapshot ``path`` to the trace ``out`` (gzip when it
    ends in ``.gz``); ``device=None`` picks the device with the most events (the summary's
    ``device_choice`` says so).

    Returns a summary dict: ``device``, ``events``/``allocs``/``frees`` written,
    ``pre_recording_frees`` and ``skipped`` (per action) left out, ``stream_map`` (PyTorch's
    stream to the trace's), PyTorch's figures (``torch_peak_requested``, ``torch_peak_reserved``,
    ``torch_reserved_at_snapshot``), ``truncated`` with ``truncated_reasons``, ``seconds``.

    Raises SnapshotError for an unreadable, truncated or malicious pickle, a wrong structure, a
    missing key, a value of the wrong type, a negative or huge size, an unknown device, or an
    output that cannot be written (nothing is written then, but for the last case).
    """
    start = time.perf_counter()
    snap = load_snapshot(path)
    chosen = _pick_device(snap, device)
    summary = _convert_device(snap, path, out, chosen,
                              "most events" if device is None else "given")
    summary["seconds"] = round(time.perf_counter() - start, 3)
    return summary


def device_out_path(out: str, device: int) -> str:
    """``out`` with ``.dev<N>`` before ``.trace.gz`` (or before the extension)."""
    for suffix in (".trace.gz", ".trace", ".gz"):
        if out.endswith(suffix):
            return f"{out[: -len(suffix)]}.dev{device}{suffix}"
    return f"{out}.dev{device}"


def convert_all(path: str, out: str) -> List[Dict[str, Any]]:
    """One trace per device that has events, named by :func:`device_out_path`; returns their
    summaries. Raises SnapshotError as :func:`convert` does, or when no device has events."""
    snap = load_snapshot(path)
    summaries = []
    for device, events in enumerate(snap["device_traces"]):
        if events:
            summaries.append(_convert_device(snap, path, device_out_path(out, device), device,
                                             "all"))
    if not summaries:
        raise SnapshotError(f"{path}: every device trace is empty")
    return summaries


def format_bytes(n: int) -> str:
    """``n`` bytes in the largest binary unit that keeps it at least 1 (``3.02 GiB``)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.{2 if shift == 30 else 1}f} {unit}"
    return f"{n} B"


def _describe(s: Dict[str, Any]) -> str:
    fb = format_bytes
    lines = [
        f"{s['out']}: device {s['device']} ({s['device_choice']}; events per device "
        f"{s['events_per_device']}), {s['events']} events ({s['allocs']} allocs, "
        f"{s['frees']} frees), {s['streams']} streams",
        f"  PyTorch: peak requested {fb(s['torch_peak_requested'])}, peak reserved "
        f"{fb(s['torch_peak_reserved'])} (from {s['torch_peak_reserved_source']}), "
        f"reserved at snapshot {fb(s['torch_reserved_at_snapshot'])}",
    ]
    left = []
    if s["pre_recording_frees"]:
        left.append(f"{s['pre_recording_frees']} frees of blocks allocated before recording")
    for action, n in s["skipped"].items():
        left.append(f"{n} '{action}'")
    if left:
        lines.append("  skipped: " + ", ".join(left))
    if s["frees_from_requested"]:
        lines.append(f"  {s['frees_from_requested']} frees placed at free_requested (no "
                     "free_completed followed)")
    if s["unfreed"]:
        lines.append(f"  {s['unfreed']} blocks still allocated at the end (strata-replay frees "
                     "them after the trace)")
    if s["truncated"]:
        lines.append("  TRUNCATED: " + "; ".join(s["truncated_reasons"]))
    lines.append(f"  {s['seconds']:.2f} s")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    """The command line; returns the exit status (2 with the message on a SnapshotError)."""
    p = argparse.ArgumentParser(
        prog="python -m strata.convert",
        description="Convert a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) to a "
                    "trace strata-replay and strata-tune read.")
    p.add_argument("snapshot", help="the snapshot pickle")
    p.add_argument("out", help="the trace to write (gzip when it ends in .gz)")
    p.add_argument("--device", default=None,
                   help="the device to convert, or 'all' for one trace per device "
                        "(default: the device with the most events)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = p.parse_args(argv)
    try:
        if args.device == "all":
            summaries = convert_all(args.snapshot, args.out)
        else:
            device: Union[int, None] = None
            if args.device is not None:
                try:
                    device = int(args.device)
                except ValueError:
                    p.error(f"--device must be a number or 'all', got {args.device!r}")
            summaries = [convert(args.snapshot, args.out, device)]
    except SnapshotError as e:
        print(f"strata.convert: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summaries if args.device == "all" else summaries[0], indent=1))
    else:
        for s in summaries:
            print(_describe(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
