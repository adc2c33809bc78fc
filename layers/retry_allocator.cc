#include "layers/retry_allocator.h"

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "allocation/bad_alloc.h"
#include "glog/logging.h"

namespace strata::layers {

using allocation::Allocation;
using allocation::Allocator;
using allocation::BadAlloc;

namespace {
// A waiter gives up when nothing happened on the device for this fraction of its retry time.
constexpr std::int64_t kQuietFraction = 4;
}  // namespace

RetryAllocator::RetryAllocator(std::shared_ptr<Allocator> underlying, std::int64_t retry_time_ms,
                               std::function<bool()> may_free,
                               std::shared_ptr<RetryWaiters> waiters)
    : RetryCountingAllocator(std::move(underlying), kName),
      retry_time_ms_(retry_time_ms),
      may_free_(std::move(may_free)),
      waiters_(waiters != nullptr ? std::move(waiters) : RetryWaiters::Create()) {
  VLOG(4) << "retry: over " << this->underlying().Name() << ", retry time " << retry_time_ms_
          << " ms" << (retry_time_ms_ <= 0 ? " (pass-through)" : "");
}

Allocation* RetryAllocator::AllocateImpl(std::size_t size) {
  Allocation* a;
  try {
    a = underlying().Allocate(size).release();
  } catch (const BadAlloc&) {
    if (retry_time_ms_ <= 0) throw;  // pass-through
    // Fall through: wait outside the handler.
    return AllocateWithRetry(size);
  }
  if (retry_time_ms_ > 0) waiters_->NoteAllocated();
  return a;
}

Allocation* RetryAllocator::AllocateWithRetry(std::size_t size) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + absl::Milliseconds(retry_time_ms_);
  const absl::Duration quiet = absl::Milliseconds(retry_time_ms_) / kQuietFraction;
  // Registered before the next attempt, so a free racing with it notifies us (no lost wakeup).
  waiters_->Enter();
  struct Leave {
    RetryWaiters* waiters;
    ~Leave() { waiters->Leave(); }
  } leave{waiters_.get()};
  VLOG(6) << "retry: out of memory for " << size << " bytes; waiting up to " << retry_time_ms_
          << " ms for a free";

  std::exception_ptr last;
  bool final_attempt = false;
  const char* why = "the retry time is up";
  absl::Duration poll = absl::Milliseconds(1);
  std::uint64_t activity = waiters_->Activity();
  absl::Time last_activity = start;
  for (;;) {
    const std::uint64_t seen = waiters_->free_epoch();
    CountRetry();
    try {
      Allocation* a = underlying().Allocate(size).release();
      waiters_->NoteAllocated();
      return a;
    } catch (const BadAlloc&) {
      last = std::current_exception();  // keeps the exact type and message
    }
    if (final_attempt) break;
    // Each time: one last attempt, not a wait, since asking may have reclaimed memory
    // (completed frees).
    if (may_free_ && !may_free_()) {
      why = "nothing could give memory back";
      final_attempt = true;
      continue;
    }
    if (waiters_->NobodyCanFree()) {
      why = "every thread using the device is waiting for memory";
      final_attempt = true;
      continue;
    }
    const absl::Time now = absl::Now();
    if (const std::uint64_t a = waiters_->Activity(); a != activity) {
      activity = a;
      last_activity = now;
    } else if (now - last_activity >= quiet && !waiters_->CouldComeBackAlone()) {
      why = "nothing was freed or allocated on the device for a quarter of the retry time";
      final_attempt = true;
      continue;
    }
    // Until a free on the device, or the poll interval: memory also comes back below us
    // (deferred frees reclaimed, thread caches), which notifies nobody.
    waiters_->WaitForFree(seen, std::min(deadline, now + poll));
    poll = std::min(poll * 2, absl::Milliseconds(64));
    // At the deadline, one last attempt.
    if (absl::Now() >= deadline) final_attempt = true;
  }
  if (absl::Now() < deadline) early_failures_.fetch_add(1, std::memory_order_relaxed);
  VLOG(6) << "retry: giving up on " << size << " bytes after "
          << absl::ToInt64Milliseconds(absl::Now() - start) << " ms: " << why;
  std::rethrow_exception(last);
}

void RetryAllocator::FreeImpl(Allocation* allocation) {
  underlying().Free(allocation);
  // Common case: nobody waits, so no lock and no notify.
  if (retry_time_ms_ > 0) waiters_->NoteFreed();
}

}  // namespace strata::layers
