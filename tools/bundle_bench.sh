#!/usr/bin/env bash
# Packs strata-bench for the GPU machine, which has CUDA and PyTorch but neither Abseil, glog nor
# Google Benchmark: the binary, the shared libraries it needs beyond glibc/libstdc++/the CUDA
# driver (lib/), and the shared traces (traces/). Run here, from the repository root, after
# building; then carry the bundle (an ignored folder) and run tools/run_gpu_bench.sh there.
#
#   tools/bundle_bench.sh [BUILD_DIR (default build)] [BUNDLE_DIR (default gpu-bundle)]
# Environment: TRACE_DIR (default ../shared/traces) — the traces to pack.
set -euo pipefail

build=${1:-build}
bundle=${2:-gpu-bundle}
bin="$build/bin/strata-bench"
[[ -x $bin ]] || { echo "bundle_bench: $bin not found: build the strata-bench target first" >&2; exit 1; }

mkdir -p "$bundle/lib" "$bundle/traces"
cp "$bin" "$bundle/"
ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r soname path; do
  case "$soname" in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux* | libstdc++.so* | \
      libgcc_s.so* | libcuda.so* | libnvidia*) continue ;;
  esac
  cp -L "$path" "$bundle/lib/$soname"
done
trace_dir=${TRACE_DIR:-../shared/traces}
if [[ -d $trace_dir ]]; then
  cp "$trace_dir"/*.trace.gz "$bundle/traces/" 2>/dev/null || true
fi
echo "bundle_bench: $(du -sh "$bundle" | cut -f1) in $bundle:" \
  "strata-bench, $(ls "$bundle/lib" | wc -l) libraries, $(ls "$bundle/traces" | wc -l) traces"
