"""strata: a GPU memory allocator for deep-learning runtimes, from Python.

The functions here call libstrata_c.so (the C ABI, strata/c_api.h). Framework hookups live in
submodules: ``strata.torch.enable()`` makes strata PyTorch's CUDA allocator,
``strata.cupy.enable()`` CuPy's. Every failure raises :class:`StrataError` with strata's message.

``strata.tune(path)`` replays a trace or a PyTorch memory snapshot under each allocator setting
and recommends one (:mod:`strata.tune`; ``strata.convert`` converts snapshots); neither needs
the C library, only the ``strata-replay`` tool.

Flags (allocator strategy, limits, PyTorch's knobs) come from the environment (``FLAGS_<name>``,
``STRATA_ALLOC_CONF``) or :func:`set_flags`; they can change only while no allocation is live.
"""

from __future__ import annotations

import json
from typing import Dict

from strata._lib import (StrataError, c_int_arg, check, lib, library_path, pointer_arg, size_arg,
                         text, text_arg)
from strata.history import (on_oom, record_history, remove_oom_observer, snapshot,
                            stop_history)

__all__ = [
    "StrataError",
    "library_path",
    "set_flags",
    "memory_stats",
    "memory_summary",
    "reset_peak_memory_stats",
    "reset_accumulated_memory_stats",
    "empty_cache",
    "end_stream",
    "set_memory_fraction",
    "live_allocations",
    "use_emulated_device",
    "record_history",
    "stop_history",
    "snapshot",
    "on_oom",
    "remove_oom_observer",
    "tune",
]

__version__ = "0.1.0"


def __getattr__(name: str):
    """``strata.tune`` and ``strata.convert`` load on first use (``strata.tune(path)`` calls
    :func:`strata.tune.tune`), so ``import strata`` stays light."""
    if name in ("tune", "convert"):
        import importlib
        return importlib.import_module(f"strata.{name}")
    raise AttributeError(f"module 'strata' has no attribute {name!r}")


def set_flags(config: str) -> None:
    """Applies ``"key:value,..."`` (PyTorch's PYTORCH_CUDA_ALLOC_CONF syntax, strata's flag names).

    All or nothing: a bad key or value raises StrataError naming it, and nothing changes. Raises
    StrataError (code ERROR_BUSY) while allocations are live.
    """
    check(lib().strata_set_flags(text_arg("config", config)))


def memory_stats(device: int = 0) -> Dict[str, int]:
    """strata's statistics of ``device``, with torch.cuda.memory_stats()'s keys
    (``"reserved_bytes.all.peak"``, ...), plus strata's own counters (``num_device_map``, ...)."""
    return json.loads(text(lib().strata_memory_stats_json, device))


def memory_summary(device: int = 0) -> str:
    """A table in the layout of torch.cuda.memory_summary()."""
    return text(lib().strata_memory_summary, device)


def reset_peak_memory_stats(device: int = 0) -> None:
    """Peaks start again from the current values."""
    check(lib().strata_reset_peak_stats(c_int_arg("device", device)))


def reset_accumulated_memory_stats(device: int = 0) -> None:
    """The accumulated figures ("allocated", "freed", num_ooms, ...) start again from 0."""
    check(lib().strata_reset_accumulated_stats(c_int_arg("device", device)))


def empty_cache(device: int = 0) -> None:
    """Gives every cached block of ``device`` that no stream still uses back to the device."""
    check(lib().strata_empty_cache(c_int_arg("device", device)))


def end_stream(stream: int, device: int = 0) -> None:
    """Call before destroying ``stream`` (a cudaStream_t as an int, e.g. ``cupy.cuda.Stream.ptr``)
    if strata allocated on it: CUDA may give its handle to a later stream, which then waits on the
    device for this stream's work before reusing its memory. Raises StrataError for the default
    stream (0), a bad device, a stream under graph capture or a stream already destroyed."""
    check(lib().strata_end_stream(c_int_arg("device", device), pointer_arg("stream", stream)))


def set_memory_fraction(fraction: float, device: int = 0) -> None:
    """Caps what strata may hold on ``device`` at ``fraction`` (0 to 1) of its memory, as
    torch.cuda.set_per_process_memory_fraction does (``gpu_memory_limit_mb``, when lower, still
    holds). Requests past the cap raise out of memory; 1 removes the cap. Raises StrataError for a
    fraction outside [0, 1] or a bad device."""
    check(lib().strata_set_memory_fraction(float(fraction), c_int_arg("device", device)))


def live_allocations() -> int:
    """Allocations made through strata and not yet freed (all devices)."""
    return int(lib().strata_live_allocations())


def use_emulated_device(device_count: int = 1, capacity_bytes: int = 16 << 30) -> None:
    """Runs strata on an emulated device (no GPU needed; for tests). ``device_count=0`` goes back
    to CUDA. Raises StrataError while allocations are live."""
    check(lib().strata_use_emulated_device(c_int_arg("device_count", device_count),
                                           size_arg("capacity_bytes", capacity_bytes)))
