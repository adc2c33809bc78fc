#!/usr/bin/env python3
"""Route CuPy's device allocations through strata's C ABI (libstrata_c.so).

cupy.cuda.set_allocator() takes a Python function size -> MemoryPointer. Ours calls strata_malloc
through ctypes on CuPy's current device and stream and wraps the pointer in a
cupy.cuda.memory.UnownedMemory whose owner object calls strata_free when CuPy drops the memory.
Then a few array operations run (checked against known results), on the default stream and on a
side stream, and strata's memory summary is printed.

    python3 examples/cupy_example.py --lib build/lib/libstrata_c.so
"""

import argparse
import ctypes
import json
import os
import sys

import cupy


class StrataBlock:
    """Owns one strata allocation; CuPy keeps it alive as long as the memory is in use."""

    __slots__ = ("_free", "ptr", "size", "device", "stream")

    def __init__(self, free_fn, ptr, size, device, stream):
        self._free = free_fn  # kept here: module globals may be gone at interpreter exit
        self.ptr, self.size, self.device, self.stream = ptr, size, device, stream

    def __del__(self):
        # The block goes back to the pool of the stream it was allocated on.
        self._free(self.ptr, self.size, self.device, self.stream)


def load(path):
    lib = ctypes.CDLL(path)
    lib.strata_malloc.restype = ctypes.c_void_p
    lib.strata_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.strata_free.restype = None
    lib.strata_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.strata_last_error.restype = ctypes.c_char_p
    lib.strata_memory_summary.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
    lib.strata_memory_stats_json.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
    lib.strata_empty_cache.argtypes = [ctypes.c_int]
    lib.strata_live_allocations.restype = ctypes.c_int64
    lib.strata_end_stream.argtypes = [ctypes.c_int, ctypes.c_void_p]
    return lib


def make_allocator(lib):
    def strata_allocator(size):
        device = cupy.cuda.runtime.getDevice()
        stream = cupy.cuda.get_current_stream().ptr  # 0: the legacy default stream
        if size == 0:
            return cupy.cuda.MemoryPointer(cupy.cuda.memory.UnownedMemory(0, 0, None, device), 0)
        ptr = lib.strata_malloc(size, device, stream)
        if not ptr:
            raise MemoryError(lib.strata_last_error().decode(errors="replace"))
        owner = StrataBlock(lib.strata_free, ptr, size, device, stream)
        mem = cupy.cuda.memory.UnownedMemory(ptr, size, owner, device)
        return cupy.cuda.MemoryPointer(mem, 0)

    return strata_allocator


def text(lib, fn, device):
    n = fn(device, None, 0)
    if n < 0:
        raise RuntimeError(lib.strata_last_error().decode())
    buf = ctypes.create_string_buffer(n + 1)
    fn(device, buf, n + 1)
    return buf.value.decode()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", default=os.environ.get("STRATA_C_LIB"),
                   help="path of libstrata_c.so (default: $STRATA_C_LIB)")
    args = p.parse_args()
    if not args.lib:
        sys.exit("give the path of libstrata_c.so with --lib or STRATA_C_LIB")
    lib = load(os.path.abspath(args.lib))
    device = cupy.cuda.runtime.getDevice()

    cupy.cuda.set_allocator(make_allocator(lib))
    print(f"CuPy {cupy.__version__} allocating through strata on cuda:{device}")

    n = 1 << 22
    a = cupy.arange(n, dtype=cupy.float32)
    b = cupy.sin(a) ** 2 + cupy.cos(a) ** 2
    assert bool(cupy.allclose(b, 1.0, atol=1e-5)), "sin^2 + cos^2 != 1"
    assert float(a.sum(dtype=cupy.float64)) == float(n) * (n - 1) / 2, "arange sum"

    m = cupy.random.rand(1024, 1024, dtype=cupy.float32)
    g = m @ m.T
    assert bool(cupy.allclose(g, g.T, rtol=1e-4, atol=1e-3)), "m @ m.T is not symmetric"

    live = lib.strata_live_allocations()
    assert live >= 4, f"only {live} live strata allocations: CuPy did not allocate through strata"

    # On a side stream: strata serves it from that stream's own pool.
    side = cupy.cuda.Stream(non_blocking=True)
    with side:
        c = a * 3
        total = c.sum(dtype=cupy.float64)
    side.synchronize()
    assert float(total) == 3.0 * float(n) * (n - 1) / 2, "side-stream sum"
    # Before CuPy destroys the stream: CUDA may give its handle to a later stream, which must not
    # reuse the side stream's blocks (c, total are freed later) before its work is done.
    if lib.strata_end_stream(device, side.ptr) < 0:
        raise RuntimeError(lib.strata_last_error().decode())
    del side

    stats = json.loads(text(lib, lib.strata_memory_stats_json, device))
    print(text(lib, lib.strata_memory_summary, device))
    print(f"live strata allocations: {live}; allocations so far: {stats['allocation.all.allocated']}; "
          f"peak reserved {stats['reserved_bytes.all.peak'] / 2**20:.1f} MiB")

    del a, b, m, g, c, total
    cupy.cuda.Device(device).synchronize()
    if lib.strata_empty_cache(device) < 0:
        raise RuntimeError(lib.strata_last_error().decode())
    after = json.loads(text(lib, lib.strata_memory_stats_json, device))
    print(f"after freeing the arrays and strata_empty_cache: allocated "
          f"{after['allocated_bytes.all.current']} bytes, reserved "
          f"{after['reserved_bytes.all.current']} bytes, {lib.strata_live_allocations()} live")
    print("cupy_example: OK")


if __name__ == "__main__":
    main()
