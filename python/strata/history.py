"""Where the memory went: history recording, snapshots and out-of-memory observers.

The same as PyTorch's ``torch.cuda.memory._record_memory_history`` / ``_snapshot`` and
``attach_out_of_memory_observer``, over strata's C ABI (docs/HISTORY.md). A recording is a trace
that ``strata-replay`` replays under other flags and ``strata-viz`` draws.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import threading
import traceback
from typing import Any, Callable, Dict, Optional, Union

from strata._lib import c_int_arg, check, immortal_callback, lib, size_arg, text, text_arg

_CONTEXT_FN = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
_OOM_FN = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_char_p,
                           ctypes.c_void_p)

_lock = threading.Lock()
_contexts: Dict[int, int] = {}   # device -> max_entries of a recording with a Python context
_observers: Dict[int, Any] = {}  # observer id -> its ctypes callback


@atexit.register  # registered first, so it runs after the user's own atexit handlers
def _detach_at_exit() -> None:
    """Strata calls no Python callback once the interpreter finalizes: a thread of strata's
    (or a daemon thread allocating) that calls one after the interpreter was torn down crashes
    inside Python (PyGILState_Ensure). Recordings with a Python context go on without it (what
    they recorded is lost at exit anyway unless stop_history ran), observers are removed."""
    with _lock:
        for device, max_entries in list(_contexts.items()):
            lib().strata_record_history(device, max_entries, None, None)
        _contexts.clear()
        for observer_id in list(_observers):
            lib().strata_remove_oom_observer(observer_id)
        _observers.clear()



def python_stack(skip: int = 1, limit: int = 32) -> str:
    """The calling thread's Python stack, innermost frame last: the ``limit`` innermost frames
    but the last ``skip`` ones (this function's, and the callers' that are strata's own)."""
    frames = traceback.extract_stack(limit=limit + skip)[:-skip]
    return "".join(traceback.format_list(frames))


def _context_callback(context: Callable[[], str]):
    def call(buf, length, _user_data):
        try:
            data = str(context()).encode(errors="replace")
        except Exception:  # a broken context must not break the allocation
            data = b"<context callback raised>"
        if length > 0:
            n = min(len(data), length - 1)
            ctypes.memmove(buf, data, n)
            ctypes.memset(buf + n, 0, 1)
        return len(data)

    return immortal_callback(_CONTEXT_FN(call))


def record_history(device: int = 0, max_entries: int = 0,
                   context: Union[bool, Callable[[], str]] = False) -> None:
    """Starts recording ``device``'s allocations, frees, deferred frees, device calls, OOMs and
    empty-caches: the newest ``max_entries`` events (0: strata's default, 131,072).

    ``context=True`` attaches the Python stack of each allocation (costly: for debugging); a
    callable attaches the text it returns. Restarts a recording underway.
    """
    device = c_int_arg("device", device)
    max_entries = size_arg("max_entries", max_entries)
    fn = None
    if context is True:
        fn = _context_callback(lambda: python_stack(skip=3))
    elif callable(context):
        fn = _context_callback(context)
    elif context is not False and context is not None:
        raise TypeError(f"context must be True, False or a callable, got {context!r}")
    with _lock:
        check(lib().strata_record_history(device, max_entries, fn, None))
        if fn is not None:
            _contexts[device] = max_entries
        else:
            _contexts.pop(device, None)


def stop_history(path: Union[str, os.PathLike], device: int = 0) -> None:
    """Stops recording ``device`` and writes the recording to ``path`` (gzip when it ends in
    ``.gz``). Raises StrataError when it is not recording or the file cannot be written (when
    it cannot even be created, the recording goes on)."""
    device = c_int_arg("device", device)
    data = text_arg("path", path)  # before the call: a bad path leaves the recording running
    with _lock:
        check(lib().strata_stop_history(device, data))
        _contexts.pop(device, None)


def snapshot(device: int = 0) -> Dict[str, Any]:
    """Every segment and block of ``device`` (address, size, requested size, state, pool) and
    its statistics, as a dict (docs/HISTORY.md, "Snapshots")."""
    return json.loads(text(lib().strata_snapshot, device))


OomObserver = Callable[[int, int, Dict[str, Any], Optional[Dict[str, Any]]], None]


def on_oom(observer: OomObserver, with_snapshot: bool = False) -> int:
    """Calls ``observer(device, requested_bytes, stats, snapshot_or_None)`` once for each
    out-of-memory failure, before it surfaces. It must not allocate on that device. Returns an id
    for :func:`remove_oom_observer`."""

    def call(device, requested, stats, snap, _user_data):
        try:
            observer(device, requested, json.loads(stats),
                     json.loads(snap) if snap is not None else None)
        except Exception:
            traceback.print_exc()

    if not callable(observer):
        raise TypeError(f"observer must be callable, got {observer!r}")
    fn = immortal_callback(_OOM_FN(call))
    with _lock:
        observer_id = check(lib().strata_add_oom_observer(fn, None, 1 if with_snapshot else 0))
        _observers[observer_id] = fn
    return observer_id


def remove_oom_observer(observer_id: int) -> None:
    """Removes an observer added by :func:`on_oom`."""
    observer_id = c_int_arg("observer_id", observer_id)
    with _lock:
        check(lib().strata_remove_oom_observer(observer_id))
        _observers.pop(observer_id, None)
