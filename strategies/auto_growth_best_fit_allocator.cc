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
#include "strategies/growth_policy.h"
#include "strategies/tlsf_index.h"

namespace strata::strategies {

using allocation::Allocation;
using allocation::BadAlloc;
using allocation::FormatBytes;
using allocation::StatArray;
using allocation::StatPool;

// ---- implementation types ---------------------------------------------------------------------

class AutoGrowthBestFitAllocator::Block : public allocation::Allocation, public TlsfHook<Block> {
 public:
  // Turns the record into the Allocation handed out (clean decorator stack).
  void Hand(void* base, const platform::Place& place) { Reset(ptr(), base, size(), place); }
  void Move(char* ptr, std::size_t size) {
    set_ptr(ptr);
    set_size(size);
  }
  void Resize(std::size_t size) { set_size(size); }
  char* bytes() const { return static_cast<char*>(ptr()); }

  Block* prev_addr = nullptr;  // address-order neighbours within the chunk
  Block* next_addr = nullptr;
  Block* next_spare = nullptr;  // while a spare record
  Chunk* chunk = nullptr;
  const AutoGrowthBestFitAllocator* owner = nullptr;  // null while a spare record
  bool free = false;                                  // in its pool's index
};

struct AutoGrowthBestFitAllocator::Chunk {
  allocation::AllocationPtr device;
  char* base = nullptr;
  std::size_t size = 0;
  Pool* pool = nullptr;
  Block* first = nullptr;  // the block at `base`
  std::size_t live = 0;    // blocks handed out and not freed
  bool idle = false;
  bool oversize = false;
  Chunk* all_prev = nullptr;
  Chunk* all_next = nullptr;
  Chunk* idle_prev = nullptr;
  Chunk* idle_next = nullptr;
};

struct AutoGrowthBestFitAllocator::Pool {
  explicit Pool(bool s) : small(s) {}
  const bool small;
  TlsfIndex<Block> index;  // the free blocks
};

namespace {

using Block = AutoGrowthBestFitAllocator::Block;
using Pool = AutoGrowthBestFitAllocator::Pool;

constexpr std::size_t RoundUp(std::size_t x, std::size_t a) { return (x + a - 1) & ~(a - 1); }
constexpr std::size_t RoundDown(std::size_t x, std::size_t a) { return x & ~(a - 1); }

void Add(StatArray& stat, StatPool pool, std::int64_t delta) {
  for (StatPool p : {allocation::kAggregate, pool}) {
    if (delta >= 0) {
      stat[p].Increase(delta);
    } else {
      stat[p].Decrease(-delta);
    }
  }
}

// Whether a free block counts as an "inactive split": its chunk also holds other blocks. Cannot
// change while the block is free and unresized (free neighbours are always coalesced).
ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool IsSplit(const Block* block) {
  return block->prev_addr != nullptr || block->next_addr != nullptr;
}

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
    throw std::invalid_argument("strata: AutoGrowthBestFitAllocator needs an underlying allocator");
  }
  VLOG(4) << "auto_growth_best_fit on " << place_ << ": alignment " << options_.alignment
          << ", chunk_size " << options_.chunk_size << ", small_size " << options_.small_size
          << ", small_chunk_size " << options_.small_chunk_size << ", max_split_size "
          << options_.max_split_size << ", roundup intervals "
          << options_.roundup_power2_divisions.size() << ", gc threshold "
          << options_.garbage_collection_threshold << ", memory_limit " << options_.memory_limit
          << ", free_idle_chunk " << options_.free_idle_chunk << ", free_when_no_cache_hit "
          << options_.free_when_no_cache_hit << ", release_idle_before_new_peak "
          << options_.release_idle_before_new_peak;
}

AutoGrowthBestFitAllocator::~AutoGrowthBestFitAllocator() {
  std::lock_guard<platform::SpinLock> lock(mu_);
  std::size_t live_chunks = 0;
  while (all_chunks_ != nullptr) {
    Chunk* c = all_chunks_;
    all_chunks_ = c->all_next;
    if (!c->idle) ++live_chunks;
    for (Block* b = c->first; b != nullptr;) {
      Block* next = b->next_addr;
      // Live blocks keep their records: their owners still hold them (and will misbehave anyway).
      if (b->free) Recycle(b);
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

// ---- block records and free blocks ------------------------------------------------------------

AutoGrowthBestFitAllocator::Block* AutoGrowthBestFitAllocator::NewRecord() {
  if (Block* b = spare_records_; b != nullptr) [[likely]] {
    spare_records_ = b->next_spare;
    --num_spare_records_;
    return b;
  }
  return new Block();
}

void AutoGrowthBestFitAllocator::Recycle(Block* block) {
  block->owner = nullptr;  // so a stale free of this record is caught
  // Bounded, so that a burst of splits does not pin records forever.
  if (num_spare_records_ < 4096) [[likely]] {
    block->next_spare = spare_records_;
    spare_records_ = block;
    ++num_spare_records_;
  } else {
    delete block;
  }
}

void AutoGrowthBestFitAllocator::InsertFree(Block* block) {
  block->chunk->pool->index.Insert(block);
  block->free = true;
  if (IsSplit(block)) splits_.In(block->size());
}

void AutoGrowthBestFitAllocator::RemoveFree(Block* block) {
  block->chunk->pool->index.Remove(block);
  block->free = false;
  if (IsSplit(block)) splits_.Out(block->size());
}

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
  taken->free = false;
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
  const bool prev_free = prev != nullptr && prev->free;
  if (next != nullptr && next->free && !prev_free) [[likely]] {
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
    if (next != nullptr && next->free) {
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

Allocation* AutoGrowthBestFitAllocator::AllocateImpl(std::size_t size) {
  const std::size_t rounded = Round(size);
  Block* block;
  {
    std::lock_guard<platform::SpinLock> lock(mu_);
    Pool& pool = rounded <= options_.small_size ? *small_pool_ : *large_pool_;
    block = pool.index.FindBestFit(rounded, MaxBlock(options_, pool, rounded));
    if (block == nullptr) [[unlikely]]
      block = Grow(pool, rounded);
    block = TakeBlock(pool, block, rounded);
    ++block->chunk->live;
    allocated_ += block->size();
    block->Hand(block->chunk->base, place_);
  }
  if (VLOG_IS_ON(10)) [[unlikely]]
    LogAllocate(size, block);
  return block;
}

void AutoGrowthBestFitAllocator::FreeImpl(Allocation* allocation) {
  auto* block = static_cast<Block*>(allocation);
  if (VLOG_IS_ON(10)) [[unlikely]]
    LogFree(block);
  std::lock_guard<platform::SpinLock> lock(mu_);
  if (block->owner != this || block->free) [[unlikely]]
    ThrowBadFree(place_, block->ptr(), block->owner != this);
  allocated_ -= block->size();
  --block->chunk->live;
  FreeBlock(block);
}

std::uint64_t AutoGrowthBestFitAllocator::ReleaseImpl(const platform::Place& place) {
  if (place != place_) return 0;
  std::lock_guard<platform::SpinLock> lock(mu_);
  const std::size_t released = ReleaseIdle();
  VLOG(1) << "auto_growth_best_fit on " << place_ << ": Release freed " << FormatBytes(released);
  return released;
}

// ---- chunks -----------------------------------------------------------------------------------

// Carries out the growth policy's plan: releases the idle chunks it names, then grows (or throws
// per memory_limit); when the underlying allocator fails, releases every idle chunk and retries
// once with the bare request.
AutoGrowthBestFitAllocator::Block* AutoGrowthBestFitAllocator::Grow(Pool& pool, std::size_t size) {
  const GrowthRequest request{pool.small, size, reserved_, high_water_};
  idle_sizes_.clear();
  if (idle_head_ != nullptr && MayReleaseIdle(options_, request)) {
    for (const Chunk* c = idle_head_; c != nullptr; c = c->idle_next)
      idle_sizes_.push_back(c->size);
  }
  const GrowthPlan plan = PlanGrowth(options_, request, idle_sizes_);
  ReleaseIdle(plan.release_idle);
  VLOG_IF(1, plan.gc_bytes > 0) << "auto_growth_best_fit on " << place_
                                << ": garbage collection freed " << FormatBytes(plan.gc_bytes);
  if (plan.over_limit) {
    throw BadAlloc(place_, size)
        .set_pool_usage(allocated_, reserved_)
        .set_memory_limit(options_.memory_limit, reserved_);
  }
  std::size_t grow = plan.grow;
  const std::size_t minimal = MinimalGrowthBytes(options_, size);
  allocation::AllocationPtr device;
  try {
    device = underlying_->Allocate(grow);
  } catch (const BadAlloc&) {
    VLOG(1) << "auto_growth_best_fit on " << place_ << ": growing by " << FormatBytes(grow)
            << " failed; releasing idle chunks and retrying with " << FormatBytes(minimal);
  }
  if (device == nullptr) {
    ReleaseIdle();
    grow = minimal;
    try {
      device = underlying_->Allocate(grow);
    } catch (BadAlloc& e) {
      e.set_pool_usage(allocated_, reserved_);
      const std::size_t unallocated = reserved_ - allocated_;
      if (unallocated >= size || unallocated * 4 >= reserved_) {
        e.set_hint(absl::StrCat(
            FormatBytes(unallocated),
            " is reserved but unallocated (fragmentation): if that is large, try setting "
            "max_split_size_mb to avoid fragmentation."));
      }
      throw;
    }
  }
  Chunk* chunk = AddChunk(pool, std::move(device), grow);
  Block* block = NewRecord();
  block->Reset(chunk->base, nullptr, chunk->size, platform::Place());
  block->prev_addr = block->next_addr = nullptr;
  block->chunk = chunk;
  block->owner = this;
  chunk->first = block;
  InsertFree(block);
  VLOG(1) << "auto_growth_best_fit on " << place_ << ": grew " << (pool.small ? "small" : "large")
          << " pool by " << FormatBytes(chunk->size) << " for " << FormatBytes(size)
          << ", reserved now " << FormatBytes(reserved_);
  return block;
}

AutoGrowthBestFitAllocator::Chunk* AutoGrowthBestFitAllocator::AddChunk(
    Pool& pool, allocation::AllocationPtr device, std::size_t size) {
  auto* chunk = new Chunk();
  chunk->size = std::max(size, RoundDown(device->size(), options_.alignment));
  chunk->base = static_cast<char*>(device->ptr());
  chunk->device = std::move(device);
  chunk->pool = &pool;
  chunk->oversize = options_.max_split_size != 0 && chunk->size >= options_.max_split_size;
  chunk->all_next = all_chunks_;
  if (all_chunks_ != nullptr) all_chunks_->all_prev = chunk;
  all_chunks_ = chunk;
  ++num_chunks_;
  reserved_ += chunk->size;
  high_water_ = std::max(high_water_, reserved_);
  const StatPool stat_pool = pool.small ? allocation::kSmallPool : allocation::kLargePool;
  Add(segment_, stat_pool, 1);
  Add(reserved_stat_, stat_pool, static_cast<std::int64_t>(chunk->size));
  if (chunk->oversize) ++oversize_segments_;
  ++num_device_alloc_;
  return chunk;
}

void AutoGrowthBestFitAllocator::ChunkFree(Chunk* chunk) {
  if (options_.free_idle_chunk) {
    ReleaseChunk(chunk);
    return;
  }
  DCHECK(!chunk->idle);
  chunk->idle = true;
  chunk->idle_next = nullptr;
  chunk->idle_prev = idle_tail_;
  (idle_tail_ != nullptr ? idle_tail_->idle_next : idle_head_) = chunk;
  idle_tail_ = chunk;
}

void AutoGrowthBestFitAllocator::UnmarkIdle(Chunk* chunk) {
  if (!chunk->idle) return;
  chunk->idle = false;
  (chunk->idle_prev != nullptr ? chunk->idle_prev->idle_next : idle_head_) = chunk->idle_next;
  (chunk->idle_next != nullptr ? chunk->idle_next->idle_prev : idle_tail_) = chunk->idle_prev;
  chunk->idle_prev = chunk->idle_next = nullptr;
}

// Returns an idle chunk to the underlying allocator.
std::size_t AutoGrowthBestFitAllocator::ReleaseChunk(Chunk* chunk) {
  DCHECK(chunk->first->free && chunk->first->next_addr == nullptr);
  RemoveFree(chunk->first);
  Recycle(chunk->first);
  UnmarkIdle(chunk);
  (chunk->all_prev != nullptr ? chunk->all_prev->all_next : all_chunks_) = chunk->all_next;
  if (chunk->all_next != nullptr) chunk->all_next->all_prev = chunk->all_prev;
  const std::size_t bytes = chunk->size;
  const StatPool pool = chunk->pool->small ? allocation::kSmallPool : allocation::kLargePool;
  Add(segment_, pool, -1);
  Add(reserved_stat_, pool, -static_cast<std::int64_t>(bytes));
  if (chunk->oversize) --oversize_segments_;
  ++num_device_free_;
  --num_chunks_;
  reserved_ -= bytes;
  VLOG(1) << "auto_growth_best_fit on " << place_ << ": released chunk of " << FormatBytes(bytes)
          << " at " << static_cast<void*>(chunk->base) << ", reserved now "
          << FormatBytes(reserved_);
  chunk->device.reset();
  delete chunk;
  return bytes;
}

std::size_t AutoGrowthBestFitAllocator::ReleaseIdle(std::size_t count) {
  std::size_t released = 0;
  for (; count > 0 && idle_head_ != nullptr; --count) released += ReleaseChunk(idle_head_);
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
  stats->oversize_segments.current += oversize_segments_;
  stats->oversize_segments.peak += oversize_segments_;
  // A configuration value, not a quantity: report it rather than add it.
  stats->max_split_size = std::max<std::int64_t>(stats->max_split_size, options_.max_split_size);
}

void AutoGrowthBestFitAllocator::ResetPeakStats() {
  std::lock_guard<platform::SpinLock> lock(mu_);
  for (StatArray* s : {&segment_, &reserved_stat_}) {
    for (auto& v : *s) v.ResetPeak();
  }
  splits_.ResetPeak();
}

void AutoGrowthBestFitAllocator::ResetAccumulatedStats() {
  std::lock_guard<platform::SpinLock> lock(mu_);
  for (StatArray* s : {&segment_, &reserved_stat_}) {
    for (auto& v : *s) v.ResetAccumulated();
  }
  splits_.ResetAccumulated();
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
