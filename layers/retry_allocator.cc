#include "layers/retry_allocator.h"

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "allocation/bad_alloc.h"
#include "glog/logging.h"

namespace strata::allocation {

RetryAllocator::RetryAllocator(std::shared_ptr<Allocator> underlying, std::int64_t retry_time_ms,
                               std::function<bool()> may_free)
    : DecoratingAllocator(std::move(underlying), "RetryAllocator"),
      retry_time_ms_(retry_time_ms),
      may_free_(std::move(may_free)) {
  VLOG(4) << "retry: over " << this->underlying().Name() << ", retry time " << retry_time_ms_
          << " ms" << (retry_time_ms_ <= 0 ? " (pass-through)" : "");
}

Allocation* RetryAllocator::AllocateImpl(std::size_t size) {
  try {
    return underlying().Allocate(size).release();
  } catch (const BadAlloc&) {
    if (retry_time_ms_ <= 0) throw;  // pass-through
    // Fall through: wait outside the handler.
  }
  return AllocateWithRetry(size);
}

Allocation* RetryAllocator::AllocateWithRetry(std::size_t size) {
  const absl::Time deadline = absl::Now() + absl::Milliseconds(retry_time_ms_);
  // Registered before the next attempt, so a free racing with it notifies us (no lost wakeup).
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  struct Leave {
    std::atomic<int>* waiters;
    ~Leave() { waiters->fetch_sub(1, std::memory_order_seq_cst); }
  } leave{&waiters_};
  VLOG(6) << "retry: out of memory for " << size << " bytes; waiting up to " << retry_time_ms_
          << " ms for a free";

  std::exception_ptr last;
  bool final_attempt = false;
  absl::Duration poll = absl::Milliseconds(1);
  for (;;) {
    std::uint64_t seen;
    {
      absl::MutexLock lock(&mu_);
      seen = free_epoch_;
    }
    retries_.fetch_add(1, std::memory_order_relaxed);
    try {
      return underlying().Allocate(size).release();
    } catch (const BadAlloc&) {
      last = std::current_exception();  // keeps the exact type and message
    }
    if (final_attempt) break;
    if (may_free_ && !may_free_()) {
      // One last attempt, not a wait: asking may have reclaimed memory (completed frees).
      VLOG(6) << "retry: nothing could give " << size << " bytes back; not waiting";
      final_attempt = true;
      continue;
    }
    absl::MutexLock lock(&mu_);
    // Until a free through this layer, or the poll interval: memory also comes back below us
    // (deferred frees reclaimed, other pools), which notifies nobody.
    const absl::Time until = std::min(deadline, absl::Now() + poll);
    poll = std::min(poll * 2, absl::Milliseconds(64));
    while (free_epoch_ == seen && !freed_.WaitWithDeadline(&mu_, until)) {
    }
    // At the deadline, one last attempt.
    if (absl::Now() >= deadline) final_attempt = true;
  }
  VLOG(6) << "retry: giving up on " << size << " bytes after " << retry_time_ms_ << " ms";
  std::rethrow_exception(last);
}

void RetryAllocator::FreeImpl(Allocation* allocation) {
  underlying().Free(allocation);
  // Common case: nobody waits, so no lock and no notify. (A seq_cst load is a plain load on
  // x86; it pairs with the waiter's seq_cst increment so that no wakeup is lost.)
  if (waiters_.load(std::memory_order_seq_cst) != 0) [[unlikely]]
    NotifyWaiters();
}

void RetryAllocator::NotifyWaiters() {
  absl::MutexLock lock(&mu_);
  ++free_epoch_;
  freed_.SignalAll();
  notifications_.fetch_add(1, std::memory_order_relaxed);
}

void RetryAllocator::CollectStats(MemoryStats* stats) const {
  underlying().CollectStats(stats);
  stats->num_alloc_retries += retries_.load(std::memory_order_relaxed);
}

void RetryAllocator::ResetAccumulatedStats() {
  underlying().ResetAccumulatedStats();
  retries_.store(0, std::memory_order_relaxed);
}

}  // namespace strata::allocation
