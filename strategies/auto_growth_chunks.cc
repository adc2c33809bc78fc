#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "allocation/bad_alloc.h"
#include "allocation/byte_format.h"
#include "glog/logging.h"
#include "strategies/auto_growth_internal.h"
#include "strategies/growth_policy.h"

// AutoGrowthBestFitAllocator's chunks: growing one on a cache miss (carrying out the growth
// policy's plan), the idle list, and giving chunks back to the underlying allocator.
namespace strata::strategies {

using allocation::BadAlloc;
using allocation::FormatBytes;
using allocation::StatArray;
using allocation::StatPool;

namespace {

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

}  // namespace

// Carries out the growth policy's plan: releases the idle chunks it names, then grows (or throws
// per memory_limit); when the underlying allocator fails, releases every idle chunk and retries
// once with the bare request.
AutoGrowthBestFitAllocator::Block* AutoGrowthBestFitAllocator::Grow(Pool& pool, std::size_t size) {
  std::size_t others = 0;
  if (options_.device != nullptr) {
    const std::int64_t device = options_.device->bytes.load(std::memory_order_relaxed);
    others = device > static_cast<std::int64_t>(reserved_)
                 ? static_cast<std::size_t>(device) - reserved_
                 : 0;
  }
  const GrowthRequest request{pool.small, size, reserved_, high_water_, others};
  idle_sizes_.clear();
  if (idle_head_ != nullptr && MayReleaseIdle(options_, request)) {
    for (const Chunk* c = idle_head_; c != nullptr; c = c->idle_next)
      idle_sizes_.push_back(c->size);
  }
  const GrowthPlan plan = PlanGrowth(options_, request, idle_sizes_);
  ReleaseIdle(plan.release_idle);
  if (plan.collect_elsewhere) {  // the facade releases the other pools' idle memory next
    VLOG(1) << "auto_growth_best_fit on " << place_ << ": the device is past its garbage "
            << "collection target; asking for a collection in its other pools";
    options_.device->collect.store(true, std::memory_order_relaxed);
  }
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
      if (unallocated > 0 && (unallocated >= size || unallocated * 4 >= reserved_)) {
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
  if (options_.device != nullptr) {
    options_.device->bytes.fetch_add(static_cast<std::int64_t>(chunk->size),
                                     std::memory_order_relaxed);
  }
  high_water_ = std::max(high_water_, reserved_);
  const StatPool stat_pool = pool.small ? allocation::kSmallPool : allocation::kLargePool;
  Add(segment_, stat_pool, 1);
  Add(reserved_stat_, stat_pool, static_cast<std::int64_t>(chunk->size));
  if (chunk->oversize) oversize_segments_.Increase(1);
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
  DCHECK(chunk->first->state == Block::kFree && chunk->first->next_addr == nullptr);
  RemoveFree(chunk->first);
  Recycle(chunk->first);
  UnmarkIdle(chunk);
  (chunk->all_prev != nullptr ? chunk->all_prev->all_next : all_chunks_) = chunk->all_next;
  if (chunk->all_next != nullptr) chunk->all_next->all_prev = chunk->all_prev;
  const std::size_t bytes = chunk->size;
  const StatPool pool = chunk->pool->small ? allocation::kSmallPool : allocation::kLargePool;
  Add(segment_, pool, -1);
  Add(reserved_stat_, pool, -static_cast<std::int64_t>(bytes));
  if (chunk->oversize) oversize_segments_.Decrease(1);
  ++num_device_free_;
  --num_chunks_;
  reserved_ -= bytes;
  if (options_.device != nullptr) {
    options_.device->bytes.fetch_sub(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
  }
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

}  // namespace strata::strategies
