// StatAllocator: the top layer of every chain; keeps PyTorch's statistics that are visible from
// the top — allocation, allocated_bytes (Allocation::size(), the rounded size), requested_bytes
// (the size asked of this layer), active / active_bytes (equal to the allocation figures here;
// lower layers add their pending frees) for all / small / large blocks (PoolOf(size())), and
// num_ooms (BadAlloc passing through).
//
// Contract
// - Thread safety: Allocate/Free may run concurrently from any threads; the statistics calls
//   may run concurrently with them. Frees may happen on another thread than the allocation.
// - Streams: none; this layer never touches a stream.
// - Throws: whatever the underlying throws. BadAlloc is counted in num_ooms and rethrown.
// - Allocate stores the requested size in the allocation (set_requested_size) so Free can
//   subtract it.
//
// Hot path: no lock and no read-modify-write on shared memory. Each thread writes its own
// cache-line aligned shard of counters with relaxed loads/stores; readers sum the shards under
// a mutex. Shards belong to the allocator (a small registry) and outlive their threads: when a
// thread exits its shard, counts included, goes back to the registry for the next new thread,
// so no count is ever lost and the number of shards is bounded by the peak number of threads.
//
// What the figures guarantee
// - current, allocated, freed: exact once concurrent Allocate/Free calls have returned
//   (a CollectStats running alongside them sums the shards one by one, so it sees some of the
//   in-flight calls and not others). allocated - freed == current until
//   ResetAccumulatedStats().
// - peak: every Allocate estimates the new current as `published + own drift`, where each
//   thread publishes its drift (its net change not yet added to a shared counter) only when it
//   exceeds kCountSlack allocations / kBytesSlack bytes, or when the thread exits. One shard at
//   a time, the primary (the first thread's, handed on when that thread exits), publishes with
//   a plain load and store into a counter of its own; the others with an atomic add. A block
//   above the slack publishes at its allocation and at its free, so a lone thread's large pairs
//   cost no locked instruction. The estimate is off by the sum of the other threads' unpublished
//   drifts.
//   Hence:
//   * exact when only one thread allocates and frees (other threads that have exited do not
//     count; live threads that once allocated or freed through this allocator may hold a
//     drift of up to the slack each);
//   * with several threads, within (threads - 1) * slack of the true peak, in either
//     direction; a reported peak is never below the current value reported with it nor below
//     the value at the last reset.
//   The slack is large enough that alloc/free loops of blocks below it never publish, which
//   is what keeps the layer scalable.
// - ResetPeakStats(): peak := current. An Allocate running concurrently with the reset may be
//   missed by the new peak.
//
// History: with RecordInto, every allocation and free is reported to the place's
// HistoryRecorder while it records (one relaxed load and a branch when it does not).
//
// Shared counters: StatAllocators built over one NewCounters() set (the facade's per-stream
// chains of a device) count into the same figures, so peaks are those of the device, not sums of
// per-stream peaks. The first of them to be built reports the set (CollectStats, the resets);
// the others report only their underlying layers. The accessors below read the whole set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "allocation/bad_alloc.h"
#include "allocation/decorating_allocator.h"
#include "allocation/memory_stats.h"
#include "history/history_recorder.h"
#include "platform/stream.h"

namespace strata::layers {

class StatAllocator : public allocation::DecoratingAllocator {
 public:
  static constexpr char kName[] = "stat";
  // Drift a thread may keep before publishing it (see "peak" above).
  static constexpr std::int64_t kCountSlack = 64;
  static constexpr std::int64_t kBytesSlack = std::int64_t{16} << 20;

  struct Registry;
  // A counter set several StatAllocators may share (see "Shared counters" above).
  static std::shared_ptr<Registry> NewCounters();
  // `counters`: null for counters of its own.
  explicit StatAllocator(std::shared_ptr<allocation::Allocator> underlying,
                         std::shared_ptr<Registry> counters = nullptr);
  ~StatAllocator() override;
  StatAllocator(const StatAllocator&) = delete;
  StatAllocator& operator=(const StatAllocator&) = delete;

  const char* Name() const override { return kName; }

  // Reports allocations and frees (as made on `stream`) to `history` while it records. Call
  // before the layer is used.
  void RecordInto(std::shared_ptr<history::HistoryRecorder> history, platform::Stream stream) {
    history_owner_ = std::move(history);
    history_ = history_owner_.get();
    stream_ = stream;
  }

  // Asks the underlying first, then adds this layer's figures (Merge).
  void CollectStats(allocation::MemoryStats* stats) const override;
  void ResetPeakStats() override;
  void ResetAccumulatedStats() override;

  // This layer's figures alone (each call takes the registry lock: not for the hot path).
  allocation::StatValue allocation(allocation::StatPool pool = allocation::kAggregate) const;
  allocation::StatValue allocated_bytes(allocation::StatPool pool = allocation::kAggregate) const;
  allocation::StatValue requested_bytes(allocation::StatPool pool = allocation::kAggregate) const;
  std::int64_t allocation_current() const { return allocation().current; }
  std::int64_t allocated_bytes_current() const { return allocated_bytes().current; }
  std::int64_t allocated_bytes_peak() const { return allocated_bytes().peak; }
  std::int64_t requested_bytes_current() const { return requested_bytes().current; }
  std::int64_t num_ooms() const;

  struct Shard;

 protected:
  // noinline: keeps GCC from speculatively inlining the layer into itself where it calls the
  // layer below (which "might" be the same class), a compare and register spills per call.
  [[gnu::noinline]] allocation::Allocation* AllocateImpl(std::size_t size) override;
  [[gnu::noinline]] void FreeImpl(allocation::Allocation* allocation) override;

 private:
  void RecordAlloc(Shard* shard, std::size_t bytes, std::size_t requested);
  void RecordFree(Shard* shard, std::size_t bytes, std::size_t requested);
  [[gnu::noinline]] void RecordSlow(bool is_alloc, const allocation::Allocation& allocation);
  [[gnu::noinline, gnu::cold]] void CountOom(const allocation::BadAlloc& e);

  std::shared_ptr<Registry> registry_;
  history::HistoryRecorder* history_ = nullptr;
  std::shared_ptr<history::HistoryRecorder> history_owner_;
  platform::Stream stream_;
  const std::uint64_t id_;  // the registry's: unique, never reused, keys the thread-local caches
  const bool reports_;      // the first StatAllocator over its registry
};

}  // namespace strata::layers
