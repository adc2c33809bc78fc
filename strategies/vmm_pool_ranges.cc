// VirtualMemoryPool, ranges: what a block's range of address space needs from the pages (live
// counts, filing parked blocks, holds, mapping and the physical pages behind it).
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocation/bad_alloc.h"
#include "allocation/byte_format.h"
#include "glog/logging.h"
#include "strategies/vmm_pool.h"

namespace strata::strategies {

using allocation::BadAlloc;
using platform::Stream;
using vmm::AddressPage;
using vmm::PhysPage;
using vmm::PhysState;

namespace {
// Adds a block's last uses to a page's or physical page's record.
void NoteUses(vmm::LastUse& r, const vmm::Block& b, std::uint64_t next_checkpoint) {
  r.Note(b.stream, b.epoch, next_checkpoint);
  r.Note(b.stream2, b.epoch2, next_checkpoint);
  if (b.all_streams) r.MarkMixed(next_checkpoint);  // every stream's fence must be done
}
}  // namespace

void VirtualMemoryPool::AddLive(char* addr, std::size_t size, Stream stream) {
  const std::size_t first = PageOf(addr), last = PageOf(addr + size - 1);
  // Pages mapped elsewhere too: their last users may have used them through another address
  // than the block's, which the block's own last use does not cover. One device-side wait per
  // run of pages last freed by one stream. This holds for a page that a neighbouring block
  // already uses as well (a cut inside the page): that block's stream was ordered after the
  // other addresses' work when it took the page, but this block's stream was not.
  Stream after;
  std::uint64_t after_epoch = 0;
  for (std::size_t i = first; i <= last; ++i) {
    AddressPage& p = pages_.page(i);
    const bool shared = p.live++ != 0;  // a neighbour's live or held block touches it
    if (p.phys < 0) continue;
    PhysPage& phys_page = pages_.phys(p.phys);
    if (phys_page.extent()) {  // mapped here only, so the block's own order covers it
      if (!shared && phys_page.live_pages++ == 0) pages_.Move(p.phys, PhysState::kInUse);
      continue;
    }
    if (!shared) {
      if (phys_page.user >= 0) continue;  // another range uses it: MapRange remaps this page
      pages_.Move(p.phys, PhysState::kInUse);
      phys_page.user = static_cast<std::int32_t>(i);
    }
    const vmm::LastUse& u = phys_page.use;
    if (phys_page.maps == 1 || u.epoch == 0 || (!u.mixed && u.stream == stream)) [[likely]]
      continue;
    if (u.mixed) {
      clock_.OrderAfter(u, stream);
    } else if (after_epoch != 0 && u.stream == after) {
      after_epoch = std::max(after_epoch, u.epoch);
    } else {
      if (after_epoch != 0) clock_.OrderAfter(after, after_epoch, stream);
      after = u.stream;
      after_epoch = u.epoch;
    }
  }
  if (after_epoch != 0) clock_.OrderAfter(after, after_epoch, stream);
}

void VirtualMemoryPool::UndoLive(char* addr, std::size_t size) {
  const std::size_t first = PageOf(addr), last = PageOf(addr + size - 1);
  for (std::size_t i = first; i <= last; ++i) {
    AddressPage& p = pages_.page(i);
    if (--p.live != 0) continue;
    if (p.phys < 0) continue;
    PhysPage& phys_page = pages_.phys(p.phys);
    if (phys_page.extent()) {
      if (--phys_page.live_pages == 0) pages_.Move(p.phys, PhysState::kIdle);
    } else if (phys_page.user == static_cast<std::int32_t>(i)) {
      phys_page.user = -1;
      pages_.Move(p.phys, PhysState::kIdle);
    }
  }
}

std::size_t VirtualMemoryPool::Missing(const char* addr, std::size_t size,
                                       vmm::StreamClock::Scan* scan) {
  const std::size_t first = PageOf(addr), last = PageOf(addr + size - 1);
  std::size_t missing = 0;
  for (std::size_t i = first; i <= last; ++i) {
    const AddressPage& p = pages_.page(i);
    if (p.phys < 0) {
      ++missing;
      continue;
    }
    const PhysPage& phys_page = pages_.phys(p.phys);
    if (phys_page.extent() || phys_page.user == static_cast<std::int32_t>(i))
      continue;  // extents: here only
    if (phys_page.user < 0 && (phys_page.maps == 1 || !pages_.MappedBelow(phys_page, first, i)))
      continue;
    // Used through another range, or mapped lower in this one too (AddLive gives it to the
    // lower page): this mapping goes, once the work through it is done.
    if (phys_page.user >= 0 && !held_.empty()) held_conflict_ = true;
    if (!clock_.Done(p.use, scan)) return vmm::kBlocked;
    ++missing;
  }
  return missing;
}

std::size_t VirtualMemoryPool::ClearOffset(const Block& b, std::size_t size,
                                           vmm::StreamClock::Scan* scan) {
  const std::size_t begin = b.addr() - pages_.base(), end = begin + b.size();
  std::size_t start = begin;  // of the window [start, start + size), from the base
  for (std::size_t i = begin / page_;; ++i) {
    if (start + size > end) return vmm::kBlocked;
    if (i * page_ >= start + size) return start - begin;  // every page of the window is clear
    const AddressPage& p = pages_.page(i);
    if (p.phys < 0) continue;
    const PhysPage& phys_page = pages_.phys(p.phys);
    const bool shared = !phys_page.extent() &&
                        ((phys_page.user >= 0 && phys_page.user != static_cast<std::int32_t>(i)) ||
                         (phys_page.user < 0 && phys_page.maps > 1));
    if (shared && phys_page.user >= 0 && !held_.empty()) held_conflict_ = true;
    if (shared && !clock_.Done(p.use, scan)) start = (i + 1) * page_;
  }
}

void VirtualMemoryPool::MapRange(char* addr, std::size_t size, std::size_t request,
                                 std::size_t missing, Stream stream, bool new_peak_after_steady) {
  if (missing == 0) [[likely]]
    return;
  try {
    MapMissing(addr, size, request, missing, stream, new_peak_after_steady);
  } catch (const platform::RuntimeError& e) {
    // A refused create or map (out of memory for page tables, say) is an allocation failure
    // that recovery can act on (release caches, retry), not a broken runtime.
    throw BadAlloc(place_, request)
        .set_pool_usage(allocated_, pages_.physical_bytes())
        .set_hint(absl::StrCat("The device refused to map memory: ", e.what()));
  }
}

void VirtualMemoryPool::MapMissing(char* addr, std::size_t size, std::size_t request,
                                   std::size_t missing, Stream stream, bool new_peak_after_steady) {
  const std::size_t first = PageOf(addr), last = PageOf(addr + size - 1);
  // In one piece where policy allows: fewer device calls. (A new peak's extents also need room:
  // asked last, since it queries the device.)
  if (vmm::UseExtents({.missing = missing,
                       .max_extent_pages = options_.max_extent_pages,
                       .freed_large = freed_large_,
                       .new_peak_after_steady = new_peak_after_steady,
                       .have_spares = pages_.has_spares(),
                       .should_stitch = ShouldStitch(missing * page_),
                       .capped = pages_.memory_limit() != 0}) &&
      (!freed_large_ || RoomForExtents(missing * page_))) {
    missing -= pages_.MapExtents(first, last, options_.max_extent_pages);
    if (missing == 0) return;
  }
  taken_.clear();
  if (!TakePhysical(missing, stream, &taken_)) ThrowOutOfMemory(request, missing);
  try {
    for (std::size_t i = first; i <= last; ++i) {
      const AddressPage& p = pages_.page(i);
      if (p.phys >= 0 && (pages_.phys(p.phys).extent() ||
                          pages_.phys(p.phys).user == static_cast<std::int32_t>(i))) {
        continue;
      }
      if (p.phys >= 0) {
        pages_.Unmap(i);  // Missing checked that the work through it is done
        ++window_.remaps;
      }
      if (taken_.empty() && !TakePhysical(1, stream, &taken_)) {
        throw BadAlloc(place_, request).set_pool_usage(allocated_, pages_.physical_bytes());
      }
      const std::int32_t phys_id = taken_.back();
      pages_.MapAt(i, phys_id);
      taken_.pop_back();
      pages_.phys(phys_id).user = static_cast<std::int32_t>(i);
      pages_.Move(phys_id, PhysState::kInUse);
    }
  } catch (...) {
    PutBack(taken_);  // kept for the next growth
    throw;
  }
}

bool VirtualMemoryPool::RoomForExtents(std::size_t need) const {
  std::size_t free_bytes = 0, total = 0;
  runtime_->MemInfo(place_.device(), &free_bytes, &total);
  std::size_t capacity = total;
  if (const std::size_t limit = pages_.memory_limit(); limit != 0) {
    const std::size_t physical = pages_.physical_bytes() + pages_.held_elsewhere();
    free_bytes = std::min(free_bytes, limit > physical ? limit - physical : 0);
    capacity = std::min(capacity, limit);
  }
  return vmm::RoomForExtents(need, free_bytes, capacity, options_.extent_headroom_divisor);
}

void VirtualMemoryPool::ThrowOutOfMemory(std::size_t request, std::size_t pages) {
  std::size_t free_bytes = 0, total = 0;
  runtime_->MemInfo(place_.device(), &free_bytes, &total);
  BadAlloc e(place_, request);
  const std::size_t physical = pages_.physical_bytes();
  e.set_device_memory(total, free_bytes).set_pool_usage(allocated_, physical);
  if (pages_.PassesLimit(pages * page_)) {
    e.set_memory_limit(pages_.memory_limit(), physical + pages_.held_elsewhere());
  }
  throw e;
}

void VirtualMemoryPool::PutBack(const std::vector<std::int32_t>& taken) {
  for (std::int32_t phys_id : taken) {
    if (pages_.phys(phys_id).maps == 0) {
      pages_.AddSpare(phys_id);
    } else {
      pages_.Move(phys_id, PhysState::kIdle);
    }
  }
}

bool VirtualMemoryPool::TakePhysical(std::size_t count, Stream stream,
                                     std::vector<std::int32_t>* out) {
  while (out->size() < count && pages_.has_spares()) out->push_back(pages_.TakeSpare());
  // Stitching: idle physical pages before more device memory, when more would pass the limit
  // or hold more than the slack above the most pages live blocks ever touched at once. They
  // keep their old mappings, so the range they came from takes them back without driver calls
  // once this one is free again: in a repeating workload the remapping stops after a step or
  // two. Then idle extents whose work is done make way for the pages still missing.
  const std::size_t need = (count - out->size()) * page_;
  if (need != 0 && ShouldStitch(need)) {
    DropHolds();  // free blocks' pages become idle, to be borrowed
    window_.remaps += idle_.Borrow(count - out->size(), stream, out);
    if (out->size() < count) idle_.DissolveExtents(count - out->size());
  }
  bool grew = false;
  bool retried = false;
  while (out->size() < count) {
    const std::int32_t phys_id = pages_.Create();
    if (phys_id < 0) {
      // The device (or the limit) is full: every idle page whose work is done, then one more
      // create (a refusal may pass: memory given back meanwhile, a transient driver error),
      // then fail.
      DropHolds();
      if (idle_.Borrow(count - out->size(), stream, out) == 0 &&
          idle_.DissolveExtents(count - out->size()) == 0) {
        if (!retried) {
          retried = true;
          continue;
        }
        PutBack(*out);
        out->clear();
        return false;
      }
      continue;
    }
    grew = true;
    out->push_back(phys_id);
  }
  if (grew) {
    VLOG(2) << "vmm_pool on " << place_ << ": " << allocation::FormatBytes(pages_.physical_bytes())
            << " physical; pages " << live_.live() << " live, " << live_.peak() << " at most, for "
            << allocated_ << " bytes allocated";
  }
  return true;
}

// Filing parked blocks: each becomes a free block that holds its pages.
void VirtualMemoryPool::FlushParked() {
  for (Block* block : parked_) File(block);
  parked_.clear();
}

void VirtualMemoryPool::File(Block* block) {
  Deactivate(block->addr(), block->size());
  held_.Hold(block);  // its pages stay counted: a block carved here again does no page work
  blocks_.InsertFree(block);
}

void VirtualMemoryPool::FlushParkedOf(Stream stream) {
  std::size_t kept = 0;
  for (Block* block : parked_) {
    if (block->stream != stream) {
      parked_[kept++] = block;  // another stream's: parked until that stream misses
      continue;
    }
    File(block);
  }
  parked_.resize(kept);
}

void VirtualMemoryPool::ReleaseHold(Block* b) {
  held_.Unhold(b);
  const std::size_t first = PageOf(b->addr()), last = PageOf(b->addr() + b->size() - 1);
  const std::uint64_t next_checkpoint = clock_.next_checkpoint();
  for (std::size_t i = first; i <= last; ++i) {
    AddressPage& p = pages_.page(i);
    PhysPage& phys_page =
        pages_.phys(p.phys);  // a held page is mapped to the physical page it uses
    NoteUses(phys_page.use, *b, next_checkpoint);
    NoteUses(p.use, *b, next_checkpoint);
    if (--p.live != 0) continue;
    if (!phys_page.extent()) {
      phys_page.user = -1;
      pages_.Move(p.phys, PhysState::kIdle);
    } else if (--phys_page.live_pages == 0) {
      pages_.Move(p.phys, PhysState::kIdle);
    }
  }
}

bool VirtualMemoryPool::DropHolds() {
  if (held_.empty()) return false;
  std::size_t n = 0;
  while (!held_.empty()) {
    ReleaseHold(held_.oldest());
    ++n;
  }
  VLOG(6) << "vmm_pool: released the holds of " << n << " free block(s)";
  return true;
}

void VirtualMemoryPool::OnSplit(Block* front, Block* rest) {
  if (!front->held) return;
  held_.Hold(rest, front);
  // Both halves touch the page the cut falls in: it counts each. (Pages count from the base,
  // which is aligned to the granularity only: not an absolute address's alignment.)
  if (PageOf(rest->addr() - 1) == PageOf(rest->addr())) {
    ++pages_.page(PageOf(rest->addr())).live;
  }
}

void VirtualMemoryPool::OnMerge(Block* into, Block* gone) {
  // One hold for the whole block, or none: a block without one may have pages unmapped or used
  // elsewhere.
  if (into->held != gone->held) ReleaseHold(into->held ? into : gone);
  if (gone->held) {
    held_.Unhold(gone);
    if (PageOf(into->addr() + into->size() - 1) == PageOf(gone->addr())) {
      --pages_.page(PageOf(gone->addr())).live;  // counted for both, now for one block
    }
  }
}

}  // namespace strata::strategies
