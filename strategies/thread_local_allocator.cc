#include "strategies/thread_local_allocator.h"

#include <atomic>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "allocation/byte_format.h"
#include "allocation/object_pool.h"
#include "glog/logging.h"
#include "platform/spin_lock.h"
#include "platform/thread_local_slots.h"

namespace strata::strategies {

// One thread's pool. Aligned to a cache line so that pools' mutexes never share one.
class alignas(64) ThreadLocalPool {
 public:
  ThreadLocalPool(std::shared_ptr<allocation::Allocator> underlying,
                  BuddyAllocator::Options options)
      : buddy(std::move(underlying), std::move(options)) {}

  // The owner thread is exiting: nobody will allocate here again, so idle memory can go.
  void OnThreadExit() {
    std::lock_guard<platform::SpinLock> lock(mu);
    thread_exited = true;
    buddy.Release();
  }

  platform::SpinLock mu;  // uncontended but for remote frees; see spin_lock.h
  BuddyAllocator buddy ABSL_GUARDED_BY(mu);
  bool thread_exited ABSL_GUARDED_BY(mu) = false;
};

// The pools and what makes new ones. Shared by the allocator and every thread holding one of
// its pools (platform::ThreadLocalSlots), so that a thread exiting after the allocator's
// destruction still hands back a pool that exists.
struct ThreadLocalAllocator::Registry {
  Registry(std::shared_ptr<allocation::Allocator> u, const platform::Place& p,
           BuddyAllocator::Options o)
      : underlying(std::move(u)), place(p), options(std::move(o)) {}

  // A new pool for the calling thread, registered (the allocator is alive: only its own
  // allocation path asks).
  ThreadLocalPool* Acquire() { return NewPool(/*thread_exited=*/false); }
  // A registered new pool. `thread_exited`: for a thread already past its thread-local state
  // (allocating from a thread_local destructor), whose memory goes back with its last block.
  ThreadLocalPool* NewPool(bool thread_exited) {
    auto pool = std::make_shared<ThreadLocalPool>(underlying, options);
    if (thread_exited) {
      std::lock_guard<platform::SpinLock> pool_lock(pool->mu);
      pool->thread_exited = true;
    }
    absl::MutexLock lock(&mu);
    SweepRetiredLocked();
    pools.push_back(pool);
    VLOG(2) << "thread_local allocator for " << place << ": new pool, " << pools.size() << " pools";
    return pool.get();
  }
  // The pool's thread exits (or forgets a destroyed allocator's pool).
  void Return(ThreadLocalPool* pool) { pool->OnThreadExit(); }
  bool Dead() const { return dead.load(std::memory_order_acquire); }

  // Drops exited, empty pools, keeping their statistics.
  void SweepRetiredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < pools.size(); ++i) {
      ThreadLocalPool* pool = pools[i].get();
      bool retire;
      {
        std::lock_guard<platform::SpinLock> pool_lock(pool->mu);
        retire = pool->thread_exited && pool->buddy.allocated_bytes() == 0;
        if (retire) {
          pool->buddy.Release();
          pool->buddy.CollectStats(&retired_stats);
        }
      }
      if (retire) {
        pools[i].reset();
      } else {
        pools[kept++] = std::move(pools[i]);
      }
    }
    pools.resize(kept);
  }

  const std::shared_ptr<allocation::Allocator> underlying;
  const platform::Place place;
  const BuddyAllocator::Options options;
  std::atomic<bool> dead{false};  // the allocator is destroyed
  mutable absl::Mutex mu;
  std::vector<std::shared_ptr<ThreadLocalPool>> pools ABSL_GUARDED_BY(mu);
  allocation::MemoryStats retired_stats ABSL_GUARDED_BY(mu);
};

namespace {

std::atomic<std::uint64_t> next_allocator_id{1};

struct PoolsTag {};
// The calling thread's pool of each allocator.
using ThreadPools =
    platform::ThreadLocalSlots<PoolsTag, ThreadLocalAllocator::Registry, ThreadLocalPool>;

class ThreadLocalAllocation : public allocation::Allocation {
 public:
  void Init(const BuddyAllocator::Span& span, const platform::Place& place, ThreadLocalPool* pool) {
    Reset(span.ptr, span.base, span.size, place);
    pool_ = pool;
  }
  ThreadLocalPool* pool() const { return pool_; }

 private:
  ThreadLocalPool* pool_ = nullptr;
};

using AllocationPool = allocation::ObjectPool<ThreadLocalAllocation>;

// The figures BuddyAllocator::CollectStats fills.
void MergePoolStats(const allocation::MemoryStats& from, allocation::MemoryStats* to) {
  for (int i = 0; i < allocation::kNumStatPools; ++i) {
    to->segment[i].Merge(from.segment[i]);
    to->reserved_bytes[i].Merge(from.reserved_bytes[i]);
    to->inactive_split[i].Merge(from.inactive_split[i]);
    to->inactive_split_bytes[i].Merge(from.inactive_split_bytes[i]);
  }
  to->num_device_alloc += from.num_device_alloc;
  to->num_device_free += from.num_device_free;
}

template <typename F>
void ForEachPoolStat(allocation::MemoryStats* s, F f) {
  for (auto* array :
       {&s->segment, &s->reserved_bytes, &s->inactive_split, &s->inactive_split_bytes}) {
    for (auto& value : *array) f(value);
  }
}

}  // namespace

ThreadLocalAllocator::ThreadLocalAllocator(std::shared_ptr<allocation::Allocator> underlying,
                                           const platform::Place& place,
                                           BuddyAllocator::Options pool_options)
    : id_(next_allocator_id.fetch_add(1)),
      place_(place),
      registry_(std::make_shared<Registry>(
          std::move(underlying), place,
          (BuddyAllocator::ValidateOptions(pool_options), std::move(pool_options)))) {
  if (registry_->underlying == nullptr) {
    throw std::invalid_argument(absl::StrCat("strata: ", kName, " needs an underlying allocator"));
  }
  VLOG(4) << "thread_local allocator #" << id_ << " for " << place_;
}

ThreadLocalAllocator::~ThreadLocalAllocator() {
  absl::MutexLock lock(&registry_->mu);
  for (auto& pool : registry_->pools) {
    std::lock_guard<platform::SpinLock> pool_lock(pool->mu);
    if (pool->buddy.allocated_bytes() != 0) {
      LOG(WARNING) << "strata: thread_local allocator for " << place_
                   << " destroyed while a pool has "
                   << allocation::FormatBytes(pool->buddy.allocated_bytes()) << " allocated";
    }
    pool->buddy.Release();
  }
  // The pools stay with the registry until the threads that hold them forget them.
  registry_->dead.store(true, std::memory_order_release);
}

inline ThreadLocalPool* ThreadLocalAllocator::LocalPool() {
  ThreadLocalPool* pool = ThreadPools::Get(id_, registry_);
  if (pool == nullptr) [[unlikely]]  // the thread is exiting: its slots are gone
    return registry_->NewPool(/*thread_exited=*/true);
  return pool;
}

allocation::Allocation* ThreadLocalAllocator::AllocateImpl(std::size_t size) {
  ThreadLocalPool* pool = LocalPool();
  BuddyAllocator::Span span;
  {
    std::lock_guard<platform::SpinLock> lock(pool->mu);
    span = pool->buddy.AllocSpan(size);
  }
  ThreadLocalAllocation* allocation = AllocationPool::Acquire();
  allocation->Init(span, place_, pool);
  return allocation;
}

void ThreadLocalAllocator::FreeImpl(allocation::Allocation* allocation) {
  auto* a = static_cast<ThreadLocalAllocation*>(allocation);
  ThreadLocalPool* pool = a->pool();
  {
    std::lock_guard<platform::SpinLock> lock(pool->mu);
    pool->buddy.Free(a->ptr());
    // The owner is gone: return chunks as soon as they empty.
    if (pool->thread_exited) pool->buddy.Release();
  }
  AllocationPool::Release(a);
}

std::uint64_t ThreadLocalAllocator::ReleaseImpl(const platform::Place& place) {
  if (place != place_) return 0;
  std::uint64_t released = 0;
  absl::MutexLock lock(&registry_->mu);
  for (auto& pool : registry_->pools) {
    std::lock_guard<platform::SpinLock> pool_lock(pool->mu);
    released += pool->buddy.Release();
  }
  registry_->SweepRetiredLocked();
  VLOG(1) << "thread_local allocator for " << place_ << " released " << released << " B";
  return released;
}

std::size_t ThreadLocalAllocator::NumPools() const {
  absl::MutexLock lock(&registry_->mu);
  return registry_->pools.size();
}

std::size_t ThreadLocalAllocator::SumOverPools(std::size_t (BuddyAllocator::*figure)()
                                                   const) const {
  std::size_t sum = 0;
  absl::MutexLock lock(&registry_->mu);
  for (auto& pool : registry_->pools) {
    std::lock_guard<platform::SpinLock> pool_lock(pool->mu);
    sum += (pool->buddy.*figure)();
  }
  return sum;
}

std::size_t ThreadLocalAllocator::allocated_bytes() const {
  return SumOverPools(&BuddyAllocator::allocated_bytes);
}

std::size_t ThreadLocalAllocator::reserved_bytes() const {
  return SumOverPools(&BuddyAllocator::reserved_bytes);
}

void ThreadLocalAllocator::CollectStats(allocation::MemoryStats* stats) const {
  absl::MutexLock lock(&registry_->mu);
  for (auto& pool : registry_->pools) {
    std::lock_guard<platform::SpinLock> pool_lock(pool->mu);
    pool->buddy.CollectStats(stats);
  }
  MergePoolStats(registry_->retired_stats, stats);
}

void ThreadLocalAllocator::Snapshot(allocation::MemorySnapshot* snapshot) const {
  absl::MutexLock lock(&registry_->mu);
  for (auto& pool : registry_->pools) {
    std::lock_guard<platform::SpinLock> pool_lock(pool->mu);
    pool->buddy.Snapshot(snapshot);
  }
}

void ThreadLocalAllocator::ResetPeakStats() {
  absl::MutexLock lock(&registry_->mu);
  for (auto& pool : registry_->pools) {
    std::lock_guard<platform::SpinLock> pool_lock(pool->mu);
    pool->buddy.ResetPeakStats();
  }
  ForEachPoolStat(&registry_->retired_stats, [](allocation::StatValue& v) { v.ResetPeak(); });
}

void ThreadLocalAllocator::ResetAccumulatedStats() {
  absl::MutexLock lock(&registry_->mu);
  for (auto& pool : registry_->pools) {
    std::lock_guard<platform::SpinLock> pool_lock(pool->mu);
    pool->buddy.ResetAccumulatedStats();
  }
  ForEachPoolStat(&registry_->retired_stats,
                  [](allocation::StatValue& v) { v.ResetAccumulated(); });
  registry_->retired_stats.num_device_alloc = registry_->retired_stats.num_device_free = 0;
}

}  // namespace strata::strategies
