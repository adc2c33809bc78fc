#include "strategies/naive_best_fit_allocator.h"

#include <mutex>

#include <utility>

#include "allocation/object_pool.h"
#include "glog/logging.h"

namespace strata::strategies {
namespace {

// Recycled through ObjectPool; Init re-points it at a new block.
class NaiveBestFitAllocation : public allocation::Allocation {
 public:
  void Init(const BuddyAllocator::Span& span, const platform::Place& place) {
    Reset(span.ptr, span.base, span.size, place);
  }
};

using AllocationPool = allocation::ObjectPool<NaiveBestFitAllocation>;

}  // namespace

NaiveBestFitAllocator::NaiveBestFitAllocator(std::shared_ptr<allocation::Allocator> underlying,
                                             const platform::Place& place,
                                             BuddyAllocator::Options options)
    : place_(place), buddy_(std::move(underlying), std::move(options)) {
  VLOG(4) << "naive_best_fit allocator for " << place_;
}

allocation::Allocation* NaiveBestFitAllocator::AllocateImpl(std::size_t size) {
  BuddyAllocator::Span span;
  {
    std::lock_guard<platform::SpinLock> lock(mu_);
    span = buddy_.AllocSpan(size);
  }
  NaiveBestFitAllocation* allocation = AllocationPool::Acquire();
  allocation->Init(span, place_);
  return allocation;
}

void NaiveBestFitAllocator::FreeImpl(allocation::Allocation* allocation) {
  {
    std::lock_guard<platform::SpinLock> lock(mu_);
    buddy_.Free(allocation->ptr());
  }
  AllocationPool::Release(static_cast<NaiveBestFitAllocation*>(allocation));
}

std::uint64_t NaiveBestFitAllocator::ReleaseImpl(const platform::Place& place) {
  if (place != place_) return 0;
  return Locked(*this, &BuddyAllocator::Release);
}

std::size_t NaiveBestFitAllocator::allocated_bytes() const {
  return Locked(*this, &BuddyAllocator::allocated_bytes);
}

std::size_t NaiveBestFitAllocator::reserved_bytes() const {
  return Locked(*this, &BuddyAllocator::reserved_bytes);
}

void NaiveBestFitAllocator::CollectStats(allocation::MemoryStats* stats) const {
  Locked(*this, &BuddyAllocator::CollectStats, stats);
}

void NaiveBestFitAllocator::Snapshot(allocation::MemorySnapshot* snapshot) const {
  Locked(*this, &BuddyAllocator::Snapshot, snapshot);
}

void NaiveBestFitAllocator::ResetPeakStats() { Locked(*this, &BuddyAllocator::ResetPeakStats); }

void NaiveBestFitAllocator::ResetAccumulatedStats() {
  Locked(*this, &BuddyAllocator::ResetAccumulatedStats);
}

}  // namespace strata::strategies
