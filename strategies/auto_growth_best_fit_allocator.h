// AutoGrowthBestFitAllocator: the pooling strategy. Carves blocks out of chunks it grows from the
// raw device allocator below, finds the best-fitting free block in O(1) (TlsfIndex: segregated
// free lists with two-level bitmaps), splits on allocate and coalesces address-order neighbours
// on free. Combines Paddle's auto-growth best-fit allocator with PyTorch's caching-allocator knobs
// (max_split_size, roundup_power2_divisions, garbage_collection_threshold).
//
// Contract
// - Thread safety: thread-safe; one platform::SpinLock guards all state (see
//   spin_lock.h for why not absl::Mutex). Allocate/Free of a cached block do constant work under
//   it; growth and release call the underlying allocator (Allocate / Free only, never a
//   synchronization) while holding it; Release then forwards to the underlying allocator,
//   outside the lock.
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
//
// Pools, placement and growth
// - Requests whose rounded size is <= Options::small_size live in a separate small pool of
//   small_chunk_size chunks (off by default: small_size = 0 puts everything in one pool).
// - Allocate takes the best fit among acceptable free blocks (with max_split_size, ordinary
//   requests never take oversize blocks and oversize ones take at most oversize_slack more) and
//   splits off the rest unless the request is oversize or the rest is below alignment.
// - A cache miss grows the pool as growth_policy.h decides (chunk sizes, and which idle chunks
//   free_when_no_cache_hit, release_idle_before_new_peak, the garbage collector and memory_limit
//   give back first). A chunk is idle when it is one free block; free_idle_chunk releases it at
//   once, else it waits on the idle list (longest idle first) for a release or Release().
// - Options::quick_reuse (on by default; false turns it off) lets a freed block wait uncoalesced
//   for the next request of its size; it changes no placement, growth, release or figure, only
//   the cost of a free + allocate loop (auto_growth_quick_reuse.cc).
//
// Parts: tlsf_index.h (the free-block index), split_accounting.h (inactive-split figures),
// growth_policy.h, auto_growth_options.h; this class's own code is in
// auto_growth_best_fit_allocator.cc, auto_growth_chunks.cc and auto_growth_quick_reuse.cc.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "allocation/allocation.h"
#include "allocation/allocator.h"
#include "allocation/memory_stats.h"
#include "allocation/reuse_credit.h"
#include "platform/place.h"
#include "platform/spin_lock.h"
#include "strategies/auto_growth_options.h"
#include "strategies/split_accounting.h"

namespace strata::strategies {

class AutoGrowthBestFitAllocator : public allocation::Allocator {
 public:
  static constexpr char kName[] = "auto_growth_best_fit";
  using Options = AutoGrowthOptions;
  static constexpr std::size_t kMiB = Options::kMiB;
  static constexpr std::size_t kMaxRequestBytes = Options::kMaxRequestBytes;
  static constexpr std::size_t kMaxRoundupIntervals = Options::kMaxRoundupIntervals;

  static std::vector<std::size_t> UniformRoundup(std::size_t divisions) {
    return Options::UniformRoundup(divisions);
  }
  // Throws std::invalid_argument naming the first bad option.
  static void ValidateOptions(const Options& options) { ValidateAutoGrowthOptions(options); }

  AutoGrowthBestFitAllocator(std::shared_ptr<allocation::Allocator> underlying,
                             const platform::Place& place, Options options);
  ~AutoGrowthBestFitAllocator() override;

  const char* Name() const override { return kName; }

  void CollectStats(allocation::MemoryStats* stats) const override;
  // Segments: the chunks; blocks: live ones allocated, free and parked ones free.
  void Snapshot(allocation::MemorySnapshot* snapshot) const override;
  void ResetPeakStats() override;
  void ResetAccumulatedStats() override;

  // The size a request of `size` bytes is rounded to (alignment and roundup_power2_divisions);
  // size 0 gives the minimal block. Throws std::invalid_argument above kMaxRequestBytes.
  std::size_t RoundSize(std::size_t size) const;

  std::size_t reserved_bytes() const;   // bytes held from the underlying allocator
  std::size_t allocated_bytes() const;  // bytes of live blocks (rounded sizes)
  // Before it grows for a request it found no room for, the pool calls `hook(context)` outside
  // its lock, on the allocating thread, then searches again: a layer above that keeps blocks of
  // this pool (the thread cache's per-thread caches) gives them back, so that they coalesce
  // into room first. Null: no call. Set before the pool is used; `context` must stay valid
  // while the pool allocates.
  // (Its result, whether anything was given back, is not needed here: the pool searches again.)
  using BeforeGrowth = bool (*)(void* context);
  void SetBeforeGrowth(BeforeGrowth hook, void* context);
  std::size_t num_chunks() const;
  const Options& options() const { return options_; }
  const platform::Place& place() const { return place_; }

  // Implementation types, defined in the .cc.
  struct Chunk;
  class Block;
  struct Pool;

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override;
  void FreeImpl(allocation::Allocation* allocation) override;
  std::uint64_t ReleaseImpl(const platform::Place& place) override;

 private:
  // Hot helpers are declared inline so that they inline into AllocateImpl / FreeImpl even in a
  // -fPIC build (where an out-of-line member could be interposed); the .cc defines them.
  inline std::size_t Round(std::size_t size) const;
  inline Block* TakeBlock(Pool& pool, Block* block, std::size_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Merges freed `block` with its free neighbours and indexes the result.
  inline void FreeBlock(Block* block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  inline void InsertFree(Block* block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  inline void RemoveFree(Block* block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  inline Block* NewRecord() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  inline void Recycle(Block* block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A block of `rounded` bytes, taken, for a request that is no quick hit: a parked block of
  // that size, else the best fit, else (with `may_grow`) a new chunk's; null when nothing fits
  // and growth is not allowed.
  inline Block* Search(std::size_t rounded, bool may_grow) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `block` (taken) is handed out for a request of `size` bytes: counts it.
  inline void Handed(Block* block, std::size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An allocation that found no room, with a BeforeGrowth hook: asks it, then searches again
  // and grows only then.
  [[gnu::noinline]] allocation::Allocation* AllocateAfterGivingBack(std::size_t size,
                                                                    std::size_t rounded,
                                                                    BeforeGrowth hook,
                                                                    void* context);
  // Chunks (auto_growth_chunks.cc). A cache miss: carries out the growth policy's plan and
  // returns the new chunk's (free, indexed) block.
  Block* Grow(Pool& pool, std::size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Chunk* AddChunk(Pool& pool, allocation::AllocationPtr device, std::size_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `chunk` is one free block now: marks it idle, or releases it (free_idle_chunk).
  void ChunkFree(Chunk* chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnmarkIdle(Chunk* chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::size_t ReleaseChunk(Chunk* chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases the `count` longest-idle chunks (all of them by default); returns bytes released.
  std::size_t ReleaseIdle(std::size_t count = SIZE_MAX) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Quick reuse (auto_growth_quick_reuse.cc), called only with Options::quick_reuse.
  // A parked block of exactly `size` bytes taken back (nullptr if none: the stack is then
  // flushed, as any other search must see coalesced blocks).
  Block* TakeParked(std::size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Parks freed `block` (`empty`: its chunk has no live block left) and returns true, or flushes
  // the stack and returns false: FreeBlock must free it. Inline (auto_growth_internal.h): the
  // free's common case; ParkRefused is its out-of-line refusal.
  inline bool Park(Block* block, bool empty) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ParkRefused(std::size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  inline void PushQuick(Block* block, std::size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FlushQuick() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Frontable(const Pool& pool, std::size_t size, const Block* next) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unpark(Block* block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Inline (auto_growth_internal.h): the quick hit of AllocateImpl uses it.
  inline void Unpark(Block* block, std::size_t size, bool empty) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  inline void CountFrontPark(const Block* block, const Block* next, bool empty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Calls `f` on every statistic kept here (StatValue and SplitAccounting alike), so that each
  // reset names each figure once.
  template <typename F>
  void ForEachStatLocked(F f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<allocation::Allocator> underlying_;
  const platform::Place place_;
  const Options options_;
  const bool plain_rounding_;  // no roundup_power2_divisions: alignment only

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
  BeforeGrowth before_growth_ ABSL_GUARDED_BY(mu_) = nullptr;
  void* before_growth_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Idle chunk sizes handed to the growth policy; kept to reuse its capacity.
  std::vector<std::size_t> idle_sizes_ ABSL_GUARDED_BY(mu_);

  allocation::StatArray segment_ ABSL_GUARDED_BY(mu_){};
  allocation::StatArray reserved_stat_ ABSL_GUARDED_BY(mu_){};
  SplitAccounting splits_ ABSL_GUARDED_BY(mu_);
  // Quick reuse (Options::quick_reuse): freed blocks parked uncoalesced, the latest on top, and
  // their sizes. Everything here is coalesced, in free order, before any other allocation
  // searches and before any free that cannot park, when the stack is full, and on Release and
  // destruction. See auto_growth_quick_reuse.cc.
  static constexpr int kQuickCapacity = 16;
  std::array<Block*, kQuickCapacity> quick_ ABSL_GUARDED_BY(mu_){};
  std::array<std::size_t, kQuickCapacity> quick_size_ ABSL_GUARDED_BY(mu_){};
  int num_quick_ ABSL_GUARDED_BY(mu_) = 0;
  // Parking pays only when blocks come back (reuse_credit.h), keyed by rounded size.
  allocation::ReuseCredit quick_credit_ ABSL_GUARDED_BY(mu_);
  // Spare block records (linked through Block::next_spare), so that splitting and merging
  // recycle records under the lock already held instead of through the heap.
  Block* spare_records_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::size_t num_spare_records_ ABSL_GUARDED_BY(mu_) = 0;
  std::int64_t num_device_alloc_ ABSL_GUARDED_BY(mu_) = 0;
  std::int64_t num_device_free_ ABSL_GUARDED_BY(mu_) = 0;
  allocation::StatValue oversize_segments_ ABSL_GUARDED_BY(mu_){};
  allocation::StatValue oversize_allocations_ ABSL_GUARDED_BY(mu_){};
};

}  // namespace strata::strategies
