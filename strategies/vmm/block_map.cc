#include "strategies/vmm/block_map.h"

#include "glog/logging.h"
#include "strategies/vmm/policy.h"

namespace strata::strategies::vmm {

BlockMap::BlockMap(const platform::Place& place, StreamClock* clock, Listener* listener,
                   std::size_t max_unmerged)
    : place_(place), clock_(clock), listener_(listener), max_unmerged_(max_unmerged) {}

BlockMap::~BlockMap() {
  // Block records: live ones are the holder's leak; the rest are ours.
  for (Block* b = first_; b != nullptr;) {
    Block* next = b->next;
    if (b->free) delete b;
    b = next;
  }
  for (Block* b : spare_records_) delete b;
}

void BlockMap::Init(char* base, std::size_t bytes, std::size_t small) {
  base_ = base;
  Block* large = NewBlock(base + small, bytes - small);
  large->region = kLargeRegion;
  if (small != 0) {
    Block* front = NewBlock(base, small);
    front->region = kSmallRegion;
    front->next = large;
    large->prev = front;
    index_[kSmallRegion].Insert(front);
    first_ = front;
  } else {
    first_ = large;
  }
  index_[kLargeRegion].Insert(large);
}

Block* BlockMap::NewBlock(char* addr, std::size_t size) {
  Block* b;
  if (!spare_records_.empty()) {
    b = spare_records_.back();
    spare_records_.pop_back();
  } else {
    b = new Block();
  }
  b->Reset(addr, base_, size, place_);
  b->prev = b->next = nullptr;
  b->free = true;
  b->owner = nullptr;
  b->stream = platform::Stream{};
  b->epoch = 0;
  b->stream2 = platform::Stream{};
  b->epoch2 = 0;
  b->all_streams = false;
  b->held = false;
  b->held_prev = b->held_next = nullptr;
  return b;
}

// Splits free `block` at `at`: `block` keeps the front; returns the rest, a free block with the
// same last uses, linked after it. Neither is put in the index.
Block* BlockMap::Split(Block* block, std::size_t at) {
  Block* rest = NewBlock(block->addr() + at, block->size() - at);
  rest->stream = block->stream;
  rest->epoch = block->epoch;
  rest->stream2 = block->stream2;
  rest->epoch2 = block->epoch2;
  rest->all_streams = block->all_streams;
  rest->region = block->region;
  rest->prev = block;
  rest->next = block->next;
  if (block->next != nullptr) block->next->prev = rest;
  block->next = rest;
  block->Reset(block->addr(), base_, at, place_);
  listener_->OnSplit(block, rest);
  return rest;
}

void BlockMap::Carve(Block* block, std::size_t size) {
  if (block->size() == size) return;
  Block* rest = Split(block, size);
  index_[rest->region].Insert(rest);
}

Block* BlockMap::SplitOff(Block* block, std::size_t offset) {
  Block* rest = Split(block, offset);
  index_[block->region].Insert(block);
  return rest;
}

void BlockMap::DropDoneUses(Block* b) {
  if (b->epoch2 != 0 && clock_->Done(b->stream2, b->epoch2)) b->epoch2 = 0;
  if (b->epoch != 0 && clock_->Done(b->stream, b->epoch)) {
    b->stream = b->stream2;
    b->epoch = b->epoch2;
    b->epoch2 = 0;
  }
}

bool BlockMap::Mergeable(Block* a, Block* b, bool join_pending) {
  if (b == nullptr || !b->free || a->region != b->region) return false;
  auto one_stream = [&] {
    return a->epoch == 0 || b->epoch == 0 ||
           (a->epoch2 == 0 && b->epoch2 == 0 && !a->all_streams && !b->all_streams &&
            a->stream == b->stream);
  };
  if (one_stream()) [[likely]]
    return true;
  DropDoneUses(a);
  DropDoneUses(b);
  if (one_stream() || join_pending) return true;
  if (unmerged_.size() == max_unmerged_) unmerged_.erase(unmerged_.begin());
  unmerged_.push_back(a->next == b ? a : b);
  return false;
}

void BlockMap::Absorb(Block* into, Block* gone) {
  listener_->OnMerge(into, gone);
  into->all_streams = into->all_streams || gone->all_streams;
  into->AddUse(gone->stream, gone->epoch);
  into->AddUse(gone->stream2, gone->epoch2);
  into->next = gone->next;
  if (gone->next != nullptr) gone->next->prev = into;
  into->Reset(into->addr(), base_, into->size() + gone->size(), place_);
  gone->free = false;  // a spare record, not a free block (RetryMerges skips it)
  spare_records_.push_back(gone);
}

Block* BlockMap::InsertFree(Block* block, bool join_pending) {
  if (Mergeable(block, block->next, join_pending)) {
    index_[block->region].Remove(block->next);
    Absorb(block, block->next);
  }
  if (Mergeable(block, block->prev, join_pending)) {
    Block* prev = block->prev;
    index_[block->region].Remove(prev);
    Absorb(prev, block);
    block = prev;
  }
  block->free = true;
  index_[block->region].Insert(block);
  return block;
}

bool BlockMap::RetryMerges() {
  // Each entry is the lower of two free neighbours left apart. Entries may be stale (allocated
  // or merged since): only free blocks (all in the index here) are filed again.
  std::vector<Block*> retry;
  retry.swap(unmerged_);
  bool merged = false;
  for (Block* b : retry) {
    // Several neighbours in a row may have been left apart: merge until the next one is not free.
    while (b->free && b->next != nullptr && b->next->free && b->next->region == b->region) {
      index_[b->region].Remove(b);
      b = InsertFree(b, /*join_pending=*/true);
      merged = true;
    }
  }
  VLOG_IF(6, merged) << "vmm_pool: free neighbours of pending work on two streams merged for a "
                     << "request that found no mapped fit";
  return merged;
}

}  // namespace strata::strategies::vmm
