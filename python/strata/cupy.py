"""strata as CuPy's device allocator.

    import strata.cupy
    strata.cupy.enable()

Each CuPy allocation calls strata_malloc on CuPy's current device and stream; the memory goes
back (strata_free) when CuPy drops it.
"""

from __future__ import annotations

from typing import Any, Callable

from strata import StrataError
from strata._lib import ERROR_OUT_OF_MEMORY, last_error, lib

__all__ = ["enable", "allocator"]


class _Block:
    """Owns one strata allocation; CuPy keeps it alive as long as the memory is in use."""

    __slots__ = ("_free", "ptr", "size", "device", "stream")

    def __init__(self, free_fn: Callable, ptr: int, size: int, device: int, stream: int):
        self._free = free_fn  # kept here: module globals may be gone at interpreter exit
        self.ptr, self.size, self.device, self.stream = ptr, size, device, stream

    def __del__(self) -> None:
        self._free(self.ptr, self.size, self.device, self.stream)


def allocator() -> Callable[[int], Any]:
    """A function size -> cupy.cuda.MemoryPointer over strata (what cupy.cuda.set_allocator
    takes)."""
    import cupy

    handle = lib()

    def allocate(size: int) -> Any:
        device = cupy.cuda.runtime.getDevice()
        if size == 0:
            return cupy.cuda.MemoryPointer(cupy.cuda.memory.UnownedMemory(0, 0, None, device), 0)
        stream = cupy.cuda.get_current_stream().ptr  # 0: the legacy default stream
        ptr = handle.strata_malloc(size, device, stream)
        if not ptr:
            message = last_error()
            if "out of memory" in message:
                raise cupy.cuda.memory.OutOfMemoryError(size, 0, 0) from StrataError(
                    message, ERROR_OUT_OF_MEMORY)
            raise StrataError(message, -1)
        owner = _Block(handle.strata_free, ptr, size, device, stream)
        return cupy.cuda.MemoryPointer(cupy.cuda.memory.UnownedMemory(ptr, size, owner, device), 0)

    return allocate


def enable() -> None:
    """Makes strata CuPy's device allocator (cupy.cuda.set_allocator)."""
    try:
        import cupy
    except ImportError as e:
        raise StrataError(f"strata.cupy.enable() needs CuPy (import cupy failed: {e})", -1) from e
    cupy.cuda.set_allocator(allocator())
