"""strata as PyTorch's CUDA allocator.

    import strata.torch
    strata.torch.enable()            # before the first CUDA tensor
    ...
    strata.torch.memory_stats(0)     # torch.cuda.memory_stats() keys

enable() goes through ``torch.cuda.memory.CUDAPluggableAllocator`` and wires
``tensor.record_stream`` (``strata_record_stream``), ``torch.cuda.empty_cache()``
(``strata_empty_cache`` on every device), ``torch.cuda.set_per_process_memory_fraction``
(``strata_set_memory_fraction``) and CUDA graph capture's private pools
(``strata_begin_allocate_to_pool``, ``strata_end_allocate_to_pool``, ``strata_release_pool``).
PyTorch's own statistics functions raise for a pluggable allocator: use this module's.

``enable(native=True)`` (or ``STRATA_TORCH_NATIVE=1``) installs strata's own C++ allocator for
PyTorch instead (strata/native/torch_allocator.cc, compiled once against the running PyTorch):
no pluggable wrapper between PyTorch and strata (that wrapper takes a process-wide mutex and
updates a map on every allocation and free), and ``torch.cuda.memory_stats()``,
``max_memory_reserved()``, ``reset_peak_memory_stats()`` and out-of-memory errors of type
``torch.OutOfMemoryError`` work as with PyTorch's own allocator. It needs a C++ compiler and the
CUDA toolkit's headers.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Optional

from strata import (StrataError, empty_cache, library_path, live_allocations, memory_stats,
                    memory_summary, reset_peak_memory_stats, set_flags, set_memory_fraction)
from strata._lib import ERROR_BUSY, immortal_callback, lib

__all__ = ["enable", "enabled", "memory_stats", "memory_summary", "reset_peak_memory_stats",
           "empty_cache", "set_flags", "set_memory_fraction", "live_allocations"]

# Kept referenced for the life of the process: PyTorch holds raw pointers to them.
_state: dict = {}


def enabled() -> bool:
    """Whether enable() installed strata in this process."""
    return "allocator" in _state


def enable(conf: Optional[str] = None, native: Optional[bool] = None) -> Any:
    """Makes strata PyTorch's CUDA allocator; returns the CUDAPluggableAllocator, or "native".

    ``conf``: flags to apply first (``"key:value,..."``, see set_flags). Call it before the first
    CUDA allocation of the process: PyTorch refuses to change its allocator afterwards, and so
    does this function (StrataError). Calling it again once enabled only applies ``conf``.
    ``native``: strata's own C++ allocator for PyTorch instead of the pluggable wrapper (see the
    module's text); None reads ``STRATA_TORCH_NATIVE`` ("1" for native).
    """
    try:
        import torch
    except ImportError as e:
        raise StrataError("strata.torch.enable() needs PyTorch (import torch failed: "
                          f"{e})", -1) from e
    if conf:
        set_flags(conf)
    if enabled():
        return _state["allocator"]
    if native is None:
        native = os.environ.get("STRATA_TORCH_NATIVE", "") == "1"
    elif not isinstance(native, bool):
        raise TypeError(f"native must be a bool or None, not {type(native).__name__}")
    if native:
        from strata import _torch_native
        _torch_native.install()
        _state["allocator"] = "native"
        return "native"
    handle = lib()
    # strata_malloc_or_throw: PyTorch does not check for NULL; strata's exception becomes a
    # Python RuntimeError carrying its out-of-memory message instead.
    alloc = torch.cuda.memory.CUDAPluggableAllocator(library_path(), "strata_malloc_or_throw",
                                                     "strata_free")
    native = alloc.allocator()
    # PyTorch calls void(void*, cudaStream_t) and void(double, int); strata's int results are
    # ignored (the C ABI allows it; failures are logged). The setters exist in PyTorch 2.11;
    # older versions lack them.
    if hasattr(native, "set_record_stream_fn"):
        native.set_record_stream_fn(ctypes.cast(handle.strata_record_stream, ctypes.c_void_p).value)
    if hasattr(native, "set_memory_fraction_fn"):
        native.set_memory_fraction_fn(
            ctypes.cast(handle.strata_set_memory_fraction, ctypes.c_void_p).value)
    # CUDA graphs (torch.cuda.graph, make_graphed_callables, torch.compile's CUDA graphs): these
    # three have exactly the C++ types of PyTorch's hooks (strata/c_api.h).
    for setter, function in (("set_begin_allocate_to_pool", "strata_begin_allocate_to_pool"),
                             ("set_end_allocate_to_pool_fn", "strata_end_allocate_to_pool"),
                             ("set_release_pool", "strata_release_pool")):
        if hasattr(native, setter):
            getattr(native, setter)(ctypes.cast(getattr(handle, function), ctypes.c_void_p).value)
    if hasattr(native, "set_reset_fn"):
        devices = torch.cuda.device_count()

        def reset() -> None:  # void(void): torch.cuda.empty_cache() on every device
            for d in range(devices):
                handle.strata_empty_cache(d)

        _state["reset"] = immortal_callback(ctypes.CFUNCTYPE(None)(reset))
        native.set_reset_fn(ctypes.cast(_state["reset"], ctypes.c_void_p).value)
    try:
        torch.cuda.memory.change_current_allocator(alloc)
    except RuntimeError as e:
        raise StrataError("strata.torch.enable() must run before the first CUDA allocation of "
                          f"the process ({e})", ERROR_BUSY) from e
    _state["allocator"] = alloc
    return alloc
