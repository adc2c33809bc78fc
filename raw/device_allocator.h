// DeviceAllocator: the raw allocator of one device over any DeviceRuntime (CUDA or emulated):
// one runtime Malloc per Allocate, one Free per free — no caching.
//
// Contract
// - Thread-safe (the runtime is); counters are relaxed atomics.
// - Reserved bytes count each device allocation rounded up to the 2 MiB granularity of
//   cudaMalloc, as the device sees it.
// - Out of memory -> BadAlloc carrying the device's total and free memory; a size that cannot be
//   rounded -> std::invalid_argument. Size 0 -> an empty allocation (nullptr), no device call.
// - Not stream-ordered: freeing returns memory to the device at once (cudaFree itself waits
//   for the device as CUDA defines).
#pragma once

#include <cstddef>

#include "allocation/allocator.h"
#include "platform/device_runtime.h"
#include "raw/segment_counter.h"

namespace strata::raw {

class DeviceAllocator : public allocation::Allocator {
 public:
  static constexpr char kName[] = "device";
  static constexpr std::size_t kGranularity = std::size_t{2} << 20;

  DeviceAllocator(platform::DeviceRuntime* runtime, int device);

  const char* Name() const override { return kName; }
  void CollectStats(allocation::MemoryStats* stats) const override { counter_.Collect(stats); }
  void ResetPeakStats() override { counter_.ResetPeak(); }
  void ResetAccumulatedStats() override { counter_.ResetAccumulated(); }

  platform::DeviceRuntime* runtime() const { return runtime_; }
  int device() const { return device_; }
  std::int64_t reserved_bytes() const { return counter_.reserved_bytes(); }
  std::int64_t device_mallocs() const { return counter_.device_allocs(); }
  std::int64_t device_frees() const { return counter_.device_frees(); }

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override;
  void FreeImpl(allocation::Allocation* allocation) override;

 private:
  platform::DeviceRuntime* const runtime_;
  const int device_;
  const platform::Place place_;
  SegmentCounter counter_;
};

}  // namespace strata::raw
