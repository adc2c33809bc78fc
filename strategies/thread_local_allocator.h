// ThreadLocalAllocator: Paddle's "thread_local" strategy — every thread that allocates gets its
// own BuddyAllocator pool for this place, created lazily, so threads never share a lock or a
// written cache line on the common path.
//
// Design
// - Finding the pool: platform::ThreadLocalSlots (one compare when the thread last used this
//   allocator; otherwise its short list); only a thread's first allocation takes the registry
//   lock (to register its new pool).
// - Each pool has its own platform::SpinLock. The owner thread takes it uncontended (its cache
//   line is only written by that thread, so threads scale). A block freed on another thread
//   goes back to its OWNER's pool under that pool's lock: we chose the lock over a lock-free
//   remote-free list because Release() and CollectStats() from any thread need exclusion with
//   the owner anyway, and cross-thread frees are the rare case, where a short wait is cheap.
// - Scaling needs the pool lock to be cheap when uncontended, hence a SpinLock rather than
//   absl::Mutex (Debian's Abseil runs deadlock detection under one process-wide lock on every
//   Mutex::Lock; see spin_lock.h). The registry, touched once per thread, uses absl::Mutex.
// - Ownership: the registry (shared by this allocator and the threads that hold one of its
//   pools) owns the pools. When a thread exits it marks its pool exited and releases its idle
//   chunks; a pool of an exited thread lives on while it has live blocks (their last free
//   releases its memory), and the registry drops it once it is empty (on the next Release or new
//   pool). A thread forgets the pools of destroyed allocators on its next new pool or at exit;
//   the registry goes with the last of them.
// - Each pool is sized by the same BuddyAllocator::Options, applied per pool: with fraction
//   sizing, each pool's refill takes `fraction` of what is available then, so the facade should
//   pass a small fraction or explicit initial_bytes / reallocate_bytes.
//
// Contract
// - Thread safety: Allocate/Free/Release/stats from any thread, concurrently. Allocations must
//   be freed before the allocator is destroyed (as for every layer); the destructor returns all
//   pools' memory.
// - Streams: none; a freed block is reusable immediately by its owner thread.
// - Throws: allocation::BadAlloc when the underlying allocator is exhausted;
//   std::invalid_argument for bad options (checked at construction) or overflowing sizes.
// - Release(place) (for this place) releases the idle chunks of all pools. CollectStats sums
//   the pools' figures (peaks add, as an upper bound) plus those of retired pools.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "allocation/allocator.h"
#include "allocation/memory_stats.h"
#include "platform/place.h"
#include "strategies/buddy_allocator.h"

namespace strata::strategies {

class ThreadLocalPool;  // defined in thread_local_allocator.cc

class ThreadLocalAllocator : public allocation::Allocator {
 public:
  static constexpr char kName[] = "thread_local";

  ThreadLocalAllocator(std::shared_ptr<allocation::Allocator> underlying,
                       const platform::Place& place, BuddyAllocator::Options pool_options);
  ~ThreadLocalAllocator() override;

  const char* Name() const override { return kName; }
  const platform::Place& place() const { return place_; }

  // Pools in the registry: live threads' plus exited threads' that still hold blocks.
  std::size_t NumPools() const;
  // Bytes of live blocks / bytes held from the underlying allocator, summed over the pools.
  std::size_t allocated_bytes() const;
  std::size_t reserved_bytes() const;

  void CollectStats(allocation::MemoryStats* stats) const override;
  // Every pool's segments and blocks.
  void Snapshot(allocation::MemorySnapshot* snapshot) const override;
  void ResetPeakStats() override;
  void ResetAccumulatedStats() override;

  // The pools (thread_local_allocator.cc), shared with the threads that hold one.
  struct Registry;

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override;
  void FreeImpl(allocation::Allocation* allocation) override;
  std::uint64_t ReleaseImpl(const platform::Place& place) override;

 private:
  ThreadLocalPool* LocalPool();
  // `figure` of every pool (each read under its lock), summed.
  std::size_t SumOverPools(std::size_t (BuddyAllocator::*figure)() const) const;

  const std::uint64_t id_;  // unique per instance, never reused (keys the per-thread slots)
  const platform::Place place_;
  const std::shared_ptr<Registry> registry_;
};

}  // namespace strata::strategies
