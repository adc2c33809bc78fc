// VirtualMemoryPool, holds: a freed block keeps its pages counted until idle pages are needed, so
// that a block carved from it again does no per-page work; and the live-page count at block
// granularity.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "glog/logging.h"
#include "strategies/vmm_pool.h"
#include "strategies/vmm_pool_internal.h"

namespace strata::strategies {

using platform::Stream;

namespace {
// Adds a last free (`s`, free number `e`; 0: none) to a page's or physical page's record. Holds
// are released out of free order, so a record of the same stream keeps the newest number.
template <typename Record>
void NoteUse(Record& r, Stream s, std::uint64_t e) {
  if (e == 0) return;
  if (r.epoch == 0 || r.stream != s) {
    r.mixed = r.mixed || r.epoch != 0;
    r.stream = s;
    r.epoch = e;
  } else {
    r.epoch = std::max(r.epoch, e);
  }
}

template <typename Record>
void NoteUses(Record& r, const VirtualMemoryPool::Block& b) {
  NoteUse(r, b.stream, b.epoch);
  NoteUse(r, b.stream2, b.epoch2);
  if (b.all_streams) {
    r.mixed = true;                                 // every stream's fence must be done
    r.epoch = std::max<std::uint64_t>(r.epoch, 1);  // a use to wait for
  }
}
}  // namespace

void VirtualMemoryPool::Hold(Block* b, Block* after) {
  b->held = true;
  if (after == nullptr) after = held_tail_;
  b->held_prev = after;
  b->held_next = after != nullptr ? after->held_next : nullptr;
  (after != nullptr ? after->held_next : held_head_) = b;
  (b->held_next != nullptr ? b->held_next->held_prev : held_tail_) = b;
}

void VirtualMemoryPool::Unhold(Block* b) {
  (b->held_prev != nullptr ? b->held_prev->held_next : held_head_) = b->held_next;
  (b->held_next != nullptr ? b->held_next->held_prev : held_tail_) = b->held_prev;
  b->held = false;
  b->held_prev = b->held_next = nullptr;
}

void VirtualMemoryPool::ReleaseHold(Block* b) {
  Unhold(b);
  const std::size_t first = PageOf(b->addr()), last = PageOf(b->addr() + b->size() - 1);
  for (std::size_t i = first; i <= last; ++i) {
    Page& p = pages_[i];
    PhysPage& x = phys_[p.phys];  // a held page is mapped to the physical page it uses
    NoteUses(x, *b);
    NoteUses(p, *b);
    if (--p.live != 0) continue;
    if (x.pages == 1) {
      x.user = -1;
      LinkIdle(p.phys);
    } else if (--x.live_pages == 0) {
      LinkIdle(p.phys);
    }
  }
}

bool VirtualMemoryPool::DropHolds() {
  if (held_head_ == nullptr) return false;
  std::size_t n = 0;
  while (held_head_ != nullptr) {
    ReleaseHold(held_head_);
    ++n;
  }
  VLOG(6) << "vmm_pool: released the holds of " << n << " free block(s)";
  return true;
}

void VirtualMemoryPool::Activate(const char* addr, std::size_t size) {
  const std::size_t first = PageOf(addr), last = PageOf(addr + size - 1);
  if (last - first > 1) live_pages_ += last - first - 1;
  if (pages_[first].active++ == 0) ++live_pages_;
  if (last != first && pages_[last].active++ == 0) ++live_pages_;
  live_pages_peak_ = std::max(live_pages_peak_, live_pages_);
}

void VirtualMemoryPool::Deactivate(const char* addr, std::size_t size) {
  const std::size_t first = PageOf(addr), last = PageOf(addr + size - 1);
  if (last - first > 1) live_pages_ -= last - first - 1;
  if (--pages_[first].active == 0) --live_pages_;
  if (last != first && --pages_[last].active == 0) --live_pages_;
}

}  // namespace strata::strategies
