// BlockMap: the carve of the virtual-memory pool's address space into blocks. Split and merge of
// address neighbours, one TLSF index of free blocks per region, block records reused.
//
// Owns: the block records (free ones, and spare records; live blocks belong to their holder
// until freed), the free-block indexes, and the pairs of free neighbours left apart because their
// last uses are pending on two streams (for RetryMerges).
//
// A free block merges with a free neighbour of its region when the merged block can keep their
// last uses without a wait: one stream, or none (a record of work seen done is dropped first, a
// query). Free neighbours of different streams left apart for good would split the free space
// by stream: a large request then fits nowhere mapped, and the pool maps new ranges every step.
// The Listener hears every split and merge, before the blocks change, so that the pool keeps
// its page counts of held blocks.
//
// Contract: not thread-safe (the pool's lock). Throws only what the Listener or the StreamClock
// throws, and std::bad_alloc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "platform/place.h"
#include "strategies/tlsf_index.h"
#include "strategies/vmm/block.h"
#include "strategies/vmm/stream_clock.h"

namespace strata::strategies::vmm {

class BlockMap {
 public:
  class Listener {
   public:
    // `front` (free, out of the index) was split at its new size; `rest` follows it, with the
    // same last uses and hold state unset.
    virtual void OnSplit(Block* front, Block* rest) = 0;
    // Free `gone` (which follows `into`) is about to be merged into `into`.
    virtual void OnMerge(Block* into, Block* gone) = 0;

   protected:
    ~Listener() = default;
  };

  // `max_unmerged`: how many pairs of free neighbours left apart are remembered (the oldest go
  // first: they are the likeliest to merge unaided).
  BlockMap(const platform::Place& place, StreamClock* clock, Listener* listener,
           std::size_t max_unmerged);
  ~BlockMap();
  BlockMap(const BlockMap&) = delete;
  BlockMap& operator=(const BlockMap&) = delete;

  // One free block per region: [base, base + small) for small blocks (when small != 0) and the
  // rest for large ones.
  void Init(char* base, std::size_t bytes, std::size_t small);
  // The block at the base: merges keep the lower block, so it lives as long as the map.
  Block* first() const { return first_; }
  TlsfIndex<Block>& index(std::uint8_t region) { return index_[region]; }

  // Splits the front `size` bytes off free `block` (out of the index); the rest is filed.
  void Carve(Block* block, std::size_t size);
  // Splits free `block` (out of the index) at `offset`: the front is filed; returns the rest.
  Block* SplitOff(Block* block, std::size_t offset);
  // Files free `block`, merged with its free neighbours (see above); with `join_pending`, also
  // neighbours whose uses on different streams are pending (the merged block keeps up to two
  // streams' last uses, or "every stream" beyond). Returns the block filed (`block`, or the
  // neighbour before it that absorbed it).
  Block* InsertFree(Block* block, bool join_pending = false);
  // Files again, with join_pending, the free blocks left apart from a free neighbour; returns
  // whether there were any. For a request that found no mapped fit.
  bool RetryMerges();
  bool has_unmerged() const { return !unmerged_.empty(); }

 private:
  Block* NewBlock(char* addr, std::size_t size);
  Block* Split(Block* block, std::size_t at);
  // Drops free block `b`'s last uses whose work is done (queries).
  void DropDoneUses(Block* b);
  bool Mergeable(Block* a, Block* b, bool join_pending);
  void Absorb(Block* into, Block* gone);

  const platform::Place place_;
  StreamClock* const clock_;
  Listener* const listener_;
  const std::size_t max_unmerged_;
  char* base_ = nullptr;
  Block* first_ = nullptr;
  TlsfIndex<Block> index_[2];
  std::vector<Block*> spare_records_;
  std::vector<Block*> unmerged_;  // the lower of two free neighbours left apart, the newest last
};

}  // namespace strata::strategies::vmm
