#include "allocation/stat_allocator.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "allocation/bad_alloc.h"
#include "glog/logging.h"

namespace strata::allocation {
namespace {

// The three figures this layer keeps; active / active_bytes are copies of the first two.
enum Kind : int { kCount = 0, kBytes = 1, kRequested = 2 };
constexpr int kNumKinds = 3;
// Shards keep small (0) and large (1); the aggregate is their sum, except for peaks.
constexpr int kNumPools = 2;
constexpr std::int64_t kNoPeak = std::numeric_limits<std::int64_t>::min();

constexpr std::int64_t Slack(int kind) {
  return kind == kCount ? StatAllocator::kCountSlack : StatAllocator::kBytesSlack;
}

// Owner-only read-modify-write: a relaxed load and store, no locked instruction.
inline void Bump(std::atomic<std::int64_t>& a, std::int64_t v) {
  a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
}
inline void RaiseTo(std::atomic<std::int64_t>& a, std::int64_t v) {
  if (v > a.load(std::memory_order_relaxed)) a.store(v, std::memory_order_relaxed);
}

std::atomic<std::uint64_t> g_next_id{1};

// A ResetPeakStats happened: start this shard's peaks afresh for the new epoch.
template <typename ShardT>
[[gnu::noinline, gnu::cold]] void StartPeakEpoch(ShardT* s, std::uint64_t epoch) {
  for (auto& row : s->peak) {
    for (auto& v : row) v.store(kNoPeak, std::memory_order_relaxed);
  }
  s->peak_epoch.store(epoch, std::memory_order_release);
}

}  // namespace

struct alignas(64) StatAllocator::Shard {
  // Written only by the owning thread; read by collectors (hence atomics, all relaxed).
  // Monotonic since construction: resets of accumulated figures subtract a baseline.
  std::atomic<std::int64_t> allocated[kNumKinds][kNumPools] = {};
  std::atomic<std::int64_t> freed[kNumKinds][kNumPools] = {};
  // Highest estimate of current seen by the owner during epoch `peak_epoch`; [kind][StatPool].
  std::atomic<std::int64_t> peak[kNumKinds][kNumStatPools] = {};
  std::atomic<std::uint64_t> peak_epoch{~std::uint64_t{0}};
  // Net change not yet added to Registry::published (owner only; flushed under the registry
  // lock when the shard changes hands).
  std::int64_t drift[kNumKinds][kNumPools] = {};
};

struct StatAllocator::Registry {
  // Read-mostly line: threads read it on every Allocate, write it only when publishing.
  struct alignas(64) Published {
    std::atomic<std::int64_t> current[kNumKinds][kNumPools] = {};
    std::atomic<std::uint64_t> peak_epoch{0};
  } published;

  alignas(64) mutable absl::Mutex mu;
  std::vector<std::unique_ptr<Shard>> shards ABSL_GUARDED_BY(mu);
  std::vector<Shard*> free_shards ABSL_GUARDED_BY(mu);
  // Sums of the shards' monotonic counters at the last ResetAccumulatedStats.
  std::int64_t base_allocated[kNumKinds][kNumPools] ABSL_GUARDED_BY(mu) = {};
  std::int64_t base_freed[kNumKinds][kNumPools] ABSL_GUARDED_BY(mu) = {};
  // Current at the last ResetPeakStats.
  std::int64_t reset_peak[kNumKinds][kNumStatPools] ABSL_GUARDED_BY(mu) = {};
  std::atomic<std::int64_t> num_ooms{0};
  // Set when the StatAllocator dies; threads then drop their reference lazily.
  std::atomic<bool> dead{false};

  Shard* Acquire() {
    absl::MutexLock lock(&mu);
    if (!free_shards.empty()) {
      Shard* s = free_shards.back();
      free_shards.pop_back();
      return s;
    }
    shards.push_back(std::make_unique<Shard>());
    VLOG(6) << "stat: new counter shard, " << shards.size() << " in all";
    return shards.back().get();
  }

  // The shard keeps its counts; only its drift moves to the published counters.
  void Return(Shard* s) {
    absl::MutexLock lock(&mu);
    for (int k = 0; k < kNumKinds; ++k) {
      for (int p = 0; p < kNumPools; ++p) {
        if (s->drift[k][p] != 0) {
          published.current[k][p].fetch_add(s->drift[k][p], std::memory_order_relaxed);
          s->drift[k][p] = 0;
        }
      }
    }
    free_shards.push_back(s);
  }

  struct Totals {
    std::int64_t allocated[kNumKinds][kNumPools] = {};
    std::int64_t freed[kNumKinds][kNumPools] = {};
    std::int64_t peak[kNumKinds][kNumStatPools];
  };
  Totals Sum() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Totals t;
    const std::uint64_t epoch = published.peak_epoch.load(std::memory_order_relaxed);
    for (int k = 0; k < kNumKinds; ++k) {
      for (int p = 0; p < kNumStatPools; ++p) t.peak[k][p] = reset_peak[k][p];
    }
    for (const auto& s : shards) {
      const bool peak_valid = s->peak_epoch.load(std::memory_order_acquire) == epoch;
      for (int k = 0; k < kNumKinds; ++k) {
        for (int p = 0; p < kNumPools; ++p) {
          t.allocated[k][p] += s->allocated[k][p].load(std::memory_order_relaxed);
          t.freed[k][p] += s->freed[k][p].load(std::memory_order_relaxed);
        }
        if (!peak_valid) continue;
        for (int p = 0; p < kNumStatPools; ++p) {
          t.peak[k][p] = std::max(t.peak[k][p], s->peak[k][p].load(std::memory_order_relaxed));
        }
      }
    }
    return t;
  }

  static std::int64_t Current(const Totals& t, int k, int p) {
    if (p == kAggregate) return Current(t, k, kSmallPool) + Current(t, k, kLargePool);
    return t.allocated[k][p - 1] - t.freed[k][p - 1];
  }

  StatValue Value(const Totals& t, int k, int p) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    StatValue v;
    if (p == kAggregate) {
      for (int q = 0; q < kNumPools; ++q) {
        v.allocated += t.allocated[k][q] - base_allocated[k][q];
        v.freed += t.freed[k][q] - base_freed[k][q];
      }
    } else {
      v.allocated = t.allocated[k][p - 1] - base_allocated[k][p - 1];
      v.freed = t.freed[k][p - 1] - base_freed[k][p - 1];
    }
    v.current = Current(t, k, p);
    v.peak = std::max(t.peak[k][p], v.current);
    return v;
  }

  StatValue Get(int k, int p) const {
    absl::MutexLock lock(&mu);
    return Value(Sum(), k, p);
  }
};

namespace {

// Per-thread state. The fast cache is trivially destructible, so reading it costs no TLS
// initialisation check; the owning list below has a destructor that hands shards back.
constexpr int kFastEntries = 4;
struct FastCache {
  std::uint64_t id[kFastEntries];
  StatAllocator::Shard* shard[kFastEntries];
  int next;
};
thread_local FastCache t_fast{};
thread_local bool t_exited = false;

struct ThreadShards {
  struct Entry {
    std::uint64_t id;
    std::shared_ptr<StatAllocator::Registry> registry;
    StatAllocator::Shard* shard;
  };
  std::vector<Entry> entries;

  ~ThreadShards() {
    t_fast = FastCache{};
    t_exited = true;
    for (Entry& e : entries) {
      if (!e.registry->dead.load(std::memory_order_acquire)) e.registry->Return(e.shard);
    }
  }
};

ThreadShards& LocalThreadShards() {
  thread_local ThreadShards shards;
  return shards;
}

}  // namespace

StatAllocator::StatAllocator(std::shared_ptr<Allocator> underlying)
    : underlying_(std::move(underlying)),
      registry_(std::make_shared<Registry>()),
      id_(g_next_id.fetch_add(1, std::memory_order_relaxed)) {
  VLOG(4) << "stat: over " << underlying_->Name();
}

StatAllocator::~StatAllocator() { registry_->dead.store(true, std::memory_order_release); }

inline StatAllocator::Shard* StatAllocator::LocalShard() {
  for (int i = 0; i < kFastEntries; ++i) {
    if (t_fast.id[i] == id_) return t_fast.shard[i];
  }
  return LocalShardSlow();
}

StatAllocator::Shard* StatAllocator::LocalShardSlow() {
  if (t_exited) return nullptr;  // called from a thread_local destructor at thread exit
  ThreadShards& ts = LocalThreadShards();
  Shard* shard = nullptr;
  for (const auto& e : ts.entries) {
    if (e.id == id_) shard = e.shard;
  }
  if (shard == nullptr) {
    // Drop the entries of dead allocators so long-lived threads do not accumulate them.
    std::erase_if(ts.entries,
                  [](const auto& e) { return e.registry->dead.load(std::memory_order_acquire); });
    shard = registry_->Acquire();
    ts.entries.push_back({id_, registry_, shard});
  }
  const int slot = t_fast.next;
  t_fast.next = (slot + 1) % kFastEntries;
  t_fast.id[slot] = id_;
  t_fast.shard[slot] = shard;
  return shard;
}

// The hot path: a handful of relaxed loads/stores on the thread's own shard, plus relaxed
// loads of the read-mostly published line on Allocate.
inline void StatAllocator::Record(Shard* s, bool is_alloc, std::size_t bytes,
                                  std::size_t requested) {
  const int p = PoolOf(bytes) == kSmallPool ? 0 : 1;
  const std::int64_t values[kNumKinds] = {1, static_cast<std::int64_t>(bytes),
                                          static_cast<std::int64_t>(requested)};
  Registry::Published& pub = registry_->published;
  if (!is_alloc) {
#pragma GCC unroll 3
    for (int k = 0; k < kNumKinds; ++k) {
      Bump(s->freed[k][p], values[k]);
      std::int64_t& d = s->drift[k][p];
      d -= values[k];
      if (d < -Slack(k)) [[unlikely]] {
        pub.current[k][p].fetch_add(d, std::memory_order_relaxed);
        d = 0;
      }
    }
    return;
  }
  const std::uint64_t epoch = pub.peak_epoch.load(std::memory_order_relaxed);
  if (s->peak_epoch.load(std::memory_order_relaxed) != epoch) [[unlikely]] {
    StartPeakEpoch(s, epoch);
  }
#pragma GCC unroll 3
  for (int k = 0; k < kNumKinds; ++k) {
    Bump(s->allocated[k][p], values[k]);
    std::int64_t& d = s->drift[k][p];
    d += values[k];
    if (d > Slack(k)) [[unlikely]] {
      pub.current[k][p].fetch_add(d, std::memory_order_relaxed);
      d = 0;
    }
    const std::int64_t own = pub.current[k][p].load(std::memory_order_relaxed) + d;
    const std::int64_t other =
        pub.current[k][1 - p].load(std::memory_order_relaxed) + s->drift[k][1 - p];
    RaiseTo(s->peak[k][p + 1], own);
    RaiseTo(s->peak[k][kAggregate], own + other);
  }
}

// At thread exit (a thread_local destructor freeing memory): borrow a shard for one call.
void StatAllocator::RecordOutsideThreadLocal(bool is_alloc, std::size_t bytes,
                                             std::size_t requested) {
  Shard* s = registry_->Acquire();
  Record(s, is_alloc, bytes, requested);
  registry_->Return(s);
}

Allocation* StatAllocator::AllocateImpl(std::size_t size) {
  Allocation* allocation;
  try {
    allocation = underlying_->Allocate(size).release();
  } catch (const BadAlloc& e) {
    registry_->num_ooms.fetch_add(1, std::memory_order_relaxed);
    VLOG(8) << "stat: out of memory: " << e.what();
    throw;
  }
  allocation->set_requested_size(size);
  Shard* s = LocalShard();
  if (s != nullptr) [[likely]] {
    Record(s, true, allocation->size(), size);
  } else {
    RecordOutsideThreadLocal(true, allocation->size(), size);
  }
  return allocation;
}

void StatAllocator::FreeImpl(Allocation* allocation) {
  Shard* s = LocalShard();
  if (s != nullptr) [[likely]] {
    Record(s, false, allocation->size(), allocation->requested_size());
  } else {
    RecordOutsideThreadLocal(false, allocation->size(), allocation->requested_size());
  }
  underlying_->Free(allocation);
}

void StatAllocator::CollectStats(MemoryStats* stats) const {
  underlying_->CollectStats(stats);
  absl::MutexLock lock(&registry_->mu);
  const Registry::Totals t = registry_->Sum();
  for (int p = 0; p < kNumStatPools; ++p) {
    const StatValue count = registry_->Value(t, kCount, p);
    const StatValue bytes = registry_->Value(t, kBytes, p);
    stats->allocation[p].Merge(count);
    stats->active[p].Merge(count);
    stats->allocated_bytes[p].Merge(bytes);
    stats->active_bytes[p].Merge(bytes);
    stats->requested_bytes[p].Merge(registry_->Value(t, kRequested, p));
  }
  stats->num_ooms += registry_->num_ooms.load(std::memory_order_relaxed);
}

void StatAllocator::ResetPeakStats() {
  {
    absl::MutexLock lock(&registry_->mu);
    const Registry::Totals t = registry_->Sum();
    for (int k = 0; k < kNumKinds; ++k) {
      for (int p = 0; p < kNumStatPools; ++p) {
        registry_->reset_peak[k][p] = Registry::Current(t, k, p);
      }
    }
    registry_->published.peak_epoch.fetch_add(1, std::memory_order_release);
  }
  underlying_->ResetPeakStats();
}

void StatAllocator::ResetAccumulatedStats() {
  {
    absl::MutexLock lock(&registry_->mu);
    const Registry::Totals t = registry_->Sum();
    for (int k = 0; k < kNumKinds; ++k) {
      for (int p = 0; p < kNumPools; ++p) {
        registry_->base_allocated[k][p] = t.allocated[k][p];
        registry_->base_freed[k][p] = t.freed[k][p];
      }
    }
    registry_->num_ooms.store(0, std::memory_order_relaxed);
  }
  underlying_->ResetAccumulatedStats();
}

StatValue StatAllocator::allocation(StatPool pool) const { return registry_->Get(kCount, pool); }
StatValue StatAllocator::allocated_bytes(StatPool pool) const {
  return registry_->Get(kBytes, pool);
}
StatValue StatAllocator::requested_bytes(StatPool pool) const {
  return registry_->Get(kRequested, pool);
}
std::int64_t StatAllocator::num_ooms() const {
  return registry_->num_ooms.load(std::memory_order_relaxed);
}

}  // namespace strata::allocation
