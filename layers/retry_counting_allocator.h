// RetryCountingAllocator: the base of the layers that try a request again (oom_recovery, retry),
// which count their tries in MemoryStats::num_alloc_retries (PyTorch's "cache flush and retry";
// each layer says what one try is).
//
// Contract
// - CollectStats forwards, then adds this layer's count; ResetAccumulatedStats forwards, then
//   resets it. Everything else is DecoratingAllocator's.
// - Thread-safe: one relaxed atomic counter, touched on the retry path only.
#pragma once

#include <atomic>
#include <cstdint>

#include "allocation/decorating_allocator.h"
#include "allocation/memory_stats.h"

namespace strata::layers {

class RetryCountingAllocator : public allocation::DecoratingAllocator {
 public:
  void CollectStats(allocation::MemoryStats* stats) const override {
    underlying().CollectStats(stats);
    stats->num_alloc_retries += num_retries();
  }
  void ResetAccumulatedStats() override {
    underlying().ResetAccumulatedStats();
    retries_.store(0, std::memory_order_relaxed);
  }

 protected:
  using DecoratingAllocator::DecoratingAllocator;

  void CountRetry() { retries_.fetch_add(1, std::memory_order_relaxed); }
  std::int64_t num_retries() const { return retries_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::int64_t> retries_{0};
};

}  // namespace strata::layers
