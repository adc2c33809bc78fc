#include "layers/stat_allocator.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <limits>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "allocation/bad_alloc.h"
#include "glog/logging.h"
#include "platform/thread_local_slots.h"

namespace strata::layers {

using allocation::Allocation;
using allocation::BadAlloc;
using allocation::kAggregate;
using allocation::kLargePool;
using allocation::kNumStatPools;
using allocation::kSmallPool;
using allocation::PoolOf;
using allocation::StatPool;
using allocation::StatValue;

namespace {

// The three figures this layer keeps; active / active_bytes are copies of the first two.
enum Kind : int { kCount = 0, kBytes = 1, kRequested = 2 };
constexpr int kNumKinds = 3;
// Shards keep small (0) and large (1); the aggregate is their sum, except for peaks.
constexpr int kNumPools = 2;
// Sums over the shards, [kind][pool].
using ShardCounts = std::array<std::array<std::int64_t, kNumPools>, kNumKinds>;
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
  for (auto& pool : s->pool) {
    for (auto& v : pool.peak) v.store(kNoPeak, std::memory_order_relaxed);
  }
  for (auto& v : s->aggregate_peak) v.store(kNoPeak, std::memory_order_relaxed);
  s->peak_epoch.store(epoch, std::memory_order_release);
}

}  // namespace

struct alignas(64) StatAllocator::Shard {
  // One pool's figures, [kind] each. Written only by the owning thread (or under the registry
  // lock once the thread is gone); read by collectors, hence atomics, all relaxed.
  // The shard's net change is flushed + drift; its monotonic `allocated` is freed + flushed +
  // drift, so an Allocate updates only the drift and a Free only freed and the drift.
  struct Pool {
    // Monotonic since construction: resets of accumulated figures subtract a baseline.
    std::atomic<std::int64_t> freed[kNumKinds] = {};
    // Net change not yet added to Registry::published.
    std::atomic<std::int64_t> drift[kNumKinds] = {};
    // Net change already added to Registry::published.
    std::atomic<std::int64_t> flushed[kNumKinds] = {};
    // Highest estimate of this pool's current seen by the owner during epoch `peak_epoch`.
    std::atomic<std::int64_t> peak[kNumKinds] = {};

    std::int64_t allocated(int k) const {
      return freed[k].load(std::memory_order_relaxed) + flushed[k].load(std::memory_order_relaxed) +
             drift[k].load(std::memory_order_relaxed);
    }
  };
  Pool pool[kNumPools];
  // The registry's primary shard publishes into Published::primary with plain stores (see
  // Registry::Published). Set when the shard is created; the shard keeps it when recycled.
  bool primary = false;
  // Highest estimate of the aggregate current during epoch `peak_epoch`.
  std::atomic<std::int64_t> aggregate_peak[kNumKinds] = {};
  std::atomic<std::uint64_t> peak_epoch{~std::uint64_t{0}};
};

namespace {

// Moves the drift `d` of pool p, kind k of `s` to the published counters (owner only).
template <typename PublishedT>
[[gnu::always_inline]] inline void Publish(StatAllocator::Shard* s, PublishedT& pub, int p, int k,
                                           std::int64_t d) {
  if (s->primary) {
    Bump(pub.primary[p][k], d);
  } else {
    pub.current[p][k].fetch_add(d, std::memory_order_relaxed);
  }
  s->pool[p].drift[k].store(0, std::memory_order_relaxed);
  Bump(s->pool[p].flushed[k], d);
}

}  // namespace

struct StatAllocator::Registry {
  // Keys the threads' shard caches: every StatAllocator over this registry uses the same shard
  // on a thread, so the figures (peaks included) are those of the set, not of each layer.
  const std::uint64_t id = g_next_id.fetch_add(1, std::memory_order_relaxed);
  // Read-mostly line: threads read it on every Allocate, write it only when publishing. What
  // the shards published is current + primary. The primary shard (the first one made, handed to
  // one thread at a time) adds into `primary` with a plain load and store, the others into
  // `current` with an atomic add: a block above the slack publishes at its allocation and at its
  // free, and the thread that allocates alone (the usual case) then pays no locked instruction.
  struct alignas(64) Published {
    std::atomic<std::int64_t> current[kNumPools][kNumKinds] = {};
    std::atomic<std::int64_t> primary[kNumPools][kNumKinds] = {};
    std::atomic<std::uint64_t> peak_epoch{0};
    std::int64_t Total(int p, int k) const {
      return current[p][k].load(std::memory_order_relaxed) +
             primary[p][k].load(std::memory_order_relaxed);
    }
  } published;

  alignas(64) mutable absl::Mutex mu;
  std::vector<std::unique_ptr<Shard>> shards ABSL_GUARDED_BY(mu);
  std::vector<Shard*> free_shards ABSL_GUARDED_BY(mu);
  // Sums of the shards' monotonic counters at the last ResetAccumulatedStats.
  ShardCounts base_allocated ABSL_GUARDED_BY(mu) = {};
  ShardCounts base_freed ABSL_GUARDED_BY(mu) = {};
  // Current at the last ResetPeakStats.
  std::int64_t reset_peak[kNumKinds][kNumStatPools] ABSL_GUARDED_BY(mu) = {};
  std::atomic<std::int64_t> num_ooms{0};
  // StatAllocators over this registry; the first reports it. `dead` is set when the last one
  // dies; threads then drop their reference lazily.
  std::atomic<int> owners{0};
  std::atomic<bool> dead{false};
  bool Dead() const { return dead.load(std::memory_order_acquire); }

  Shard* Acquire() {
    absl::MutexLock lock(&mu);
    if (!free_shards.empty()) {
      // The primary first: the thread that allocates alone after others exited gets it.
      auto it = std::find_if(free_shards.begin(), free_shards.end(),
                             [](const Shard* s) { return s->primary; });
      if (it == free_shards.end()) it = free_shards.end() - 1;
      Shard* s = *it;
      free_shards.erase(it);
      return s;
    }
    shards.push_back(std::make_unique<Shard>());
    shards.back()->primary = shards.size() == 1;
    VLOG(6) << "stat: new counter shard, " << shards.size() << " in all";
    return shards.back().get();
  }

  // The shard keeps its counts; only its drift moves to the published counters.
  void Return(Shard* s) {
    absl::MutexLock lock(&mu);
    for (int p = 0; p < kNumPools; ++p) {
      for (int k = 0; k < kNumKinds; ++k) {
        const std::int64_t d = s->pool[p].drift[k].load(std::memory_order_relaxed);
        if (d != 0) Publish(s, published, p, k, d);
      }
    }
    free_shards.push_back(s);
  }

  struct Totals {
    ShardCounts allocated = {};
    ShardCounts freed = {};
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
          t.allocated[k][p] += s->pool[p].allocated(k);
          t.freed[k][p] += s->pool[p].freed[k].load(std::memory_order_relaxed);
        }
        if (!peak_valid) continue;
        t.peak[k][kAggregate] =
            std::max(t.peak[k][kAggregate], s->aggregate_peak[k].load(std::memory_order_relaxed));
        for (int p = 0; p < kNumPools; ++p) {
          t.peak[k][p + 1] =
              std::max(t.peak[k][p + 1], s->pool[p].peak[k].load(std::memory_order_relaxed));
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
struct StatShardsTag {};
// The thread's shard of each registry (one compare on the hot path).
using ThreadShards =
    platform::ThreadLocalSlots<StatShardsTag, StatAllocator::Registry, StatAllocator::Shard>;
}  // namespace

std::shared_ptr<StatAllocator::Registry> StatAllocator::NewCounters() {
  return std::make_shared<Registry>();
}

StatAllocator::StatAllocator(std::shared_ptr<allocation::Allocator> underlying,
                             std::shared_ptr<Registry> counters)
    : allocation::DecoratingAllocator(std::move(underlying), kName),
      registry_(counters != nullptr ? std::move(counters) : NewCounters()),
      id_(registry_->id),
      reports_(registry_->owners.fetch_add(1, std::memory_order_acq_rel) == 0) {
  VLOG(4) << "stat: over " << this->underlying().Name()
          << (reports_ ? "" : " (shared counters, reported by another layer)");
}

StatAllocator::~StatAllocator() {
  if (registry_->owners.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    registry_->dead.store(true, std::memory_order_release);
  }
}

namespace {

// The hot paths: a handful of relaxed loads/stores on the thread's own shard, plus relaxed loads
// of the read-mostly published line on Allocate. Instantiated per pool (P: 0 small, 1 large) so
// that every counter is at a constant offset from the shard or the published line.
template <int P>
[[gnu::always_inline]] inline void RecordAllocIn(StatAllocator::Shard* s,
                                                 StatAllocator::Registry::Published& pub,
                                                 const std::int64_t (&values)[kNumKinds]) {
  constexpr int Q = 1 - P;
  StatAllocator::Shard::Pool& mine = s->pool[P];
  const StatAllocator::Shard::Pool& other = s->pool[Q];
#pragma GCC unroll 3
  for (int k = 0; k < kNumKinds; ++k) {
    std::int64_t d = mine.drift[k].load(std::memory_order_relaxed) + values[k];
    if (d > Slack(k)) [[unlikely]] {
      Publish(s, pub, P, k, d);
      d = 0;
    } else {
      mine.drift[k].store(d, std::memory_order_relaxed);
    }
    // Estimates of the current: published + own drift (see the header).
    const std::int64_t own = pub.Total(P, k) + d;
    RaiseTo(mine.peak[k], own);
    RaiseTo(s->aggregate_peak[k],
            own + pub.Total(Q, k) + other.drift[k].load(std::memory_order_relaxed));
  }
}

template <int P>
[[gnu::always_inline]] inline void RecordFreeIn(StatAllocator::Shard* s,
                                                StatAllocator::Registry::Published& pub,
                                                const std::int64_t (&values)[kNumKinds]) {
  StatAllocator::Shard::Pool& mine = s->pool[P];
#pragma GCC unroll 3
  for (int k = 0; k < kNumKinds; ++k) {
    Bump(mine.freed[k], values[k]);
    const std::int64_t d = mine.drift[k].load(std::memory_order_relaxed) - values[k];
    if (d < -Slack(k)) [[unlikely]] {
      Publish(s, pub, P, k, d);
    } else {
      mine.drift[k].store(d, std::memory_order_relaxed);
    }
  }
}

}  // namespace

inline void StatAllocator::RecordAlloc(Shard* s, std::size_t bytes, std::size_t requested) {
  const std::int64_t values[kNumKinds] = {1, static_cast<std::int64_t>(bytes),
                                          static_cast<std::int64_t>(requested)};
  Registry::Published& pub = registry_->published;
  const std::uint64_t epoch = pub.peak_epoch.load(std::memory_order_relaxed);
  if (s->peak_epoch.load(std::memory_order_relaxed) != epoch) [[unlikely]] {
    StartPeakEpoch(s, epoch);
  }
  if (PoolOf(bytes) == kSmallPool) {
    RecordAllocIn<0>(s, pub, values);
  } else {
    RecordAllocIn<1>(s, pub, values);
  }
}

inline void StatAllocator::RecordFree(Shard* s, std::size_t bytes, std::size_t requested) {
  const std::int64_t values[kNumKinds] = {1, static_cast<std::int64_t>(bytes),
                                          static_cast<std::int64_t>(requested)};
  if (PoolOf(bytes) == kSmallPool) {
    RecordFreeIn<0>(s, registry_->published, values);
  } else {
    RecordFreeIn<1>(s, registry_->published, values);
  }
}

// Not the last allocator this thread used, a new thread, or thread exit.
void StatAllocator::RecordSlow(bool is_alloc, const Allocation& allocation) {
  const std::size_t bytes = allocation.size();
  const std::size_t requested = allocation.requested_size();
  Shard* s = ThreadShards::GetSlow(id_, registry_);
  const bool borrowed = s == nullptr;
  // At thread exit (a thread_local destructor freeing memory): borrow a shard for one call.
  if (borrowed) s = registry_->Acquire();
  if (is_alloc) {
    RecordAlloc(s, bytes, requested);
  } else {
    RecordFree(s, bytes, requested);
  }
  if (borrowed) registry_->Return(s);
}

void StatAllocator::CountOom(const BadAlloc& e) {
  registry_->num_ooms.fetch_add(1, std::memory_order_relaxed);
  VLOG(8) << "stat: out of memory: " << e.what();
}

Allocation* StatAllocator::AllocateImpl(std::size_t size) {
  Allocation* allocation;
  try {
    allocation = underlying().Allocate(size).release();
  } catch (const BadAlloc& e) {
    CountOom(e);
    throw;
  }
  allocation->set_requested_size(size);
  if (Shard* s = ThreadShards::Recent(id_); s != nullptr) [[likely]] {
    RecordAlloc(s, allocation->size(), size);
  } else {
    RecordSlow(true, *allocation);
  }
  if (history_ != nullptr && history_->recording()) [[unlikely]] {
    history_->Record(history::EventKind::kAlloc, allocation->ptr(), size, stream_);
  }
  return allocation;
}

void StatAllocator::FreeImpl(Allocation* allocation) {
  // Before the block goes back: a free is always recorded before the reuse of its address.
  if (history_ != nullptr && history_->recording()) [[unlikely]] {
    history_->Record(history::EventKind::kFree, allocation->ptr(), allocation->requested_size(),
                     stream_);
  }
  if (Shard* s = ThreadShards::Recent(id_); s != nullptr) [[likely]] {
    RecordFree(s, allocation->size(), allocation->requested_size());
  } else {
    RecordSlow(false, *allocation);
  }
  underlying().Free(allocation);
}

void StatAllocator::CollectStats(allocation::MemoryStats* stats) const {
  underlying().CollectStats(stats);
  if (!reports_) return;
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
  if (reports_) {
    absl::MutexLock lock(&registry_->mu);
    const Registry::Totals t = registry_->Sum();
    for (int k = 0; k < kNumKinds; ++k) {
      for (int p = 0; p < kNumStatPools; ++p) {
        registry_->reset_peak[k][p] = Registry::Current(t, k, p);
      }
    }
    registry_->published.peak_epoch.fetch_add(1, std::memory_order_release);
  }
  underlying().ResetPeakStats();
}

void StatAllocator::ResetAccumulatedStats() {
  if (reports_) {
    absl::MutexLock lock(&registry_->mu);
    const Registry::Totals t = registry_->Sum();
    registry_->base_allocated = t.allocated;
    registry_->base_freed = t.freed;
    registry_->num_ooms.store(0, std::memory_order_relaxed);
  }
  underlying().ResetAccumulatedStats();
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

}  // namespace strata::layers
