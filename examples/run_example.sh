#!/usr/bin/env bash
# Runs a framework example against libstrata_c.so, for CTest (tests CUDAExamples.*, label gpu).
# Exits 77 (CTest: skipped) with the reason when python3, the framework or a GPU is missing;
# otherwise the example's own exit status.
#
#   usage: run_example.sh torch|cupy <example.py> <libstrata_c.so> [example arguments...]
#   STRATA_PYTHON selects the interpreter (default: python3).
set -u
if [ $# -lt 3 ]; then
  echo "usage: $0 torch|cupy <example.py> <libstrata_c.so> [args...]" >&2
  exit 2
fi
framework=$1 script=$2 lib=$3
shift 3
python=${STRATA_PYTHON:-python3}

if ! command -v "$python" >/dev/null 2>&1; then
  echo "SKIPPED: $python not found"
  exit 77
fi
case $framework in
  torch)
    probe='import sys, torch
ok = torch.cuda.is_available()
print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPUs", torch.cuda.device_count() if ok else 0)
sys.exit(0 if ok else 3)' ;;
  cupy)
    probe='import sys, cupy
n = cupy.cuda.runtime.getDeviceCount()
print("cupy", cupy.__version__, "GPUs", n)
sys.exit(0 if n > 0 else 3)' ;;
  *)
    echo "unknown framework '$framework' (expected torch or cupy)" >&2
    exit 2 ;;
esac
if ! out=$("$python" -c "$probe" 2>&1); then
  echo "SKIPPED: $framework with a usable GPU is not available: $(printf '%s\n' "$out" | tail -n 1)"
  exit 77
fi
printf '%s\n' "$out"
if [ ! -e "$lib" ]; then
  echo "libstrata_c.so not found at $lib (build the strata_c target)" >&2
  exit 1
fi
exec "$python" "$script" --lib "$lib" "$@"
