// AutoGrowthBestFitAllocator's quick reuse (Options::quick_reuse): a freed block may be parked,
// uncoalesced, and handed back to the next request of exactly its size without a search or
// split (a free + allocate of one size in a loop is then a few dozen instructions). The
// allocator's hot paths call TakeParked and Park only when the option is on.
//
// A parked block stands for the free block that coalescing it would have made, and the figures
// already count that block, so parking, taking back and flushing reproduce the normal paths:
// - "alone" (both neighbours live): the free block is the parked block itself, of exactly the
//   requested size, so best fit would take an exact fit too;
// - "front" (previous live, next free): the free block is parked + next. Parked only when best
//   fit would pick that range for the parked block's size (Frontable), and only onto an empty
//   stack; since the index does not change while anything is parked (every other path flushes
//   first), that stays true until it is taken back from the top or flushed.
// A block after a free or parked block is never parked (taking it back would cut a range in
// the middle).
//
// Last live block: a chunk's last live block is parked too (unless free_idle_chunk, which must
// release the chunk at once), since a free + allocate of one size in an otherwise empty chunk is
// the commonest loop of all. The coalesced block it stands for is then the whole chunk (it is
// "alone" with no neighbours, or "front" at the chunk's start with the free rest after it), which
// counts as no split. The chunk is not marked idle while the block is parked: everything that
// looks at idle chunks (any search other than a quick hit, hence growth, free_when_no_cache_hit,
// release_idle_before_new_peak and garbage collection; Release; destruction) flushes the stack
// first, and the flush marks the chunk idle. Every free that does not park flushes too, and the
// stack flushes in free order, so the idle list keeps exactly the order of the frees that made
// the chunks idle (it records an order, no time). The one difference: a chunk whose last block
// is taken back by a quick hit never goes idle, where plain coalescing has it go idle and come
// back at once (no figure or release can tell).
//
// With the option on, frees park only while parking pays (see quick_credit_ in the header).

#include <algorithm>

#include "glog/logging.h"
#include "strategies/auto_growth_internal.h"

namespace strata::strategies {

using auto_growth::IsSplit;
using auto_growth::IsUnused;
using Block = AutoGrowthBestFitAllocator::Block;
using Index = TlsfIndex<Block>;

AutoGrowthBestFitAllocator::Block* AutoGrowthBestFitAllocator::TakeParked(std::size_t size) {
  if (num_quick_ != 0) {
    // The top, or below it only "alone" blocks: best fit would take an exact fit whatever else is
    // parked.
    for (int i = num_quick_ - 1; i >= 0; --i) {
      Block* block = quick_[i];
      if (quick_size_[i] == size && (i == num_quick_ - 1 || block->next_addr == nullptr ||
                                     block->next_addr->state != Block::kFree)) {
        for (int j = i + 1; j < num_quick_; ++j) {
          quick_[j - 1] = quick_[j];
          quick_size_[j - 1] = quick_size_[j];
        }
        --num_quick_;
        Unpark(block, size, block->chunk->live == 0);
        quick_credit_.Hit();
        return block;
      }
    }
    FlushQuick();
  }
  // While parking is off, a request for the size a free could not park is a hit it would have
  // had.
  quick_credit_.Missed(size);
  return nullptr;
}

// A free that does not park (Park's refusal): remembers its size, and coalesces what is parked
// (the index may change now, and chunks parked empty go idle first); the caller then frees
// normally.
void AutoGrowthBestFitAllocator::ParkRefused(std::size_t size) {
  quick_credit_.Refused(size);
  if (num_quick_ != 0) FlushQuick();
}

// Whether `block` (previous live, `next` free, the stack empty) may be parked as "front": best
// fit for block's size would take the range block + next and split it there, leaving the index
// as it is now. Either next lies in a bucket below the size's (a large block before a small
// rest: a 16 MiB block at the start of a 20 MiB chunk), at its head, and no bucket from the
// size's up to the range's holds anything; or next is alone in the first non-empty bucket from
// the size's, and no other bucket up to the range's holds anything.
bool AutoGrowthBestFitAllocator::Frontable(const Pool& pool, std::size_t size,
                                           const Block* next) const {
  if (next->chunk->oversize) return false;
  const std::size_t range_size = size + next->size();
  // Best fit must consider the range (not above max_split_size - 1) and split it (an ordinary
  // request); otherwise it would hand out the whole range, or look elsewhere.
  if (!pool.small && options_.max_split_size != 0 && range_size >= options_.max_split_size) {
    return false;
  }
  const Index::Bucket own = Index::MapSize(size);
  const int range = Index::Ordinal(Index::MapSize(range_size));
  const int at = Index::Ordinal(Index::BucketOf(next));
  if (at < Index::Ordinal(own)) {
    // Taking the range back files the rest (next again) at the head of its bucket: next must be
    // there already, for the bucket's order (which breaks best fit's ties) to stay the same.
    return next->tlsf_prev == nullptr && pool.index.FirstNonEmpty(own) > range;
  }
  if (!Index::Alone(next) || pool.index.FirstNonEmpty(own) != at) return false;
  return range == at || pool.index.FirstNonEmpty({next->tlsf_fl, next->tlsf_sl + 1}) > range;
}

// Turns a parked block into the free block it stands for (already counted). When that is the
// whole chunk (the chunk's last live block was parked), the chunk goes idle now, as FreeBlock
// would have made it at the free: see "last live block" above.
void AutoGrowthBestFitAllocator::Unpark(Block* block) {
  block->state = Block::kLive;
  Block* next = block->next_addr;
  if (next != nullptr && next->state == Block::kFree) {
    next->prev_addr = block->prev_addr;
    (block->prev_addr != nullptr ? block->prev_addr->next_addr : block->chunk->first) = next;
    next->Move(block->bytes(), block->size() + next->size());
    next->chunk->pool->index.Refile(next);
    Recycle(block);
    block = next;
  } else {
    block->chunk->pool->index.Insert(block);
    block->state = Block::kFree;
  }
  if (block->prev_addr == nullptr && block->next_addr == nullptr) [[unlikely]]
    ChunkFree(block->chunk);
}

void AutoGrowthBestFitAllocator::FlushQuick() {
  for (int i = 0; i < num_quick_; ++i) Unpark(quick_[i]);
  quick_credit_.Unused(num_quick_);  // parked for nothing
  num_quick_ = 0;
}

}  // namespace strata::strategies
