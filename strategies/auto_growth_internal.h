// The private types of AutoGrowthBestFitAllocator (its block records, chunks and pools), shared by
// the .cc files that implement it: auto_growth_best_fit_allocator.cc (blocks, allocate, free,
// statistics), auto_growth_chunks.cc (growth and release of chunks) and
// auto_growth_quick_reuse.cc (Options::quick_reuse). Not for use outside them.
//
// Contract: plain data and the block-record helpers every part uses; all of it is guarded by the
// allocator's lock.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/base/attributes.h"
#include "allocation/allocation.h"
#include "strategies/auto_growth_best_fit_allocator.h"
#include "strategies/tlsf_index.h"

namespace strata::strategies {

class AutoGrowthBestFitAllocator::Block : public allocation::Allocation, public TlsfHook<Block> {
 public:
  // kLive: handed out (or being set up); kFree: in its pool's index; kParked: on the quick-reuse
  // stack (in no index, not coalesced).
  static constexpr std::uint8_t kLive = 0, kFree = 1, kParked = 2;

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
  std::uint8_t state = kLive;
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
  // Quick reuse: the last free block found Frontable for a block of front_size bytes, valid while
  // the index has not changed since (index.changes() == front_changes).
  const Block* front_next = nullptr;
  std::size_t front_size = 0;
  std::uint64_t front_changes = 0;
};

namespace auto_growth {

using Block = AutoGrowthBestFitAllocator::Block;

// Whether a free block counts as an "inactive split": its chunk also holds other blocks. Cannot
// change while the block is free and unresized (free neighbours are always coalesced).
ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool IsSplit(const Block* block) {
  return block->prev_addr != nullptr || block->next_addr != nullptr;
}

// Free or parked.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool IsUnused(const Block* block) {
  return block != nullptr && block->state != Block::kLive;
}

}  // namespace auto_growth

// ---- the block-record helpers every part uses ----

inline AutoGrowthBestFitAllocator::Block* AutoGrowthBestFitAllocator::NewRecord() {
  if (Block* b = spare_records_; b != nullptr) [[likely]] {
    spare_records_ = b->next_spare;
    --num_spare_records_;
    return b;
  }
  return new Block();
}

// Takes parked `block` back for a request of its size, counting what TakeBlock would: the free
// block it stands for is block (+ next), a split unless it spans the whole chunk. It does
// exactly when its chunk has no live block (`empty`): a parked block's previous block stays
// live (or absent) and its next live, absent or free (the index does not change while it is
// parked), and freeing a chunk's last other live block while it is parked flushes it first.
inline void AutoGrowthBestFitAllocator::Unpark(Block* block, std::size_t size, bool empty) {
  block->state = Block::kLive;
  Block* next = block->next_addr;
  if (next != nullptr && next->state == Block::kFree) {
    DCHECK_EQ(empty, block->prev_addr == nullptr && next->next_addr == nullptr);
    if (!empty) {
      splits_.Shrink(size + next->size(), next->size());
    } else {
      splits_.In(next->size());  // the whole chunk, split now
    }
  } else {
    DCHECK_EQ(empty, !auto_growth::IsSplit(block));
    if (!empty) splits_.Out(size);
  }
}

// Parks when the previous block is live (or absent) and the next is live or absent ("alone"),
// or free with the stack empty and best fit agreeing ("front"); see auto_growth_quick_reuse.cc.
// Inline: FreeImpl's common case.
inline bool AutoGrowthBestFitAllocator::Park(Block* block, bool empty) {
  const std::size_t size = block->size();
  if ((!empty || !options_.free_idle_chunk) && num_quick_ != kQuickCapacity &&
      quick_credit_.parks() && !auto_growth::IsUnused(block->prev_addr)) [[likely]] {
    Block* next = block->next_addr;
    if (!auto_growth::IsUnused(next)) [[likely]] {
      // As InsertFree(block); with no live block left it is the whole chunk: no split.
      if (!empty) splits_.In(size);
      PushQuick(block, size);
      return true;
    }
    if (next->state == Block::kFree && num_quick_ == 0) {
      Pool& pool = *next->chunk->pool;
      if ((pool.front_next == next && pool.front_size == size &&
           pool.front_changes == pool.index.changes()) ||
          Frontable(pool, size, next)) {
        pool.front_next = next;  // the next such free parks without asking Frontable again
        pool.front_size = size;
        pool.front_changes = pool.index.changes();
        CountFrontPark(block, next, empty);
        PushQuick(block, size);
        return true;
      }
    }
  }
  ParkRefused(size);
  return false;
}

inline void AutoGrowthBestFitAllocator::PushQuick(Block* block, std::size_t size) {
  block->state = Block::kParked;
  quick_[num_quick_] = block;
  quick_size_[num_quick_] = size;
  ++num_quick_;
}

// Counts parking `block` as "front" (merged into free `next`) as FreeBlock's merge would; with
// `empty` (no live block left in the chunk) the merged block is the whole chunk: no split.
inline void AutoGrowthBestFitAllocator::CountFrontPark(const Block* block, const Block* next,
                                                       bool empty) {
  DCHECK_EQ(empty, block->prev_addr == nullptr && next->next_addr == nullptr);
  const std::size_t next_size = next->size();
  if (!empty) {
    splits_.Grow(next_size, next_size + block->size());
  } else {
    splits_.Out(next_size);
  }
}

inline void AutoGrowthBestFitAllocator::Recycle(Block* block) {
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

inline void AutoGrowthBestFitAllocator::InsertFree(Block* block) {
  block->chunk->pool->index.Insert(block);
  block->state = Block::kFree;
  if (auto_growth::IsSplit(block)) splits_.In(block->size());
}

inline void AutoGrowthBestFitAllocator::RemoveFree(Block* block) {
  block->chunk->pool->index.Remove(block);
  block->state = Block::kLive;
  if (auto_growth::IsSplit(block)) splits_.Out(block->size());
}

}  // namespace strata::strategies
