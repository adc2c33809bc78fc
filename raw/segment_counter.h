// SegmentCounter: the statistics a raw allocator owns — segments (device allocations) and
// reserved bytes per pool, device alloc/free counts — kept with relaxed atomics (raw
// allocations are rare: a system call each), so raw allocators need no lock.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "allocation/memory_stats.h"

namespace strata::raw {

class SegmentCounter {
 public:
  // Segments up to this size count as the small pool (the 2 MiB segments small blocks use).
  static constexpr std::size_t kSmallSegment = std::size_t{2} << 20;

  void OnAlloc(std::size_t bytes);
  void OnFree(std::size_t bytes);
  void Collect(allocation::MemoryStats* stats) const;
  void ResetPeak();
  void ResetAccumulated();

  std::int64_t reserved_bytes() const { return bytes_[allocation::kAggregate].current.load(); }
  std::int64_t device_allocs() const { return device_allocs_.load(); }
  std::int64_t device_frees() const { return device_frees_.load(); }

 private:
  struct Counter {
    std::atomic<std::int64_t> current{0}, peak{0}, allocated{0}, freed{0};
    void Increase(std::int64_t n);
    void Decrease(std::int64_t n);
    void AddTo(allocation::StatValue* v) const;
  };
  // Applies `change` (Increase or Decrease) to the aggregate and to the segment's own pool.
  void Count(std::size_t bytes, void (Counter::*change)(std::int64_t));

  std::array<Counter, allocation::kNumStatPools> segments_, bytes_;
  std::atomic<std::int64_t> device_allocs_{0}, device_frees_{0};
};

}  // namespace strata::raw
