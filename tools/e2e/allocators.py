"""The five CUDA allocators of the end-to-end benchmark, set up inside one benchmark process.

Each allocator is chosen before PyTorch's first CUDA allocation and read back after the
workload ran:

- torch_default: PyTorch's caching allocator (PYTORCH_CUDA_ALLOC_CONF unset).
- torch_expandable: the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.
- torch_cuda_async: PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (CUDA's stream-ordered pool).
- strata: libstrata_c.so (strata/c_api.h) through torch.cuda.memory.CUDAPluggableAllocator,
  with PyTorch's record_stream and empty_cache hooks wired to strata_record_stream and
  strata_empty_cache where this PyTorch exposes the setters; strata_chunk: the same with
  STRATA_ALLOC_CONF=expandable_segments:False (the chunk pool instead of the default
  virtual-memory pool); strata_native: strata's defaults through the package's own C++
  allocator for PyTorch (python/strata/native/torch_allocator.cc, compiled on first use)
  instead of the pluggable wrapper.

The PyTorch modes are selected by the environment, which the driver (run_e2e.py) sets before
starting the process; `setup` only checks that PyTorch picked the expected backend. The three
PyTorch modes report torch.cuda.memory_stats(); strata reports its own statistics
(strata_memory_stats_json, the same key names), since PyTorch's statistics functions raise for a
pluggable allocator.
"""

import ctypes
import json
import os
import sys

import torch

import launch

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The environment each allocator needs, applied by the driver to the benchmark process.
ENV = launch.ALLOCATOR_ENV
NAMES = launch.ALLOCATORS

# The statistics copied into each result besides the peaks (when the allocator reports them).
EXTRA_KEYS = [
    "num_device_alloc",
    "num_device_free",
    "num_device_map",
    "num_device_unmap",
    "num_stream_waits",
    "num_host_waits",
    "num_alloc_retries",
    "num_ooms",
    "segment.all.peak",
    "active_bytes.all.peak",
    "requested_bytes.all.peak",
]


class TorchAllocator:
    """One of PyTorch's own allocators, as configured by PYTORCH_CUDA_ALLOC_CONF."""

    def __init__(self, name, device):
        self.name = name
        self.device = device
        self.info = {"PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}

    def check(self):
        backend = torch.cuda.get_allocator_backend()
        want = "cudaMallocAsync" if self.name == "torch_cuda_async" else "native"
        self.info["backend"] = backend
        if backend != want:
            raise RuntimeError(f"PyTorch allocator backend is {backend!r}, expected {want!r}")

    def stats(self):
        return torch.cuda.memory_stats(self.device)

    def reset_peak(self):
        torch.cuda.reset_peak_memory_stats(self.device)

    def empty_cache(self):
        torch.cuda.empty_cache()


class StrataAllocator:
    """libstrata_c.so as PyTorch's CUDA allocator."""

    def __init__(self, lib_path, device):
        self.device = device
        self.path = os.path.abspath(lib_path)
        # The same path as CUDAPluggableAllocator's own ctypes.CDLL: one library instance, so these
        # statistics are those of PyTorch's allocations.
        lib = ctypes.CDLL(self.path)
        lib.strata_malloc.restype = ctypes.c_void_p
        lib.strata_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        lib.strata_free.restype = None
        lib.strata_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                                    ctypes.c_void_p]
        lib.strata_empty_cache.argtypes = [ctypes.c_int]
        lib.strata_reset_peak_stats.argtypes = [ctypes.c_int]
        lib.strata_memory_stats_json.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        lib.strata_last_error.restype = ctypes.c_char_p
        lib.strata_live_allocations.restype = ctypes.c_int64
        self.lib = lib
        self.info = {"lib": self.path, "STRATA_ALLOC_CONF": os.environ.get("STRATA_ALLOC_CONF", "")}
        self._reset_cb = None  # keeps the ctypes trampoline alive for PyTorch's reset_fn

        # Fails early, with strata's reason, when CUDA is unusable from the library.
        p = lib.strata_malloc(1, device, None)
        if not p:
            raise RuntimeError(f"strata cannot allocate on cuda:{device}: {self._error()}")
        lib.strata_free(p, 1, device, None)
        lib.strata_empty_cache(device)  # start from nothing reserved: the probe is not the workload's
        lib.strata_reset_peak_stats(device)

        if os.environ.get("STRATA_TORCH_NATIVE") == "1":
            # strata_native: the package's C++ allocator for PyTorch, over this same library.
            os.environ["STRATA_C_LIB"] = self.path
            sys.path.insert(0, os.path.join(_REPO, "python"))
            from strata import _torch_native
            _torch_native.install()
            self.info["path"] = "native (strata/native/torch_allocator.cc)"
            self.allocator = None
            return

        # strata_malloc_or_throw, as the package wires it: PyTorch does not check alloc_fn's
        # result, so a plain strata_malloc's NULL would surface later as an illegal address (and
        # poison the CUDA context); the exception becomes an out-of-memory RuntimeError instead.
        alloc = torch.cuda.memory.CUDAPluggableAllocator(self.path, "strata_malloc_or_throw",
                                                         "strata_free")
        native = alloc.allocator()
        # tensor.record_stream(s) -> strata_record_stream(ptr, s). PyTorch expects
        # void(void*, cudaStream_t); strata's int result is ignored, which the C ABI allows.
        if hasattr(native, "set_record_stream_fn"):
            native.set_record_stream_fn(ctypes.cast(lib.strata_record_stream, ctypes.c_void_p).value)
            self.info["record_stream_fn"] = "strata_record_stream"
        else:
            self.info["record_stream_fn"] = "MISSING: set_record_stream_fn not exposed by PyTorch"
        # torch.cuda.empty_cache() -> strata_empty_cache. PyTorch's reset_fn is void(void) and
        # strata_empty_cache is int(int), so the signatures do not fit: a ctypes trampoline
        # calls it for every device instead.
        if hasattr(native, "set_reset_fn"):
            ndev = torch.cuda.device_count()

            def reset():
                for d in range(ndev):
                    lib.strata_empty_cache(d)

            self._reset_cb = ctypes.CFUNCTYPE(None)(reset)
            native.set_reset_fn(ctypes.cast(self._reset_cb, ctypes.c_void_p).value)
            self.info["reset_fn"] = "ctypes trampoline -> strata_empty_cache(d) for each device"
        else:
            self.info["reset_fn"] = "MISSING: set_reset_fn not exposed by PyTorch"
        torch.cuda.memory.change_current_allocator(alloc)
        self.allocator = alloc

    def _error(self):
        return self.lib.strata_last_error().decode(errors="replace")

    def check(self):
        self.info["backend"] = torch.cuda.get_allocator_backend()

    def stats(self):
        n = self.lib.strata_memory_stats_json(self.device, None, 0)
        if n < 0:
            raise RuntimeError(f"strata_memory_stats_json failed ({n}): {self._error()}")
        buf = ctypes.create_string_buffer(n + 1)
        self.lib.strata_memory_stats_json(self.device, buf, n + 1)
        return json.loads(buf.value.decode())

    def reset_peak(self):
        self.lib.strata_reset_peak_stats(self.device)

    def empty_cache(self):
        torch.cuda.empty_cache()  # through the reset_fn trampoline when it is wired
        if self._reset_cb is None:
            self.lib.strata_empty_cache(self.device)


def setup(name, device, lib_path=None):
    """Installs allocator `name`; call before any CUDA allocation."""
    if name in ("strata", "strata_chunk", "strata_native"):
        if not lib_path:
            raise RuntimeError("the strata allocator needs --lib (path of libstrata_c.so)")
        return StrataAllocator(lib_path, device)
    if name not in ENV:
        raise RuntimeError(f"unknown allocator {name!r}; known: {', '.join(NAMES)}")
    return TorchAllocator(name, device)
