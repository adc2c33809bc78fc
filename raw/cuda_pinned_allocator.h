// CUDAPinnedAllocator: the raw page-locked host allocator (cudaHostAlloc on the CUDA runtime;
// plain host memory on the emulated one), no caching. Thread-safe. Out of memory -> BadAlloc.
// Size 0 -> an empty allocation.
#pragma once

#include <cstddef>

#include "allocation/allocator.h"
#include "platform/device_runtime.h"
#include "raw/segment_counter.h"

namespace strata::raw {

class CUDAPinnedAllocator : public allocation::Allocator {
 public:
  static constexpr char kName[] = "cuda_pinned";

  explicit CUDAPinnedAllocator(platform::DeviceRuntime* runtime);

  const char* Name() const override { return kName; }
  void CollectStats(allocation::MemoryStats* stats) const override { counter_.Collect(stats); }
  void ResetPeakStats() override { counter_.ResetPeak(); }
  void ResetAccumulatedStats() override { counter_.ResetAccumulated(); }

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override;
  void FreeImpl(allocation::Allocation* allocation) override;

 private:
  platform::DeviceRuntime* const runtime_;
  SegmentCounter counter_;
};

}  // namespace strata::raw
