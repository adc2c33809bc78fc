#include "support/spin_kernel.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace strata::testing {
namespace {

__device__ __forceinline__ unsigned long long GlobalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Every thread spins on its own: whichever thread writes first has spun spin_ns already.
__global__ void SpinWriteKernel(unsigned char* dst, std::size_t bytes, unsigned char value,
                                long long spin_ns) {
  const unsigned long long start = GlobalTimerNs();
  while (static_cast<long long>(GlobalTimerNs() - start) < spin_ns) {
  }
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < bytes;
       i += stride) {
    dst[i] = value;
  }
}

}  // namespace

void LaunchSpinWriteKernel(void* dst, std::size_t bytes, unsigned char value, long long spin_ns,
                           void* cuda_stream) {
  constexpr unsigned kThreads = 256;
  const std::size_t wanted = (bytes + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(std::clamp<std::size_t>(wanted, 1, 1024));
  SpinWriteKernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(cuda_stream)>>>(
      static_cast<unsigned char*>(dst), bytes, value, spin_ns);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("LaunchSpinWriteKernel: ") + cudaGetErrorName(err) + ": " +
                             cudaGetErrorString(err));
  }
}

}  // namespace strata::testing
