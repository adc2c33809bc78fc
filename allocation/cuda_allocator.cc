#include "allocation/cuda_allocator.h"

#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"
#include "platform/cuda_runtime.h"

namespace strata::allocation {

namespace {
platform::DeviceRuntime* CudaOrThrow(int device) {
  std::string why;
  if (!platform::CudaRuntime::Available(&why)) {
    throw std::invalid_argument(absl::StrCat("CUDAAllocator(", device, "): ", why));
  }
  return &platform::CudaRuntime::Instance();
}
}  // namespace

CUDAAllocator::CUDAAllocator(int device) : DeviceAllocator(CudaOrThrow(device), device) {}

}  // namespace strata::allocation
