"""Loading libstrata_c.so and calling it: ctypes signatures, and errors as exceptions."""

from __future__ import annotations

import ctypes
import os
from typing import Optional

_HERE = os.path.dirname(os.path.abspath(__file__))

# Error codes of strata/c_api.h.
OK = 0
ERROR_INVALID_ARGUMENT = -1
ERROR_OUT_OF_MEMORY = -2
ERROR_UNKNOWN_POINTER = -3
ERROR_BUSY = -4


class StrataError(RuntimeError):
    """A strata call failed; the message is strata's own (strata_last_error)."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def immortal_callback(fn):
    """Keeps a ctypes callback for the process's life, through interpreter exit too: another
    thread may still be inside one after it was replaced or removed, or while the interpreter
    finalizes (which clears module dicts), and calling a freed callback crashes that thread. The
    leaked reference outlives the finalization."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(fn))
    return fn


_lib: Optional[ctypes.CDLL] = None
_path: Optional[str] = None


def library_path() -> str:
    """The libstrata_c.so this package uses: $STRATA_C_LIB, else the one installed with it."""
    env = os.environ.get("STRATA_C_LIB")
    if env:
        return env
    bundled = os.path.join(_HERE, "lib", "libstrata_c.so")
    if os.path.exists(bundled):
        return bundled
    raise StrataError(
        "libstrata_c.so not found: install the package with `pip install .` from the strata "
        "source tree, or set STRATA_C_LIB to the library's path", ERROR_INVALID_ARGUMENT)


def lib() -> ctypes.CDLL:
    """The loaded library (loaded once, with every function's signature declared)."""
    global _lib, _path
    if _lib is not None:
        return _lib
    path = library_path()
    try:
        handle = ctypes.CDLL(path)
    except OSError as e:
        raise StrataError(f"cannot load {path}: {e}", ERROR_INVALID_ARGUMENT) from e
    c_int, c_size_t, c_void_p, c_char_p = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p
    signatures = {
        "strata_malloc": (c_void_p, [ctypes.c_ssize_t, c_int, c_void_p]),
        "strata_free": (None, [c_void_p, ctypes.c_ssize_t, c_int, c_void_p]),
        "strata_free_checked": (c_int, [c_void_p]),
        "strata_record_stream": (c_int, [c_void_p, c_void_p]),
        "strata_end_stream": (c_int, [c_int, c_void_p]),
        "strata_empty_cache": (c_int, [c_int]),
        "strata_set_memory_fraction": (c_int, [ctypes.c_double, c_int]),
        "strata_memory_stats_json": (c_int, [c_int, c_char_p, c_size_t]),
        "strata_memory_summary": (c_int, [c_int, c_char_p, c_size_t]),
        "strata_reset_peak_stats": (c_int, [c_int]),
        "strata_reset_accumulated_stats": (c_int, [c_int]),
        "strata_live_allocations": (ctypes.c_int64, []),
        "strata_set_flags": (c_int, [c_char_p]),
        "strata_last_error": (c_char_p, []),
        "strata_use_emulated_device": (c_int, [c_int, c_size_t]),
        "strata_emulated_stream_create": (c_int, [c_int, ctypes.POINTER(c_void_p)]),
        "strata_emulated_stream_destroy": (c_int, [c_void_p]),
        "strata_record_history": (c_int, [c_int, c_size_t, c_void_p, c_void_p]),
        "strata_stop_history": (c_int, [c_int, c_char_p]),
        "strata_snapshot": (c_int, [c_int, c_char_p, c_size_t]),
        "strata_add_oom_observer": (c_int, [c_void_p, c_void_p, c_int]),
        "strata_remove_oom_observer": (c_int, [c_int]),
    }
    for name, (restype, argtypes) in signatures.items():
        try:
            fn = getattr(handle, name)
        except AttributeError as e:
            raise StrataError(f"{path} is not strata's C library: {e}", ERROR_INVALID_ARGUMENT) from e
        fn.restype = restype
        fn.argtypes = argtypes
    _lib, _path = handle, path
    return _lib


def last_error() -> str:
    message = lib().strata_last_error()
    return message.decode(errors="replace") if message else ""


def check(code: int) -> int:
    """Returns a non-negative result; raises StrataError with strata's message otherwise."""
    if code < 0:
        raise StrataError(last_error(), code)
    return code


def text(fn, device: int) -> str:
    """Calls a strata_*(device, buf, len) text function: size first, then the text; again with a
    larger buffer when the text grew in between (other threads allocate meanwhile)."""
    device = c_int_arg("device", device)
    size = check(fn(device, None, 0)) + 1
    for _ in range(16):
        buf = ctypes.create_string_buffer(size)
        n = check(fn(device, buf, size))
        if n < size:
            return buf.value.decode(errors="replace")
        size = n + 1 + n // 8
    raise StrataError(f"the text kept growing past {size} bytes while it was read",
                      ERROR_INVALID_ARGUMENT)


def _int_arg(name: str, value, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise StrataError(f"{name} must be an int, got {value!r}", ERROR_INVALID_ARGUMENT)
    if not lo <= value <= hi:
        raise StrataError(f"{name}={value} is out of range [{lo}, {hi}]", ERROR_INVALID_ARGUMENT)
    return value


def c_int_arg(name: str, value) -> int:
    """``value`` as a C int, refused (StrataError) rather than wrapped when it does not fit."""
    return _int_arg(name, value, -(1 << 31), (1 << 31) - 1)


def size_arg(name: str, value) -> int:
    """``value`` as a C size_t, refused (StrataError) rather than wrapped when it does not fit."""
    return _int_arg(name, value, 0, (1 << (8 * ctypes.sizeof(ctypes.c_size_t))) - 1)


def pointer_arg(name: str, value) -> int:
    """A handle (a stream) as a C pointer, refused rather than wrapped when it does not fit."""
    return _int_arg(name, value, 0, (1 << (8 * ctypes.sizeof(ctypes.c_void_p))) - 1)


def text_arg(name: str, value) -> bytes:
    """A str (or, for paths, an os.PathLike) as a C string; an embedded NUL would cut it short."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str):
        data = os.fsencode(value)
    elif isinstance(value, bytes):
        data = value
    else:
        raise StrataError(f"{name} must be a str, got {value!r}", ERROR_INVALID_ARGUMENT)
    if b"\0" in data:
        raise StrataError(f"{name} contains a NUL character", ERROR_INVALID_ARGUMENT)
    return data
