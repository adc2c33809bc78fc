#include "raw/device_allocator.h"

#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "allocation/bad_alloc.h"
#include "allocation/object_pool.h"
#include "glog/logging.h"

namespace strata::raw {

using allocation::Allocation;
using allocation::BadAlloc;
using allocation::ObjectPool;

namespace {
std::size_t RoundToGranularity(std::size_t size, const platform::Place& place) {
  if (size > SIZE_MAX - DeviceAllocator::kGranularity) {
    throw std::invalid_argument(
        absl::StrCat("strata: cannot allocate ", size, " bytes on ", place.ToString(),
                     ": the size overflows when rounded to the device granularity"));
  }
  return (size + DeviceAllocator::kGranularity - 1) / DeviceAllocator::kGranularity *
         DeviceAllocator::kGranularity;
}
}  // namespace

DeviceAllocator::DeviceAllocator(platform::DeviceRuntime* runtime, int device)
    : runtime_(runtime), device_(device), place_(platform::CUDAPlace(device)) {
  if (runtime_ == nullptr) throw std::invalid_argument(absl::StrCat(kName, ": runtime is null"));
  if (device < 0 || device >= runtime_->DeviceCount()) {
    throw std::invalid_argument(absl::StrCat(kName, ": invalid device ", device, " (",
                                             runtime_->DeviceCount(), " device(s) on ",
                                             runtime_->Name(), ")"));
  }
}

Allocation* DeviceAllocator::AllocateImpl(std::size_t size) {
  // Validated before the Allocation object is taken: a rejected size leaks nothing.
  const std::size_t rounded = size == 0 ? 0 : RoundToGranularity(size, place_);
  Allocation* a = ObjectPool<Allocation>::Acquire();
  if (size == 0) {
    a->Reset(nullptr, nullptr, 0, place_);
    return a;
  }
  void* ptr;
  try {
    ptr = runtime_->Malloc(device_, size);
  } catch (...) {  // a runtime error (bad device, sticky CUDA error): give the object back
    ObjectPool<Allocation>::Release(a);
    throw;
  }
  if (ptr == nullptr) {
    ObjectPool<Allocation>::Release(a);
    std::size_t free_bytes = 0, total_bytes = 0;
    runtime_->MemInfo(device_, &free_bytes, &total_bytes);
    VLOG(1) << "device malloc of " << size << " bytes failed on " << place_;
    throw BadAlloc(place_, size)
        .set_device_memory(total_bytes, free_bytes)
        .set_hint("If the memory is held by this process's caches, release them (EmptyCache).");
  }
  counter_.OnAlloc(rounded);
  VLOG(2) << "device malloc " << rounded << " bytes at " << ptr << " on " << place_;
  a->Reset(ptr, ptr, size, place_);
  return a;
}

void DeviceAllocator::FreeImpl(Allocation* allocation) {
  if (allocation->ptr() != nullptr) {
    runtime_->Free(device_, allocation->ptr());
    counter_.OnFree(RoundToGranularity(allocation->size(), place_));
    VLOG(2) << "device free " << allocation->size() << " bytes at " << allocation->ptr() << " on "
            << place_;
  }
  ObjectPool<Allocation>::Release(allocation);
}

}  // namespace strata::raw
