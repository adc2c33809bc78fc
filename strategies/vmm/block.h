// Block: a range of the virtual-memory pool's address space, live (handed out) or free (in the
// BlockMap's index), with the last uses its next user must be ordered after.
#pragma once

#include <algorithm>
#include <cstdint>

#include "allocation/allocation.h"
#include "platform/stream.h"
#include "strategies/tlsf_index.h"

namespace strata::strategies::vmm {

struct Block : allocation::Allocation, TlsfHook<Block> {
  // Address neighbours, so that a free block merges with free neighbours.
  Block* prev = nullptr;
  Block* next = nullptr;
  bool free = true;
  std::uint8_t region = 0;      // kSmallRegion or kLargeRegion: blocks merge within one only
  const void* owner = nullptr;  // the pool, while live (a second free is caught)
  // Free: the stream that freed it last and that stream's free number then (0: never used, or
  // used only by work known to be done). Live: the stream it was allocated for.
  platform::Stream stream;
  std::uint64_t epoch = 0;
  // Free, merged from neighbours last used on two streams: the other stream's last use (0: none;
  // set only while `epoch` is). `all_streams`: merged from uses on more than two streams, so a
  // new user orders after every stream.
  platform::Stream stream2;
  std::uint64_t epoch2 = 0;
  bool all_streams = false;
  // Free and "held": its pages still count it, as when it was live, so that a block carved from
  // it again needs no page work (HeldList).
  bool held = false;
  Block* held_prev = nullptr;
  Block* held_next = nullptr;

  char* addr() const { return static_cast<char*>(ptr()); }
  // Adds a last use (`s`, free number `e`; 0: none).
  void AddUse(platform::Stream s, std::uint64_t e) {
    if (e == 0) return;
    if (epoch == 0) {
      stream = s;
      epoch = e;
    } else if (stream == s) {
      epoch = std::max(epoch, e);
    } else if (epoch2 == 0) {
      stream2 = s;
      epoch2 = e;
    } else if (stream2 == s) {
      epoch2 = std::max(epoch2, e);
    } else {
      all_streams = true;
    }
  }
};

// Held free blocks, the oldest first (an intrusive list through Block::held_prev/held_next).
class HeldList {
 public:
  bool empty() const { return head_ == nullptr; }
  Block* oldest() const { return head_; }
  // Lists `b` after `after` (a part split off it keeps its age) or as the newest.
  void Hold(Block* b, Block* after = nullptr) {
    b->held = true;
    if (after == nullptr) after = tail_;
    b->held_prev = after;
    b->held_next = after != nullptr ? after->held_next : nullptr;
    (after != nullptr ? after->held_next : head_) = b;
    (b->held_next != nullptr ? b->held_next->held_prev : tail_) = b;
  }
  void Unhold(Block* b) {
    (b->held_prev != nullptr ? b->held_prev->held_next : head_) = b->held_next;
    (b->held_next != nullptr ? b->held_next->held_prev : tail_) = b->held_prev;
    b->held = false;
    b->held_prev = b->held_next = nullptr;
  }

 private:
  Block* head_ = nullptr;
  Block* tail_ = nullptr;
};

}  // namespace strata::strategies::vmm
