// ScopedCacheAllocator: the top layer of each CUDA chain; routes allocations and frees through
// the thread's active named cache (see cache_scope.h), and passes straight through otherwise
// (one thread-local check).
//
// Thread-safe when the layer below is. A free is cached only when `cacheable` says so (the
// facade refuses allocations recorded on other streams).
#pragma once

#include <memory>

#include "allocation/allocator.h"
#include "platform/stream.h"

namespace strata::facade {

class ScopedCacheAllocator : public allocation::Allocator {
 public:
  using CacheablePredicate = bool (*)(const allocation::Allocation&);

  ScopedCacheAllocator(std::shared_ptr<allocation::Allocator> underlying,
                       const platform::Place& place, platform::Stream stream,
                       CacheablePredicate cacheable)
      : underlying_(std::move(underlying)), place_(place), stream_(stream), cacheable_(cacheable) {}

  const char* Name() const override { return "scoped_cache"; }
  bool IsAllocThreadSafe() const override { return underlying_->IsAllocThreadSafe(); }
  void CollectStats(allocation::MemoryStats* stats) const override {
    underlying_->CollectStats(stats);
  }
  void ResetPeakStats() override { underlying_->ResetPeakStats(); }
  void ResetAccumulatedStats() override { underlying_->ResetAccumulatedStats(); }

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override;
  void FreeImpl(allocation::Allocation* allocation) override;
  std::uint64_t ReleaseImpl(const platform::Place& place) override {
    return underlying_->Release(place);
  }

 private:
  std::shared_ptr<allocation::Allocator> underlying_;
  const platform::Place place_;
  const platform::Stream stream_;
  const CacheablePredicate cacheable_;
};

}  // namespace strata::facade
