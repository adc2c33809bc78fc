#include "tools/busy_kernel.h"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace strata::tools {
namespace {

__global__ void BusyKernel(long long spin_ns) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (static_cast<long long>(now - start) >= spin_ns) break;
  }
}

}  // namespace

void LaunchBusyKernel(long long spin_ns, void* cuda_stream) {
  BusyKernel<<<1, 1, 0, static_cast<cudaStream_t>(cuda_stream)>>>(spin_ns);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("LaunchBusyKernel: ") + cudaGetErrorString(err));
  }
}

}  // namespace strata::tools
