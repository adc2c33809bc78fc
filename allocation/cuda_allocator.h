// CUDAAllocator: the raw allocator of one CUDA device — cudaMalloc / cudaFree through the
// process's CudaRuntime, no caching. It is a DeviceAllocator bound to the CUDA runtime, so it
// has the same contract: thread-safe; reserved bytes counted in cudaMalloc's 2 MiB granules;
// out of memory -> BadAlloc with the device's total and free memory; size 0 -> an empty
// allocation. Constructing one without a usable GPU throws std::invalid_argument saying why.
#pragma once

#include "allocation/device_allocator.h"

namespace strata::allocation {

class CUDAAllocator : public DeviceAllocator {
 public:
  explicit CUDAAllocator(int device);

  const char* Name() const override { return "cuda"; }
};

}  // namespace strata::allocation
