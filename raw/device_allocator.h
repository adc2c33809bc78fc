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
// - A free that CUDA refuses because a stream capture is underway (one strata was not told of)
//   is deferred, never thrown (it may come from a destructor): the memory stays reserved and
//   the free is retried at the next device call of this allocator and at Release.
#pragma once

#include <atomic>
#include <cstddef>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "allocation/allocator.h"
#include "platform/device_runtime.h"
#include "raw/segment_counter.h"

namespace strata::raw {

class DeviceAllocator : public allocation::Allocator {
 public:
  static constexpr char kName[] = "device";
  static constexpr std::size_t kGranularity = std::size_t{2} << 20;

  DeviceAllocator(platform::DeviceRuntime* runtime, int device);
  ~DeviceAllocator() override;

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
  std::uint64_t ReleaseImpl(const platform::Place& place) override;

 private:
  // False when the runtime refuses because a capture is underway.
  bool TryFree(void* ptr, std::size_t size);
  // Retries the deferred frees; returns the bytes freed.
  std::uint64_t FreeDeferred();

  platform::DeviceRuntime* const runtime_;
  const int device_;
  const platform::Place place_;
  SegmentCounter counter_;
  absl::Mutex deferred_mu_;
  std::vector<std::pair<void*, std::size_t>> deferred_ ABSL_GUARDED_BY(deferred_mu_);
  std::atomic<std::size_t> num_deferred_{0};  // deferred_.size(), read without the lock
};

}  // namespace strata::raw
