// VmmPoolAllocator: one stream's view of a device's VirtualMemoryPool, as an Allocator, so the
// per-stream chains (stream-safe, recovery, retry, statistics) of a device all draw on one pool.
//
// Contract
// - Allocate asks the pool for a block for this view's stream; Free gives it back (the block
//   knows its stream). Release releases the pool (every stream's idle pages that are safe now).
// - Statistics: only the view built with `reports_stats` adds the pool's figures, so that summing
//   every chain of a device counts the pool once.
// - Thread-safe (the pool is). Throws what the pool throws.
#pragma once

#include <memory>
#include <utility>

#include "allocation/allocator.h"
#include "platform/stream.h"
#include "strategies/vmm_pool.h"

namespace strata::strategies {

class VmmPoolAllocator : public allocation::Allocator {
 public:
  static constexpr char kName[] = "vmm_pool";

  VmmPoolAllocator(std::shared_ptr<VirtualMemoryPool> pool, platform::Stream stream,
                   bool reports_stats)
      : pool_(std::move(pool)), stream_(stream), reports_stats_(reports_stats) {}

  const char* Name() const override { return kName; }
  const std::shared_ptr<VirtualMemoryPool>& pool() const { return pool_; }

  void CollectStats(allocation::MemoryStats* stats) const override {
    if (reports_stats_) pool_->CollectStats(stats);
  }
  void Snapshot(allocation::MemorySnapshot* snapshot) const override {
    if (reports_stats_) pool_->Snapshot(snapshot);
  }
  void ResetPeakStats() override {
    if (reports_stats_) pool_->ResetPeakStats();
  }
  void ResetAccumulatedStats() override {
    if (reports_stats_) pool_->ResetAccumulatedStats();
  }

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override {
    return pool_->Allocate(size, stream_);
  }
  void FreeImpl(allocation::Allocation* allocation) override { pool_->Free(allocation); }
  std::uint64_t ReleaseImpl(const platform::Place& place) override {
    return place == pool_->place() ? pool_->Release() : 0;
  }

 private:
  const std::shared_ptr<VirtualMemoryPool> pool_;
  const platform::Stream stream_;
  const bool reports_stats_;
};

}  // namespace strata::strategies
