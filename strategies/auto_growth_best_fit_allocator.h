// AutoGrowthBestFitAllocator: the pooling strategy. Carves blocks out of chunks it grows from the
// raw device allocator below, finds the best-fitting free block in O(1) (TLSF-style segregated
// free lists with two-level bitmaps), splits on allocate and coalesces address-order neighbours on
// free. Combines Paddle's auto-growth best-fit allocator with PyTorch's caching-allocator knobs
// (max_split_size, roundup_power2_divisions, garbage_collection_threshold).
//
// Contract
// - Thread safety: IsAllocThreadSafe() is true; one platform::SpinLock guards all state (see
//   spin_lock.h for why not absl::Mutex). Allocate/Free of a cached block do constant work under
//   it; growth and release call the underlying allocator (Allocate / Free only, never a
//   synchronization) while holding it.
// - Streams: none. This layer hands out memory immediately; stream safety is the job of the
//   layer above (StreamSafeCUDAAllocator).
// - Throws: std::invalid_argument for bad Options (naming option, value and what is allowed), for
//   absurd sizes (> kMaxRequestBytes) and for freeing a block that is not live here.
//   allocation::BadAlloc when memory cannot be had: either growth would pass Options::memory_limit
//   (thrown before asking the device, with set_memory_limit filled) or the underlying allocator
//   failed even after idle chunks were released and the growth shrunk to the bare request (the
//   underlying BadAlloc is rethrown with set_pool_usage and, when much memory is reserved but
//   unallocated, a hint). Anything else the underlying throws propagates unchanged.
// - Steady state performs no heap allocation: the Allocation returned IS the block record
//   (Block), recycled through a free list of records under the lock; Free finds the block from
//   the pointer.
// - Quick reuse: a freed block may be parked, uncoalesced, and handed back to the next request
//   of exactly its size without a search or split (a free + allocate of one size in a loop is a
//   few dozen instructions), also when it is the only block of its chunk. Parking only ever
//   hands out what best fit over the coalesced blocks would, everything parked is coalesced
//   before any other search, Release or another chunk going idle (a chunk emptied by a parked
//   free goes idle then, in free order), and the statistics count parked blocks as coalesced, so
//   placement, growth, releases and the figures are those of plain coalescing. See
//   kQuickCapacity in the class.
//
// Pools and growth (see GrowthBytes() in the .cc, the single place to tune):
// - Requests whose rounded size is <= Options::small_size (1 MiB) live in the small pool, packed
//   into chunks of Options::small_chunk_size (2 MiB), so small blocks never fragment large chunks.
//   small_size = 0 disables the small pool (everything shares one pool).
// - Larger requests grow a chunk of the rounded request, rounded up to growth_granularity (2 MiB,
//   the device's own granularity), or chunk_size if that is larger (never past max_split_size for
//   a non-oversize request). Oversize requests (>= max_split_size) get exactly their rounded size.
// - Before growing (a "cache miss"): free_when_no_cache_hit releases every idle chunk;
//   release_idle_before_new_peak releases idle chunks rather than set a new reservation peak; the
//   garbage collector releases idle chunks oldest-idle first while reserved + growth exceeds
//   garbage_collection_threshold * memory_limit; passing memory_limit first releases idle chunks
//   and shrinks the growth to the bare request, then throws.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "allocation/allocation.h"
#include "allocation/allocator.h"
#include "allocation/memory_stats.h"
#include "platform/place.h"
#include "platform/spin_lock.h"

namespace strata::strategies {

class AutoGrowthBestFitAllocator : public allocation::Allocator {
 public:
  static constexpr std::size_t kMiB = std::size_t{1} << 20;
  // Requests above this are rejected with std::invalid_argument (no device has 1 EiB, and it
  // keeps every rounding below free of overflow).
  static constexpr std::size_t kMaxRequestBytes = std::size_t{1} << 60;
  // roundup_power2_divisions has at most this many entries: [1 MiB, 2 MiB) ... [2^63, 2^64).
  static constexpr std::size_t kMaxRoundupIntervals = 44;

  struct Options {
    // Every block size is a multiple of this (and every block starts at a multiple of it relative
    // to its chunk). A power of two, at most growth_granularity.
    std::size_t alignment = 512;
    // Minimum bytes to grow by for the large pool; 0 = just the rounded request (Paddle's
    // auto_growth_chunk_size_in_mb). Rounded up to growth_granularity.
    std::size_t chunk_size = 0;
    // Paddle: release a chunk to the device as soon as it becomes entirely free.
    bool free_idle_chunk = false;
    // Paddle: on a cache miss, release all idle chunks before growing.
    bool free_when_no_cache_hit = false;
    // On a cache miss whose growth would lift reserved bytes above their high-water mark, first
    // release idle chunks (longest idle first) until the growth fits under the mark. Keeps the
    // peak reservation near the peak demand without churning the device below the peak.
    // (Replaying /work/shared/traces with this, small_size = 0 and chunk_size = 20 MiB gave
    // peak reserved / peak requested 1.03-1.17 at fewer device mallocs than PyTorch segments.)
    bool release_idle_before_new_peak = false;
    // PyTorch max_split_size (bytes, 0 = unlimited). Blocks of at least this size ("oversize")
    // are never split; requests below it never take an oversize block; an oversize request takes
    // an oversize block at most oversize_slack bytes bigger than itself (PyTorch: 20 MiB).
    // Must be 0 or larger than small_size.
    std::size_t max_split_size = 0;
    std::size_t oversize_slack = 20 * kMiB;
    // PyTorch roundup_power2_divisions. Entry i applies to sizes in [2^(20+i), 2^(21+i)) — i.e.
    // entry 0 to sizes below 2 MiB (including those below 1 MiB, as in PyTorch), entry 1 to
    // [2 MiB, 4 MiB), ... — and the last entry to every larger size. A size is rounded up to the
    // next of `divisions` equal steps of its power-of-two interval (e.g. 4 divisions: 1280 MiB
    // -> 1536 MiB), when divisions > 1 and size > alignment * divisions. Each entry is 0 or a
    // power of two (0 and 1: no rounding). Empty: no rounding beyond alignment. Use
    // UniformRoundup(n) for PyTorch's single-number form.
    std::vector<std::size_t> roundup_power2_divisions;
    // PyTorch garbage_collection_threshold: 0 = off, else in (0, 1) and needs memory_limit.
    double garbage_collection_threshold = 0.0;
    // Bytes this allocator may reserve from the device (0 = no limit). Growth past it throws
    // BadAlloc before the device is asked.
    std::size_t memory_limit = 0;
    // Small pool: rounded requests <= small_size (0 = no small pool) grow chunks of
    // small_chunk_size (>= small_size, a multiple of growth_granularity).
    std::size_t small_size = allocation::kSmallSize;
    std::size_t small_chunk_size = 2 * kMiB;
    // Growth is rounded up to this (the device allocator rounds to 2 MiB anyway). A power of two.
    std::size_t growth_granularity = 2 * kMiB;
  };

  static std::vector<std::size_t> UniformRoundup(std::size_t divisions) {
    return std::vector<std::size_t>(1, divisions);
  }
  // Throws std::invalid_argument naming the first bad option.
  static void ValidateOptions(const Options& options);

  AutoGrowthBestFitAllocator(std::shared_ptr<allocation::Allocator> underlying,
                             const platform::Place& place, Options options);
  ~AutoGrowthBestFitAllocator() override;

  const char* Name() const override { return "auto_growth_best_fit"; }
  bool IsAllocThreadSafe() const override { return true; }

  void CollectStats(allocation::MemoryStats* stats) const override;
  void ResetPeakStats() override;
  void ResetAccumulatedStats() override;

  // The size a request of `size` bytes is rounded to (alignment and roundup_power2_divisions);
  // size 0 gives the minimal block. Throws std::invalid_argument above kMaxRequestBytes.
  std::size_t RoundSize(std::size_t size) const;

  std::size_t reserved_bytes() const;   // bytes held from the underlying allocator
  std::size_t allocated_bytes() const;  // bytes of live blocks (rounded sizes)
  std::size_t num_chunks() const;
  const Options& options() const { return options_; }
  const platform::Place& place() const { return place_; }

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override;
  void FreeImpl(allocation::Allocation* allocation) override;
  std::uint64_t ReleaseImpl(const platform::Place& place) override;

 public:
  // Implementation types (public so that the .cc's helpers can name them).
  struct Chunk;
  class Block;
  struct Pool;

  // TLSF geometry: first level = power of two, second level = 2^kSlLog2 linear steps.
  static constexpr int kSlLog2 = 5;
  static constexpr int kSlCount = 1 << kSlLog2;
  static constexpr int kFlCount = 64 - kSlLog2 + 1;

 private:
  // The hot helpers are declared inline so that they inline into AllocateImpl / FreeImpl even
  // in a -fPIC build (where an out-of-line member could be interposed); they are defined and used
  // in the .cc only.
  inline std::size_t Round(std::size_t size) const;
  inline Pool& PoolFor(std::size_t block_size);
  inline Block* FindFit(Pool& pool, std::size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  inline Block* TakeBlock(Pool& pool, Block* block, std::size_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Block* Grow(Pool& pool, std::size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::size_t GrowthBytes(const Pool& pool, std::size_t size) const;
  std::size_t MinimalGrowthBytes(std::size_t size) const;
  inline bool ShouldSplit(const Pool& pool, std::size_t size, std::size_t block_size) const;
  std::size_t RoundSizeSlow(std::size_t size) const;
  inline void InsertFree(Block* block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  inline void RemoveFree(Block* block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Free block `block` now spans [ptr, ptr + size): refiles it (to the head of its bucket, as a
  // remove + insert would) and updates the inactive-split figures.
  inline void ResizeFree(Block* block, char* ptr, std::size_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  inline void SplitIn(std::size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  inline void SplitOut(std::size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  inline void SplitShrink(std::size_t from, std::size_t to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  inline void SplitGrow(std::size_t from, std::size_t to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  inline Block* NewRecord() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  inline void Recycle(Block* block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The coalescing free (the old FreeImpl): merges `block` with free neighbours and files it.
  ABSL_ATTRIBUTE_ALWAYS_INLINE inline void FreeBlock(Block* block)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Everything but the quick-reuse hit: a parked block of exactly `size` bytes deeper in the
  // stack, else flush the stack, search the lists, grow, split.
  ABSL_ATTRIBUTE_ALWAYS_INLINE inline Block* Search(std::size_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // AllocateImpl / FreeImpl past the quick paths, out of line so that those stay small. Called
  // with mu_ held; they release it.
  allocation::Allocation* AllocateSlow(std::size_t size, std::size_t rounded)
      ABSL_UNLOCK_FUNCTION(mu_);
  void FreeSlow(Block* block) ABSL_UNLOCK_FUNCTION(mu_);
  // Out of line: rare, and it keeps the hot paths small.
  ABSL_ATTRIBUTE_NOINLINE void FlushQuick() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Frontable(const Pool& pool, std::size_t size, const Block* next) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  inline void Unpark(Block* block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  inline void Unpark(Block* block, std::size_t size, bool empty) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  inline void CountFrontPark(const Block* block, const Block* next, bool empty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `chunk` is one free block now: marks it idle, or releases it (free_idle_chunk).
  ABSL_ATTRIBUTE_NOINLINE void ChunkFree(Chunk* chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  inline void MarkIdle(Chunk* chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  inline void UnmarkIdle(Chunk* chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::size_t ReleaseChunk(Chunk* chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases idle chunks oldest-idle first until reserved + `extra` <= `target` (0 target with
  // max extra releases all). Returns bytes released.
  std::size_t ReleaseIdleChunks(std::size_t target, std::size_t extra)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::size_t ReleaseAllIdle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<allocation::Allocator> underlying_;
  const platform::Place place_;
  const Options options_;
  const std::size_t gc_target_bytes_;  // garbage_collection_threshold * memory_limit, or 0
  const bool plain_rounding_;          // no roundup_power2_divisions: alignment only

  mutable platform::SpinLock mu_;
  // Fixed at construction; their contents are guarded by mu_.
  const std::unique_ptr<Pool> small_pool_;
  const std::unique_ptr<Pool> large_pool_;
  // Every chunk (doubly linked through Chunk::all_prev/all_next) and the idle ones, the longest
  // idle first (Chunk::idle_prev/idle_next).
  Chunk* all_chunks_ ABSL_GUARDED_BY(mu_) = nullptr;
  Chunk* idle_head_ ABSL_GUARDED_BY(mu_) = nullptr;
  Chunk* idle_tail_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::size_t num_chunks_ ABSL_GUARDED_BY(mu_) = 0;
  std::size_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
  std::size_t high_water_ ABSL_GUARDED_BY(mu_) = 0;  // most ever reserved (not reset)
  std::size_t allocated_ ABSL_GUARDED_BY(mu_) = 0;

  allocation::StatArray segment_ ABSL_GUARDED_BY(mu_){};
  allocation::StatArray reserved_stat_ ABSL_GUARDED_BY(mu_){};
  // Inactive-split figures as plain counters, indexed by StatPool; CollectStats turns them into
  // StatValues. Entry kAggregate keeps only the peak (its current / increased are the sums), and
  // `freed` is derived (increased - current + current at the last ResetAccumulatedStats), so the
  // free lists update a few integers rather than six StatValues.
  struct SplitFigure {
    std::int64_t current = 0;
    std::int64_t peak = 0;
    std::int64_t increased = 0;  // StatValue::allocated
    std::int64_t base = 0;       // current at the last ResetAccumulatedStats
  };
  std::array<SplitFigure, allocation::kNumStatPools> split_count_ ABSL_GUARDED_BY(mu_){};
  std::array<SplitFigure, allocation::kNumStatPools> split_bytes_ ABSL_GUARDED_BY(mu_){};
  // Quick reuse (deferred coalescing): a freed block whose previous block is live (or absent) is
  // parked here uncoalesced when taking it back is what best fit would do (see "quick reuse" in
  // the .cc); an allocation of exactly its size takes the most recent one back without searching
  // or splitting. Everything here is coalesced (in free order, so the lists end as if each block
  // had been freed normally) before any other allocation searches and before any free that cannot
  // park (so the lists never change while blocks are parked), when the stack is full, and on
  // Release and destruction. A chunk's last live block parks too (not with free_idle_chunk): its
  // chunk goes idle when the block is coalesced, which happens before anything looks at idle
  // chunks, and the idle order is that of the frees (see "last live block" in the .cc). The
  // statistics count a parked block as the coalesced block it stands for.
  static constexpr int kQuickCapacity = 16;
  std::array<Block*, kQuickCapacity> quick_ ABSL_GUARDED_BY(mu_){};
  std::array<std::size_t, kQuickCapacity> quick_size_ ABSL_GUARDED_BY(mu_){};
  int num_quick_ ABSL_GUARDED_BY(mu_) = 0;
  // Parking pays only when blocks come back: a hit earns kQuickHitCredit, a parked block
  // coalesced unused costs 1, and frees park only while the credit is positive. While it is not,
  // an allocation of the size freed last (a hit missed) earns 1, which turns parking on again.
  // (On the real traces in /work/shared/traces only a few percent of parked blocks come back, so
  // parking stays mostly off there; a loop that frees and reallocates a size keeps it on.)
  static constexpr int kQuickHitCredit = 2;
  static constexpr int kQuickMaxCredit = 32;
  int quick_credit_ ABSL_GUARDED_BY(mu_) = kQuickMaxCredit;
  std::size_t last_free_size_ ABSL_GUARDED_BY(mu_) = 0;
  // Spare block records (linked through next_free), so that splitting and merging recycle
  // records under the lock already held instead of through the thread-local ObjectPool.
  Block* spare_records_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::size_t num_spare_records_ ABSL_GUARDED_BY(mu_) = 0;
  std::int64_t num_device_alloc_ ABSL_GUARDED_BY(mu_) = 0;
  std::int64_t num_device_free_ ABSL_GUARDED_BY(mu_) = 0;
  std::int64_t oversize_segments_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace strata::strategies
