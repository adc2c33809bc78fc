// CPUAllocator: the raw host allocator — aligned heap memory (64 B by default, a cache line),
// no caching. Thread-safe. Out of memory -> BadAlloc; a non-power-of-two alignment or a size
// that overflows when rounded -> std::invalid_argument. Size 0 -> an empty allocation.
#pragma once

#include <cstddef>

#include "allocation/allocator.h"
#include "raw/segment_counter.h"

namespace strata::raw {

class CPUAllocator : public allocation::Allocator {
 public:
  static constexpr char kName[] = "cpu";

  explicit CPUAllocator(std::size_t alignment = 64);

  const char* Name() const override { return kName; }
  void CollectStats(allocation::MemoryStats* stats) const override { counter_.Collect(stats); }
  void ResetPeakStats() override { counter_.ResetPeak(); }
  void ResetAccumulatedStats() override { counter_.ResetAccumulated(); }
  std::size_t alignment() const { return alignment_; }

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override;
  void FreeImpl(allocation::Allocation* allocation) override;

 private:
  const std::size_t alignment_;
  SegmentCounter counter_;
};

}  // namespace strata::raw
