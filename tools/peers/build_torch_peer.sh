#!/usr/bin/env bash
# Builds the PyTorch peer of strata-bench (tools/peers/torch_peer.cc) against the PyTorch that
# `python3` imports, on the machine that has it (the GPU machine). Our CMake never builds it.
#
#   tools/peers/build_torch_peer.sh OUTPUT.so
#
# Tries, in order, until one compiles: with peer_record_stream in C++17, then C++20, then
# without it (PyTorch's recordStream signature moved between versions). Prints the variant used.
# Environment: PYTHON (default python3), CXX (default g++), CUDA_HOME (default /usr/local/cuda);
# TORCH_DIR and TORCH_CXX11_ABI (0/1) skip asking python (e.g. headers from an unpacked wheel).
set -euo pipefail

out=${1:?usage: build_torch_peer.sh OUTPUT.so}
repo=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-python3}
cxx=${CXX:-g++}
cuda_home=${CUDA_HOME:-/usr/local/cuda}

torch_dir=${TORCH_DIR:-$("$python" -c 'import torch,os;print(os.path.dirname(torch.__file__))')}
abi=${TORCH_CXX11_ABI:-$("$python" -c 'import torch;print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')}
torch_version=${TORCH_DIR:+unknown}
torch_version=${torch_version:-$("$python" -c 'import torch;print(torch.__version__)')}
echo "build_torch_peer: torch ${torch_version} at ${torch_dir}, _GLIBCXX_USE_CXX11_ABI=${abi}"

# CUDA headers: the toolkit's, else the ones pip's nvidia packages ship next to torch.
cuda_inc=()
if [[ -f "${cuda_home}/include/cuda_runtime_api.h" ]]; then
  cuda_inc+=(-I"${cuda_home}/include")
fi
for d in "${torch_dir}"/../nvidia/*/include "${torch_dir}"/../nvidia/cu*/include; do
  [[ -f "$d/cuda_runtime_api.h" ]] && cuda_inc+=(-I"$d")
done

log=$(mktemp)
trap 'rm -f "$log"' EXIT
for variant in "record c++17" "record c++20" "plain c++17" "plain c++20"; do
  read -r kind std <<<"$variant"
  defs=()
  [[ $kind == record ]] && defs+=(-DSTRATA_PEER_RECORD_STREAM=1)
  if "$cxx" -shared -fPIC -O2 -std="$std" -D_GLIBCXX_USE_CXX11_ABI="$abi" "${defs[@]}" \
      -I"$repo" -I"${torch_dir}/include" -I"${torch_dir}/include/torch/csrc/api/include" \
      "${cuda_inc[@]}" "$repo/tools/peers/torch_peer.cc" -o "$out" \
      -L"${torch_dir}/lib" -Wl,-rpath,"${torch_dir}/lib" -lc10_cuda -lc10 >"$log" 2>&1; then
    echo "build_torch_peer: built ${out} (${kind}, ${std})"
    exit 0
  fi
  echo "build_torch_peer: variant '${variant}' failed:"
  head -n 30 "$log"
done
echo "build_torch_peer: every variant failed" >&2
exit 1
