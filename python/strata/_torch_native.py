"""Builds and installs strata's native PyTorch allocator (native/torch_allocator.cc).

PyTorch's CUDAAllocator interface is C++ and changes between versions, so the adapter is compiled
here, once per (source, PyTorch, CUDA, libstrata_c.so) and cached, with the C++ compiler
(``$CXX``, else ``c++``) and the include and library paths PyTorch's own extension builder uses.
It needs a CUDA toolkit's headers (``$CUDA_HOME``), as any PyTorch CUDA extension does.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile

from strata._lib import ERROR_BUSY, ERROR_INVALID_ARGUMENT, StrataError, lib, library_path

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE = os.path.join(_HERE, "native", "torch_allocator.cc")


def _header_root() -> str:
    """The directory holding strata/c_api.h: the installed package's, else the source tree's."""
    for root in (os.path.join(_HERE, "include"), os.path.dirname(os.path.dirname(_HERE))):
        if os.path.isfile(os.path.join(root, "strata", "c_api.h")):
            return root
    raise StrataError("strata/c_api.h not found next to the strata package: reinstall it with "
                      "`pip install .`", ERROR_INVALID_ARGUMENT)


def _cache_dir() -> str:
    base = os.environ.get("STRATA_TORCH_BUILD_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "strata", "torch")
    os.makedirs(base, exist_ok=True)
    return base


def build() -> str:
    """Compiles the adapter if no cached build matches; returns the shared library's path."""
    import torch
    from torch.utils import cpp_extension

    strata_lib = os.path.realpath(library_path())
    header_root = _header_root()
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cxx = os.environ.get("CXX", "c++")
    key = hashlib.sha256()
    for path in (_SOURCE, os.path.join(header_root, "strata", "c_api.h")):
        with open(path, "rb") as f:
            key.update(f.read())
    key.update(f"{torch.__version__}|{torch.version.cuda}|{strata_lib}|{abi}|{cxx}".encode())
    out = os.path.join(_cache_dir(), f"libstrata_torch-{key.hexdigest()[:16]}.so")
    if os.path.isfile(out):
        return out
    try:
        includes = cpp_extension.include_paths(device_type="cuda")
        libraries = cpp_extension.library_paths(device_type="cuda")
    except (OSError, RuntimeError, TypeError) as e:
        raise StrataError(f"strata.torch: PyTorch's CUDA include paths are unknown ({e}); set "
                          "CUDA_HOME, or use enable(native=False)", ERROR_INVALID_ARGUMENT) from e
    cmd = [cxx, "-std=c++17", "-O2", "-fPIC", "-shared", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    cmd += [f"-isystem{d}" for d in includes] + [f"-I{header_root}", _SOURCE]
    cmd += [f"-L{d}" for d in libraries]
    # The library the package loaded, by its path: the adapter shares its state.
    cmd += [f"-L{os.path.dirname(strata_lib)}", f"-l:{os.path.basename(strata_lib)}",
            f"-Wl,-rpath,{os.path.dirname(strata_lib)}", "-lc10", "-lc10_cuda", "-lcudart"]
    with tempfile.TemporaryDirectory(dir=os.path.dirname(out)) as tmp:
        target = os.path.join(tmp, "libstrata_torch.so")
        try:
            r = subprocess.run(cmd + ["-o", target], capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise StrataError(f"strata.torch: cannot run the C++ compiler {cxx!r} ({e}); set CXX, "
                              "or use enable(native=False)", ERROR_INVALID_ARGUMENT) from e
        if r.returncode != 0:
            tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-20:])
            raise StrataError("strata.torch: building the native allocator failed (use "
                              f"enable(native=False) meanwhile):\n{' '.join(cmd)}\n{tail}",
                              ERROR_INVALID_ARGUMENT)
        shutil.move(target, out)  # whole, or not at all: another process may load it at once
    return out


def install() -> None:
    """Makes the native adapter PyTorch's CUDA allocator (before the first CUDA allocation)."""
    lib()  # libstrata_c.so first: the adapter links to this very instance
    handle = ctypes.CDLL(build())
    fn = handle.strata_torch_install
    fn.restype = ctypes.c_char_p
    fn.argtypes = []
    why = fn()
    if why:
        raise StrataError("strata.torch.enable() must run before the first CUDA allocation of the "
                          f"process ({why.decode()})", ERROR_BUSY)
