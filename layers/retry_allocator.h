// RetryAllocator: on out-of-memory, waits for memory to be freed and tries again.
//
// Contract
// - Allocate: forwards. When the layer below throws BadAlloc, waits up to `retry_time_ms` for
//   memory to come back and retries: at once after each free through THIS allocator (the facade
//   builds one per stream), and every few milliseconds (1 ms, doubling up to 64 ms) for memory
//   that comes back without passing through it: deferred cross-stream frees whose events
//   completed below, other streams' pools. When the time is up it tries once more, then
//   rethrows the last BadAlloc of the layer below unchanged (same type, same message).
// - `may_free` (optional): whether anything could still give memory back (live allocations,
//   pending frees). Checked before each wait: when false, one last attempt is made (asking may
//   itself have reclaimed completed frees) and its BadAlloc rethrown, rather than after the full
//   retry time.
// - retry_time_ms <= 0: no retry; the layer is a pure pass-through.
// - Free: forwards, then wakes the waiters. With no waiter a free costs one atomic load — no
//   lock, no notify.
// - Thread safety: Allocate and Free may run concurrently from any thread.
// - Statistics: CollectStats forwards, then adds num_alloc_retries (one per retried underlying
//   Allocate call); ResetAccumulatedStats resets it.
// - Throws std::invalid_argument for a null underlying allocator.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "allocation/decorating_allocator.h"
#include "allocation/memory_stats.h"

namespace strata::allocation {

class RetryAllocator : public DecoratingAllocator {
 public:
  RetryAllocator(std::shared_ptr<Allocator> underlying, std::int64_t retry_time_ms,
                 std::function<bool()> may_free = nullptr);

  const char* Name() const override { return "retry"; }
  std::int64_t retry_time_ms() const { return retry_time_ms_; }

  // Introspection (tests, diagnostics).
  std::int64_t num_alloc_retries() const { return retries_.load(std::memory_order_relaxed); }
  // Frees that had to wake waiters (free with no waiter never counts).
  std::uint64_t num_notifications() const { return notifications_.load(std::memory_order_relaxed); }
  int num_waiters() const { return waiters_.load(std::memory_order_relaxed); }

  void CollectStats(MemoryStats* stats) const override;
  void ResetAccumulatedStats() override;

 protected:
  // noinline: keeps GCC from speculatively inlining the layer into itself where it calls the
  // layer below (which "might" be the same class), a compare and register spills per call.
  [[gnu::noinline]] Allocation* AllocateImpl(std::size_t size) override;
  [[gnu::noinline]] void FreeImpl(Allocation* allocation) override;

 private:
  Allocation* AllocateWithRetry(std::size_t size);
  [[gnu::noinline, gnu::cold]] void NotifyWaiters();

  const std::int64_t retry_time_ms_;
  const std::function<bool()> may_free_;
  // Threads inside AllocateWithRetry; a free notifies only when it is non-zero.
  std::atomic<int> waiters_{0};
  std::atomic<std::int64_t> retries_{0};
  std::atomic<std::uint64_t> notifications_{0};
  absl::Mutex mu_;
  absl::CondVar freed_;
  std::uint64_t free_epoch_ ABSL_GUARDED_BY(mu_) = 0;  // bumped by each notifying free
};

}  // namespace strata::allocation
