// RetryAllocator: on out-of-memory, waits for memory to be freed and tries again.
//
// Contract
// - Allocate: forwards. When the layer below throws allocation::BadAlloc, waits up to
// `retry_time_ms` for
//   memory to come back and retries: at once after each free through any retry layer sharing
//   its RetryWaiters (the facade gives every stream's chain of a device the same one), and every
//   few milliseconds (1 ms, doubling up to 64 ms) for memory that comes back without passing
//   through one: deferred cross-stream frees whose events completed below, blocks parked in
//   thread caches. It stops waiting early, makes one last attempt and rethrows its
//   allocation::BadAlloc
//   - when `may_free` (optional: whether anything could still give memory back, live
//     allocations or pending frees) is false;
//   - when nobody can free (RetryWaiters::NobodyCanFree: every thread using the device waits,
//     this one included, and no free waits on stream work);
//   - when nothing happened on the device (no free, no successful allocation) for a quarter of
//     the retry time while it waited, and no free waits on stream work.
//   When the time is up it tries once more. What it rethrows is the last allocation::BadAlloc of
//   the layer below, unchanged (same type, same message).
// - retry_time_ms <= 0: no retry; the layer is a pure pass-through (no waiter bookkeeping).
// - Free: forwards, then wakes the waiters of its RetryWaiters. With no waiter, a free or an
//   allocation costs a thread-local compare and one atomic load: no lock, no notify.
// - Thread safety: Allocate and Free may run concurrently from any thread.
// - Statistics: CollectStats forwards, then adds num_alloc_retries (one per retried underlying
//   Allocate call); ResetAccumulatedStats resets it (RetryCountingAllocator).
// - Throws std::invalid_argument for a null underlying allocator.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "layers/retry_counting_allocator.h"
#include "layers/retry_waiters.h"

namespace strata::layers {

class RetryAllocator : public RetryCountingAllocator {
 public:
  static constexpr char kName[] = "retry";
  // `waiters`: the device's registry, shared with the other retry layers of the device (null:
  // one of its own, which cannot tell that nobody can free).
  RetryAllocator(std::shared_ptr<allocation::Allocator> underlying, std::int64_t retry_time_ms,
                 std::function<bool()> may_free = nullptr,
                 std::shared_ptr<RetryWaiters> waiters = nullptr);

  const char* Name() const override { return kName; }
  std::int64_t retry_time_ms() const { return retry_time_ms_; }

  // Introspection (tests, diagnostics).
  std::int64_t num_alloc_retries() const { return num_retries(); }
  // Of the shared registry: frees that had to wake waiters, threads waiting (all its layers).
  std::uint64_t num_notifications() const { return waiters_->num_notifications(); }
  int num_waiters() const { return waiters_->num_waiters(); }
  // Waits that ended early because nobody could free or nothing happened (this layer).
  std::int64_t num_early_failures() const {
    return early_failures_.load(std::memory_order_relaxed);
  }

 protected:
  // noinline: keeps GCC from speculatively inlining the layer into itself where it calls the
  // layer below (which "might" be the same class), a compare and register spills per call.
  [[gnu::noinline]] allocation::Allocation* AllocateImpl(std::size_t size) override;
  [[gnu::noinline]] void FreeImpl(allocation::Allocation* allocation) override;

 private:
  allocation::Allocation* AllocateWithRetry(std::size_t size);

  const std::int64_t retry_time_ms_;
  const std::function<bool()> may_free_;
  const std::shared_ptr<RetryWaiters> waiters_;
  std::atomic<std::int64_t> early_failures_{0};
};

}  // namespace strata::layers
