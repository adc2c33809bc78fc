#include "raw/segment_counter.h"

namespace strata::raw {

using allocation::kAggregate;
using allocation::kLargePool;
using allocation::kNumStatPools;
using allocation::kSmallPool;
using allocation::MemoryStats;
using allocation::StatValue;

void SegmentCounter::Counter::Increase(std::int64_t n) {
  const std::int64_t now = current.fetch_add(n, std::memory_order_relaxed) + n;
  allocated.fetch_add(n, std::memory_order_relaxed);
  std::int64_t peak_seen = peak.load(std::memory_order_relaxed);
  while (now > peak_seen && !peak.compare_exchange_weak(peak_seen, now)) {
  }
}

void SegmentCounter::Counter::Decrease(std::int64_t n) {
  current.fetch_sub(n, std::memory_order_relaxed);
  freed.fetch_add(n, std::memory_order_relaxed);
}

void SegmentCounter::Counter::AddTo(StatValue* v) const {
  v->current += current.load(std::memory_order_relaxed);
  v->peak += peak.load(std::memory_order_relaxed);
  v->allocated += allocated.load(std::memory_order_relaxed);
  v->freed += freed.load(std::memory_order_relaxed);
}

void SegmentCounter::Count(std::size_t bytes, void (Counter::*change)(std::int64_t)) {
  const int pool = bytes <= kSmallSegment ? kSmallPool : kLargePool;
  for (int p : {static_cast<int>(kAggregate), pool}) {
    (segments_[p].*change)(1);
    (bytes_[p].*change)(static_cast<std::int64_t>(bytes));
  }
}

void SegmentCounter::OnAlloc(std::size_t bytes) {
  Count(bytes, &Counter::Increase);
  device_allocs_.fetch_add(1, std::memory_order_relaxed);
}

void SegmentCounter::OnFree(std::size_t bytes) {
  Count(bytes, &Counter::Decrease);
  device_frees_.fetch_add(1, std::memory_order_relaxed);
}

void SegmentCounter::Collect(MemoryStats* stats) const {
  for (int p = 0; p < kNumStatPools; ++p) {
    segments_[p].AddTo(&stats->segment[p]);
    bytes_[p].AddTo(&stats->reserved_bytes[p]);
  }
  stats->num_device_alloc += device_allocs_.load(std::memory_order_relaxed);
  stats->num_device_free += device_frees_.load(std::memory_order_relaxed);
}

void SegmentCounter::ResetPeak() {
  for (auto* arr : {&segments_, &bytes_}) {
    for (auto& c : *arr) c.peak.store(c.current.load());
  }
}

void SegmentCounter::ResetAccumulated() {
  for (auto* arr : {&segments_, &bytes_}) {
    for (auto& c : *arr) {
      c.allocated.store(0);
      c.freed.store(0);
    }
  }
  device_allocs_.store(0);
  device_frees_.store(0);
}

}  // namespace strata::raw
