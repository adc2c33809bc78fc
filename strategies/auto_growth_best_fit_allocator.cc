#include "strategies/auto_growth_best_fit_allocator.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocation/bad_alloc.h"
#include "allocation/byte_format.h"
#include "glog/logging.h"
#include "strategies/auto_growth_internal.h"

namespace strata::strategies {

using allocation::Allocation;
using allocation::FormatBytes;
using allocation::StatArray;

namespace {

using auto_growth::IsSplit;
using Block = AutoGrowthBestFitAllocator::Block;
using Pool = AutoGrowthBestFitAllocator::Pool;

constexpr std::size_t RoundUp(std::size_t x, std::size_t a) { return (x + a - 1) & ~(a - 1); }
// The largest free block a request of `size` may take: with max_split_size, ordinary requests
// never take oversize blocks and oversize ones take at most oversize_slack more.
inline std::size_t MaxBlock(const AutoGrowthOptions& o, const Pool& pool, std::size_t size) {
  if (pool.small || o.max_split_size == 0) return std::numeric_limits<std::size_t>::max();
  return size < o.max_split_size ? o.max_split_size - 1 : size + o.oversize_slack;
}

// Splitting follows PyTorch: small-pool blocks split whenever the rest can hold a minimal block;
// large-pool blocks only for ordinary (< max_split_size) requests.
inline bool ShouldSplit(const AutoGrowthOptions& o, const Pool& pool, std::size_t size,
                        std::size_t block_size) {
  if (block_size - size < o.alignment) return false;
  return pool.small || o.max_split_size == 0 || size < o.max_split_size;
}

// Cold paths kept out of line so that AllocateImpl / FreeImpl stay small.
[[noreturn]] ABSL_ATTRIBUTE_NOINLINE void ThrowTooLarge(std::size_t size,
                                                        const platform::Place& place) {
  throw std::invalid_argument(absl::StrCat("strata: cannot allocate ", size, " bytes on ",
                                           place.ToString(), ": requests are limited to ",
                                           AutoGrowthBestFitAllocator::kMaxRequestBytes, " bytes"));
}

[[noreturn]] ABSL_ATTRIBUTE_NOINLINE void ThrowBadFree(const platform::Place& place, void* ptr,
                                                       bool foreign) {
  throw std::invalid_argument(
      absl::StrCat("strata: auto_growth_best_fit on ", place.ToString(), " asked to free ",
                   absl::StrFormat("%p", ptr),
                   foreign ? ", which it did not allocate" : ", which is already free"));
}

ABSL_ATTRIBUTE_NOINLINE void LogAllocate(std::size_t size, const Allocation* block) {
  VLOG(10) << "auto_growth_best_fit: allocate " << size << " -> " << block->size() << " at "
           << block->ptr();
}

ABSL_ATTRIBUTE_NOINLINE void LogFree(const Allocation* block) {
  VLOG(10) << "auto_growth_best_fit: free " << block->size() << " at " << block->ptr();
}

}  // namespace

// ---- construction -----------------------------------------------------------------------------

AutoGrowthBestFitAllocator::AutoGrowthBestFitAllocator(
    std::shared_ptr<allocation::Allocator> underlying, const platform::Place& place,
    Options options)
    : underlying_(std::move(underlying)),
      place_(place),
      options_((ValidateOptions(options), std::move(options))),
      plain_rounding_(options_.roundup_power2_divisions.empty()),
      small_pool_(std::make_unique<Pool>(true)),
      large_pool_(std::make_unique<Pool>(false)) {
  if (underlying_ == nullptr) {
    throw std::invalid_argument(absl::StrCat("strata: ", kName, " needs an underlying allocator"));
  }
  VLOG(4) << "auto_growth_best_fit on " << place_ << ": alignment " << options_.alignment
          << ", chunk_size " << options_.chunk_size << ", small_size " << options_.small_size
          << ", small_chunk_size " << options_.small_chunk_size << ", max_split_size "
          << options_.max_split_size << ", roundup intervals "
          << options_.roundup_power2_divisions.size() << ", gc threshold "
          << options_.garbage_collection_threshold << ", memory_limit " << options_.memory_limit
          << ", free_idle_chunk " << options_.free_idle_chunk << ", free_when_no_cache_hit "
          << options_.free_when_no_cache_hit << ", release_idle_before_new_peak "
          << options_.release_idle_before_new_peak << ", quick_reuse " << options_.quick_reuse;
}

AutoGrowthBestFitAllocator::~AutoGrowthBestFitAllocator() {
  std::lock_guard<platform::SpinLock> lock(mu_);
  FlushQuick();
  std::size_t live_chunks = 0;
  while (all_chunks_ != nullptr) {
    Chunk* c = all_chunks_;
    all_chunks_ = c->all_next;
    if (!c->idle) ++live_chunks;
    for (Block* b = c->first; b != nullptr;) {
      Block* next = b->next_addr;
      // Live blocks keep their records: their owners still hold them (and will misbehave anyway).
      if (b->state == Block::kFree) Recycle(b);
      b = next;
    }
    c->device.reset();
    delete c;
  }
  while (spare_records_ != nullptr) {
    Block* b = spare_records_;
    spare_records_ = b->next_spare;
    delete b;
  }
  LOG_IF(ERROR, live_chunks > 0) << "strata: auto_growth_best_fit on " << place_
                                 << " destroyed with " << FormatBytes(allocated_)
                                 << " still allocated in " << live_chunks << " chunks";
}

// ---- sizes ------------------------------------------------------------------------------------

std::size_t AutoGrowthBestFitAllocator::RoundSize(std::size_t size) const { return Round(size); }

std::size_t AutoGrowthBestFitAllocator::Round(std::size_t size) const {
  if (size > kMaxRequestBytes) [[unlikely]]
    ThrowTooLarge(size, place_);
  if (plain_rounding_) [[likely]] {
    return std::max(RoundUp(size, options_.alignment), options_.alignment);
  }
  return RoundWithDivisions(options_, size);
}

// ---- free blocks ------------------------------------------------------------

// Takes free `block` for a request of `size`, splitting off the rest when worth keeping. The
// front is handed out in a new record, and the free record shrinks in place to the rest (usually
// staying in its bucket), which leaves the index as removing the block and inserting the rest
// would, at a fraction of the cost.
AutoGrowthBestFitAllocator::Block* AutoGrowthBestFitAllocator::TakeBlock(Pool& pool, Block* block,
                                                                         std::size_t size) {
  Chunk* chunk = block->chunk;
  if (chunk->idle) [[unlikely]]
    UnmarkIdle(chunk);
  const std::size_t block_size = block->size();
  if (!ShouldSplit(options_, pool, size, block_size)) {
    RemoveFree(block);
    return block;
  }
  const bool was_split = IsSplit(block);
  Block* taken = NewRecord();
  taken->prev_addr = block->prev_addr;
  taken->next_addr = block;
  (block->prev_addr != nullptr ? block->prev_addr->next_addr : chunk->first) = taken;
  block->prev_addr = taken;
  taken->chunk = chunk;
  taken->owner = this;
  taken->state = Block::kLive;
  taken->Move(block->bytes(), size);
  const std::size_t rest = block_size - size;
  block->Move(block->bytes() + size, rest);
  pool.index.Refile(block);
  // As RemoveFree(block) + InsertFree(rest) would count (the rest is a split now).
  if (was_split) [[likely]] {
    splits_.Shrink(block_size, rest);
  } else {
    splits_.In(rest);
  }
  return taken;
}

// Merges `block` (just freed) with its free neighbours and files the result; a chunk left as one
// free block goes idle (or is released).
void AutoGrowthBestFitAllocator::FreeBlock(Block* block) {
  const std::size_t size = block->size();
  Block* prev = block->prev_addr;
  Block* next = block->next_addr;
  TlsfIndex<Block>& index = block->chunk->pool->index;
  const bool prev_free = prev != nullptr && prev->state == Block::kFree;
  if (next != nullptr && next->state == Block::kFree && !prev_free) [[likely]] {
    // The free next block grows down over this one, in place: the index ends as removing it and
    // inserting the merged block would leave it.
    const std::size_t next_size = next->size();  // a split: this block is its neighbour
    const std::size_t merged = size + next_size;
    next->prev_addr = prev;
    (prev != nullptr ? prev->next_addr : block->chunk->first) = next;
    next->Move(block->bytes(), merged);
    index.Refile(next);
    Recycle(block);
    block = next;
    if (IsSplit(next)) [[likely]] {
      splits_.Grow(next_size, merged);
    } else {
      splits_.Out(next_size);
    }
  } else if (prev_free) {
    if (next != nullptr && next->state == Block::kFree) {
      RemoveFree(next);
      block->Resize(size + next->size());
      block->next_addr = next->next_addr;
      if (next->next_addr != nullptr) next->next_addr->prev_addr = block;
      Recycle(next);
    }
    // The free previous block grows over this one, in place.
    const std::size_t prev_size = prev->size();  // a split: this block is its neighbour
    const std::size_t merged = prev_size + block->size();
    prev->next_addr = block->next_addr;
    if (block->next_addr != nullptr) block->next_addr->prev_addr = prev;
    Recycle(block);
    block = prev;
    prev->Resize(merged);
    index.Refile(prev);
    splits_.Out(prev_size);
    if (IsSplit(prev)) splits_.In(merged);
  } else {
    InsertFree(block);
  }
  if (block->prev_addr == nullptr && block->next_addr == nullptr) [[unlikely]]
    ChunkFree(block->chunk);
}

// ---- Allocator --------------------------------------------------------------------------------

inline void AutoGrowthBestFitAllocator::Handed(Block* block, std::size_t size) {
  ++block->chunk->live;
  block->set_requested_size(size);  // for snapshots; layers above may wrap the block
  allocated_ += block->size();
  // An oversize chunk is never split: its block is an oversize allocation.
  if (block->chunk->oversize) [[unlikely]]
    oversize_allocations_.Increase(1);
}

inline AutoGrowthBestFitAllocator::Block* AutoGrowthBestFitAllocator::Search(std::size_t rounded,
                                                                             bool may_grow) {
  Block* block = options_.quick_reuse ? TakeParked(rounded) : nullptr;
  if (block != nullptr) return block;  // as handed out last time; the caller counts it
  Pool& pool = rounded <= options_.small_size ? *small_pool_ : *large_pool_;
  block = pool.index.FindBestFit(rounded, MaxBlock(options_, pool, rounded));
  if (block == nullptr) [[unlikely]] {
    if (!may_grow) return nullptr;
    block = Grow(pool, rounded);
  }
  block = TakeBlock(pool, block, rounded);
  block->Hand(block->chunk->base, place_);
  return block;
}

Allocation* AutoGrowthBestFitAllocator::AllocateImpl(std::size_t size) {
  const std::size_t rounded = Round(size);
  Block* block;
  BeforeGrowth hook = nullptr;
  void* context = nullptr;
  {
    std::lock_guard<platform::SpinLock> lock(mu_);
    if (options_.quick_reuse && num_quick_ != 0 && quick_size_[num_quick_ - 1] == rounded)
        [[likely]] {
      // The quick hit, inline: what TakeParked does for the top of the stack. The block is still
      // as handed out last time (pointer, size, base, place), and every layer above has popped
      // itself on the way down; Handed sets the requested size.
      block = quick_[--num_quick_];
      Unpark(block, rounded, block->chunk->live == 0);
      quick_credit_.Hit();
    } else {
      block = Search(rounded, /*may_grow=*/before_growth_ == nullptr);
      if (block == nullptr) [[unlikely]] {
        hook = before_growth_;
        context = before_growth_context_;
      }
    }
    if (block != nullptr) [[likely]]
      Handed(block, size);
  }
  if (block == nullptr) [[unlikely]]
    return AllocateAfterGivingBack(size, rounded, hook, context);
  if (VLOG_IS_ON(10)) [[unlikely]]
    LogAllocate(size, block);
  return block;
}

Allocation* AutoGrowthBestFitAllocator::AllocateAfterGivingBack(std::size_t size,
                                                                std::size_t rounded,
                                                                BeforeGrowth hook, void* context) {
  // Outside the lock: what the hook gives back is freed into this pool.
  static_cast<void>(hook(context));
  Block* block;
  {
    std::lock_guard<platform::SpinLock> lock(mu_);
    const std::int64_t grown = num_device_alloc_;
    block = Search(rounded, /*may_grow=*/true);
    VLOG_IF(6, num_device_alloc_ == grown)
        << "auto_growth_best_fit on " << place_ << ": no growth for " << rounded
        << " bytes: blocks given back above made room";
    Handed(block, size);
  }
  if (VLOG_IS_ON(10)) [[unlikely]]
    LogAllocate(size, block);
  return block;
}

void AutoGrowthBestFitAllocator::SetBeforeGrowth(BeforeGrowth hook, void* context) {
  std::lock_guard<platform::SpinLock> lock(mu_);
  before_growth_ = hook;
  before_growth_context_ = context;
}

void AutoGrowthBestFitAllocator::FreeImpl(Allocation* allocation) {
  auto* block = static_cast<Block*>(allocation);
  if (VLOG_IS_ON(10)) [[unlikely]]
    LogFree(block);
  std::lock_guard<platform::SpinLock> lock(mu_);
  if (block->owner != this || block->state != Block::kLive) [[unlikely]]
    ThrowBadFree(place_, block->ptr(), block->owner != this);
  allocated_ -= block->size();
  if (block->chunk->oversize) [[unlikely]]
    oversize_allocations_.Decrease(1);
  const bool empty = --block->chunk->live == 0;
  if (options_.quick_reuse && Park(block, empty)) [[likely]]
    return;
  FreeBlock(block);
}

std::uint64_t AutoGrowthBestFitAllocator::ReleaseImpl(const platform::Place& place) {
  if (place != place_) return 0;
  std::uint64_t released = 0;
  {
    std::lock_guard<platform::SpinLock> lock(mu_);
    FlushQuick();
    released = ReleaseIdle();
  }
  // Below: what it still holds of chunks already given back (a device free deferred by a
  // stream capture).
  released += underlying_->Release(place);
  VLOG(1) << "auto_growth_best_fit on " << place_ << ": Release freed " << FormatBytes(released);
  return released;
}

// ---- statistics and accessors -----------------------------------------------------------------

void AutoGrowthBestFitAllocator::CollectStats(allocation::MemoryStats* stats) const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  for (int i = 0; i < allocation::kNumStatPools; ++i) {
    stats->segment[i].Merge(segment_[i]);
    stats->reserved_bytes[i].Merge(reserved_stat_[i]);
  }
  splits_.Collect(stats);
  stats->num_device_alloc += num_device_alloc_;
  stats->num_device_free += num_device_free_;
  stats->oversize_segments.Merge(oversize_segments_);
  stats->oversize_allocations.Merge(oversize_allocations_);
  // A configuration value, not a quantity: report it rather than add it.
  stats->max_split_size = std::max<std::int64_t>(stats->max_split_size, options_.max_split_size);
}

void AutoGrowthBestFitAllocator::Snapshot(allocation::MemorySnapshot* snapshot) const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  for (const Chunk* c = all_chunks_; c != nullptr; c = c->all_next) {
    allocation::SnapshotSegment s;
    s.address = reinterpret_cast<std::uintptr_t>(c->base);
    s.size = c->size;
    s.mapped_bytes = c->size;
    for (const Block* b = c->first; b != nullptr; b = b->next_addr) {
      const bool live = b->state == Block::kLive;
      s.blocks.push_back(
          {reinterpret_cast<std::uintptr_t>(b->ptr()), b->size(), live ? b->requested_size() : 0,
           live ? allocation::BlockState::kAllocated : allocation::BlockState::kFree});
    }
    snapshot->AddSegment(std::move(s));
  }
}

template <typename F>
void AutoGrowthBestFitAllocator::ForEachStatLocked(F f) {
  for (StatArray* s : {&segment_, &reserved_stat_}) {
    for (auto& v : *s) f(v);
  }
  f(oversize_segments_);
  f(oversize_allocations_);
  f(splits_);
}

void AutoGrowthBestFitAllocator::ResetPeakStats() {
  std::lock_guard<platform::SpinLock> lock(mu_);
  ForEachStatLocked([](auto& stat) { stat.ResetPeak(); });
}

void AutoGrowthBestFitAllocator::ResetAccumulatedStats() {
  std::lock_guard<platform::SpinLock> lock(mu_);
  ForEachStatLocked([](auto& stat) { stat.ResetAccumulated(); });
  num_device_alloc_ = 0;
  num_device_free_ = 0;
}

std::size_t AutoGrowthBestFitAllocator::reserved_bytes() const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  return reserved_;
}

std::size_t AutoGrowthBestFitAllocator::allocated_bytes() const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  return allocated_;
}

std::size_t AutoGrowthBestFitAllocator::num_chunks() const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  return num_chunks_;
}

}  // namespace strata::strategies
