"""What the drivers (run_e2e.py, capacity.py) share: the allocators' environments, and starting
one benchmark process and reading its result line.

Python 3 standard library only: the drivers import it, and they run without torch.
"""

import json
import os
import subprocess
import time

# The environment each allocator needs in the benchmark process (allocators.py checks that
# PyTorch picked the expected backend).
ALLOCATOR_ENV = {
    "torch_default": {},
    "torch_expandable": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    "torch_cuda_async": {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"},
    # strata's defaults: the device-wide pool on virtual memory.
    "strata": {},
    # strata's chunk pool (one auto_growth pool per stream; PyTorch's spelling of the switch).
    "strata_chunk": {"STRATA_ALLOC_CONF": "expandable_segments:False"},
    # strata's defaults through its own C++ allocator for PyTorch (strata.torch's native=True)
    # instead of CUDAPluggableAllocator.
    "strata_native": {"STRATA_TORCH_NATIVE": "1"},
}
ALLOCATORS = list(ALLOCATOR_ENV)


def child_env(allocator, lib, conf):
    """The benchmark process's environment: the driver's without either allocator's
    configuration, then `conf` (the allocator's variables). For strata runs with `lib`, the folder
    lib/ beside the library (what a bundle of its shared-library dependencies holds) goes in front
    of LD_LIBRARY_PATH when it exists."""
    env = os.environ.copy()
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    env.pop("STRATA_ALLOC_CONF", None)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    env.update(conf)
    if allocator.startswith("strata") and lib:
        libdir = os.path.join(os.path.dirname(os.path.abspath(lib)), "lib")
        if os.path.isdir(libdir):
            env["LD_LIBRARY_PATH"] = libdir + (":" + env["LD_LIBRARY_PATH"]
                                               if env.get("LD_LIBRARY_PATH") else "")
    return env


def run_child(cmd, env, timeout, result_prefix):
    """Runs one benchmark process. Returns (result, err, rc, wall_s): the JSON of its last stdout
    line that starts with `result_prefix` (None without one), its stderr, its exit status (None
    when it ran past `timeout` seconds and was stopped) and the seconds it took."""
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=timeout)
        out, err, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        rc = None
    wall = time.time() - t0
    lines = [l for l in out.splitlines() if l.startswith(result_prefix)]
    result = json.loads(lines[-1][len(result_prefix):]) if lines else None
    return result, err, rc, wall
