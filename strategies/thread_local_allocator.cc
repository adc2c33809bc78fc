#include "strategies/thread_local_allocator.h"

#include <mutex>

#include "platform/spin_lock.h"

#include <atomic>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "allocation/object_pool.h"
#include "glog/logging.h"
#include "reporting/byte_format.h"

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
  bool allocator_destroyed ABSL_GUARDED_BY(mu) = false;
};

namespace {

std::atomic<std::uint64_t> next_allocator_id{1};

// The calling thread's pools, by allocator id. The one-entry cache serves the common case.
struct LocalPools {
  std::uint64_t cached_id = 0;
  ThreadLocalPool* cached = nullptr;
  absl::flat_hash_map<std::uint64_t, std::shared_ptr<ThreadLocalPool>> pools;
  bool destroyed = false;

  ~LocalPools() {
    for (auto& [id, pool] : pools) pool->OnThreadExit();
    pools.clear();
    cached_id = 0;
    cached = nullptr;
    destroyed = true;
  }
};

thread_local LocalPools local_pools;

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
      underlying_(std::move(underlying)),
      place_(place),
      options_((BuddyAllocator::ValidateOptions(pool_options), std::move(pool_options))) {
  if (underlying_ == nullptr) {
    throw std::invalid_argument("strata: ThreadLocalAllocator needs an underlying allocator");
  }
  VLOG(4) << "thread_local allocator #" << id_ << " for " << place_;
}

ThreadLocalAllocator::~ThreadLocalAllocator() {
  absl::MutexLock lock(&registry_mu_);
  for (auto& pool : pools_) {
    std::lock_guard<platform::SpinLock> pool_lock(pool->mu);
    pool->allocator_destroyed = true;
    if (pool->buddy.Used() != 0) {
      LOG(WARNING) << "strata: thread_local allocator for " << place_
                   << " destroyed while a pool has " << allocation::FormatBytes(pool->buddy.Used())
                   << " allocated";
    }
    pool->buddy.Release();
  }
  pools_.clear();
}

ThreadLocalPool* ThreadLocalAllocator::LocalPool() {
  LocalPools& local = local_pools;
  if (local.cached_id == id_) return local.cached;
  return LocalPoolSlow();
}

ThreadLocalPool* ThreadLocalAllocator::LocalPoolSlow() {
  LocalPools& local = local_pools;
  if (local.destroyed) {
    // Allocating from a thread_local destructor: the pool cannot be kept in thread-local
    // storage any more, so it is born exited (its memory goes back with its last block).
    auto pool = std::make_shared<ThreadLocalPool>(underlying_, options_);
    {
      std::lock_guard<platform::SpinLock> pool_lock(pool->mu);
      pool->thread_exited = true;
    }
    absl::MutexLock lock(&registry_mu_);
    pools_.push_back(pool);
    return pool.get();
  }
  auto it = local.pools.find(id_);
  if (it == local.pools.end()) {
    // Drop this thread's pools of destroyed allocators (they hold no memory any more).
    for (auto jt = local.pools.begin(); jt != local.pools.end();) {
      bool gone;
      {
        std::lock_guard<platform::SpinLock> pool_lock(jt->second->mu);
        gone = jt->second->allocator_destroyed;
      }
      if (gone) {
        local.pools.erase(jt++);
      } else {
        ++jt;
      }
    }
    auto pool = std::make_shared<ThreadLocalPool>(underlying_, options_);
    {
      absl::MutexLock lock(&registry_mu_);
      SweepRetiredPoolsLocked();
      pools_.push_back(pool);
      VLOG(2) << "thread_local allocator for " << place_ << ": new pool, " << pools_.size()
              << " pools";
    }
    it = local.pools.emplace(id_, std::move(pool)).first;
  }
  local.cached_id = id_;
  local.cached = it->second.get();
  return local.cached;
}

void ThreadLocalAllocator::SweepRetiredPoolsLocked() {
  std::size_t kept = 0;
  for (std::size_t i = 0; i < pools_.size(); ++i) {
    ThreadLocalPool* pool = pools_[i].get();
    bool retire;
    {
      std::lock_guard<platform::SpinLock> pool_lock(pool->mu);
      retire = pool->thread_exited && pool->buddy.Used() == 0;
      if (retire) {
        pool->buddy.Release();
        pool->buddy.CollectStats(&retired_stats_);
      }
    }
    if (retire) {
      pools_[i].reset();
    } else {
      pools_[kept++] = std::move(pools_[i]);
    }
  }
  pools_.resize(kept);
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
  absl::MutexLock lock(&registry_mu_);
  for (auto& pool : pools_) {
    std::lock_guard<platform::SpinLock> pool_lock(pool->mu);
    released += pool->buddy.Release();
  }
  SweepRetiredPoolsLocked();
  VLOG(1) << "thread_local allocator for " << place_ << " released " << released << " B";
  return released;
}

std::size_t ThreadLocalAllocator::NumPools() const {
  absl::MutexLock lock(&registry_mu_);
  return pools_.size();
}

std::size_t ThreadLocalAllocator::Used() const {
  std::size_t used = 0;
  absl::MutexLock lock(&registry_mu_);
  for (auto& pool : pools_) {
    std::lock_guard<platform::SpinLock> pool_lock(pool->mu);
    used += pool->buddy.Used();
  }
  return used;
}

std::size_t ThreadLocalAllocator::reserved_bytes() const {
  std::size_t reserved = 0;
  absl::MutexLock lock(&registry_mu_);
  for (auto& pool : pools_) {
    std::lock_guard<platform::SpinLock> pool_lock(pool->mu);
    reserved += pool->buddy.reserved_bytes();
  }
  return reserved;
}

void ThreadLocalAllocator::CollectStats(allocation::MemoryStats* stats) const {
  absl::MutexLock lock(&registry_mu_);
  for (auto& pool : pools_) {
    std::lock_guard<platform::SpinLock> pool_lock(pool->mu);
    pool->buddy.CollectStats(stats);
  }
  MergePoolStats(retired_stats_, stats);
}

void ThreadLocalAllocator::Snapshot(allocation::MemorySnapshot* snapshot) const {
  absl::MutexLock lock(&registry_mu_);
  for (auto& pool : pools_) {
    std::lock_guard<platform::SpinLock> pool_lock(pool->mu);
    pool->buddy.Snapshot(snapshot);
  }
}

void ThreadLocalAllocator::ResetPeakStats() {
  absl::MutexLock lock(&registry_mu_);
  for (auto& pool : pools_) {
    std::lock_guard<platform::SpinLock> pool_lock(pool->mu);
    pool->buddy.ResetPeakStats();
  }
  ForEachPoolStat(&retired_stats_, [](allocation::StatValue& v) { v.ResetPeak(); });
}

void ThreadLocalAllocator::ResetAccumulatedStats() {
  absl::MutexLock lock(&registry_mu_);
  for (auto& pool : pools_) {
    std::lock_guard<platform::SpinLock> pool_lock(pool->mu);
    pool->buddy.ResetAccumulatedStats();
  }
  ForEachPoolStat(&retired_stats_, [](allocation::StatValue& v) { v.ResetAccumulated(); });
  retired_stats_.num_device_alloc = retired_stats_.num_device_free = 0;
}

}  // namespace strata::strategies
