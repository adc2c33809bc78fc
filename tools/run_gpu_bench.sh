#!/usr/bin/env bash
# Runs strata-bench on the GPU machine against its peers (PyTorch's caching allocator, built
# here from tools/peers/torch_peer.cc, and cudaMallocAsync), then writes the markdown report.
#
#   tools/run_gpu_bench.sh BUNDLE_DIR OUT_DIR [more strata-bench / --benchmark_* flags]
#
# BUNDLE_DIR comes from tools/bundle_bench.sh (strata-bench, lib/, traces/). Writes to OUT_DIR:
# bench.json (Google Benchmark JSON), bench.txt (console), BENCHMARKS.md (bench_report.py),
# torch_peer_build.log. Without a usable PyTorch the run goes on without the torch peer.
set -uo pipefail

bundle=$(cd "${1:?usage: run_gpu_bench.sh BUNDLE_DIR OUT_DIR [flags]}" && pwd)
out=${2:?usage: run_gpu_bench.sh BUNDLE_DIR OUT_DIR [flags]}
shift 2
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.." || exit 1

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

# Built before LD_LIBRARY_PATH points at the bundle, so PyTorch's import sees its own libraries.
peer=/tmp/strata_torch_peer.so
peer_flag=()
if bash tools/peers/build_torch_peer.sh "$peer" >"$out/torch_peer_build.log" 2>&1; then
  peer_flag=(--torch_peer="$peer")
fi
tail -n 3 "$out/torch_peer_build.log"

trace_flag=()
if compgen -G "$bundle/traces/*.trace*" >/dev/null; then trace_flag=(--trace_dir="$bundle/traces"); fi

export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$bundle/strata-bench" --device=cuda "${peer_flag[@]}" "${trace_flag[@]}" \
  --benchmark_format=console --benchmark_out="$out/bench.json" --benchmark_out_format=json \
  "$@" 2>&1 | tee "$out/bench.txt"
rc=${PIPESTATUS[0]}

if [[ -s "$out/bench.json" ]]; then
  python3 tools/bench_report.py "$out/bench.json" -o "$out/BENCHMARKS.md" && cat "$out/BENCHMARKS.md"
fi
exit "$rc"
