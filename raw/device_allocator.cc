#include "raw/device_allocator.h"

#include <stdexcept>
#include <utility>
#include <vector>

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

DeviceAllocator::~DeviceAllocator() {
  if (num_deferred_.load(std::memory_order_relaxed) == 0) return;
  try {
    FreeDeferred();
  } catch (const std::exception& e) {
    LOG(ERROR) << "strata: a deferred device free on " << place_ << " failed: " << e.what();
  }
  absl::MutexLock lock(&deferred_mu_);
  if (!deferred_.empty()) {
    LOG(ERROR) << "strata: " << deferred_.size() << " device free(s) on " << place_
               << " still refused by a stream capture when the allocator went away: leaked";
  }
}

Allocation* DeviceAllocator::AllocateImpl(std::size_t size) {
  // Validated before the Allocation object is taken: a rejected size leaks nothing.
  const std::size_t rounded = size == 0 ? 0 : RoundToGranularity(size, place_);
  if (num_deferred_.load(std::memory_order_relaxed) != 0) [[unlikely]]
    FreeDeferred();
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
  if (void* ptr = allocation->ptr(); ptr != nullptr) {
    if (num_deferred_.load(std::memory_order_relaxed) != 0) [[unlikely]]
      FreeDeferred();
    if (!TryFree(ptr, allocation->size())) {
      absl::MutexLock lock(&deferred_mu_);
      deferred_.emplace_back(ptr, allocation->size());
      num_deferred_.store(deferred_.size(), std::memory_order_relaxed);
      LOG(WARNING) << "strata: the device free of " << allocation->size() << " bytes at " << ptr
                   << " on " << place_ << " waits for the stream capture underway to end ("
                   << deferred_.size() << " waiting)";
    }
  }
  ObjectPool<Allocation>::Release(allocation);
}

std::uint64_t DeviceAllocator::ReleaseImpl(const platform::Place& /*place*/) {
  return num_deferred_.load(std::memory_order_relaxed) != 0 ? FreeDeferred() : 0;
}

bool DeviceAllocator::TryFree(void* ptr, std::size_t size) {
  try {
    runtime_->Free(device_, ptr);
  } catch (const platform::CaptureRefusedError&) {
    return false;
  }
  const std::size_t rounded = RoundToGranularity(size, place_);
  counter_.OnFree(rounded);
  VLOG(2) << "device free " << size << " bytes at " << ptr << " on " << place_;
  return true;
}

std::uint64_t DeviceAllocator::FreeDeferred() {
  std::vector<std::pair<void*, std::size_t>> pending;
  {
    absl::MutexLock lock(&deferred_mu_);
    pending.swap(deferred_);
    num_deferred_.store(0, std::memory_order_relaxed);
  }
  std::uint64_t freed = 0;
  std::vector<std::pair<void*, std::size_t>> still;
  for (const auto& [ptr, size] : pending) {
    if (TryFree(ptr, size)) {
      freed += RoundToGranularity(size, place_);
    } else {
      still.emplace_back(ptr, size);
    }
  }
  if (!still.empty()) {
    absl::MutexLock lock(&deferred_mu_);
    deferred_.insert(deferred_.end(), still.begin(), still.end());
    num_deferred_.store(deferred_.size(), std::memory_order_relaxed);
  } else if (freed != 0) {
    VLOG(1) << "device: " << pending.size() << " deferred free(s) done on " << place_;
  }
  return freed;
}

}  // namespace strata::raw
