// VirtualMemoryPool, pages: live-block counts, the idle list, mapping and stitching.
#include <algorithm>
#include <array>
#include <mutex>
#include <vector>

#include "allocation/bad_alloc.h"
#include "glog/logging.h"
#include "reporting/byte_format.h"
#include "strategies/vmm_pool.h"
#include "strategies/vmm_pool_internal.h"

namespace strata::strategies {

using allocation::BadAlloc;
using allocation::FormatBytes;
using platform::PhysicalMemory;
using platform::Stream;

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
    Page& p = pages_[i];
    const bool shared = p.live++ != 0;  // a neighbour's live or held block touches it
    if (p.phys < 0) continue;
    PhysPage& x = phys_[p.phys];
    if (x.pages > 1) {  // an extent: mapped here only, so the block's own order covers it
      if (!shared && x.live_pages++ == 0) UnlinkIdle(p.phys);
      continue;
    }
    if (!shared) {
      if (x.user >= 0) continue;  // another range uses it: MapRange remaps this page
      UnlinkIdle(p.phys);
      x.user = static_cast<std::int32_t>(i);
    }
    if (x.maps == 1 || x.epoch == 0 || (!x.mixed && x.stream == stream)) [[likely]]
      continue;
    if (x.mixed) {
      OrderAfterPhys(x, stream);
    } else if (after_epoch != 0 && x.stream == after) {
      after_epoch = std::max(after_epoch, x.epoch);
    } else {
      if (after_epoch != 0) OrderAfter(after, after_epoch, stream);
      after = x.stream;
      after_epoch = x.epoch;
    }
  }
  if (after_epoch != 0) OrderAfter(after, after_epoch, stream);
}

void VirtualMemoryPool::UndoLive(char* addr, std::size_t size) {
  const std::size_t first = PageOf(addr), last = PageOf(addr + size - 1);
  for (std::size_t i = first; i <= last; ++i) {
    Page& p = pages_[i];
    if (--p.live != 0) continue;
    if (p.phys < 0) continue;
    PhysPage& x = phys_[p.phys];
    if (x.pages > 1) {
      if (--x.live_pages == 0) LinkIdle(p.phys);
    } else if (x.user == static_cast<std::int32_t>(i)) {
      x.user = -1;
      LinkIdle(p.phys);
    }
  }
}

void VirtualMemoryPool::LinkIdle(std::int32_t phys) {
  PhysPage& x = phys_[phys];
  x.idle = true;
  x.idle_next = -1;
  x.idle_prev = idle_tail_;
  (idle_tail_ >= 0 ? phys_[idle_tail_].idle_next : idle_head_) = phys;
  idle_tail_ = phys;
}

void VirtualMemoryPool::UnlinkIdle(std::int32_t phys) {
  PhysPage& x = phys_[phys];
  if (!x.idle) return;
  (x.idle_prev >= 0 ? phys_[x.idle_prev].idle_next : idle_head_) = x.idle_next;
  (x.idle_next >= 0 ? phys_[x.idle_next].idle_prev : idle_tail_) = x.idle_prev;
  x.idle = false;
  x.idle_prev = x.idle_next = -1;
}

std::size_t VirtualMemoryPool::Missing(const char* addr, std::size_t size) {
  const std::size_t first = PageOf(addr), last = PageOf(addr + size - 1);
  std::size_t missing = 0;
  ReclaimScan scan;  // one all-streams answer for every mixed page of the range
  for (std::size_t i = first; i <= last; ++i) {
    const Page& p = pages_[i];
    if (p.phys < 0) {
      ++missing;
      continue;
    }
    const PhysPage& x = phys_[p.phys];
    if (x.pages > 1 || x.user == static_cast<std::int32_t>(i)) continue;  // extents: here only
    if (x.user < 0 && (x.maps == 1 || !MappedBelow(x, first, i))) continue;
    // Used through another range, or mapped lower in this one too (AddLive gives it to the
    // lower page): this mapping goes, once the work through it is done.
    if (x.user >= 0 && held_head_ != nullptr) held_conflict_ = true;
    if (!PageDone(i, &scan)) return kBlocked;
    ++missing;
  }
  return missing;
}

std::size_t VirtualMemoryPool::ClearOffset(const Block& b, std::size_t size) {
  const std::size_t begin = b.addr() - base_, end = begin + b.size();
  std::size_t start = begin;  // of the window [start, start + size), from base_
  ReclaimScan scan;
  for (std::size_t i = begin >> page_shift_;; ++i) {
    if (start + size > end) return kBlocked;
    if (i * page_ >= start + size) return start - begin;  // every page of the window is clear
    const Page& p = pages_[i];
    if (p.phys < 0) continue;
    const PhysPage& x = phys_[p.phys];
    const bool shared = x.pages == 1 && ((x.user >= 0 && x.user != static_cast<std::int32_t>(i)) ||
                                         (x.user < 0 && x.maps > 1));
    if (shared && x.user >= 0 && held_head_ != nullptr) held_conflict_ = true;
    if (shared && !PageDone(i, &scan)) start = (i + 1) * page_;
  }
}

bool VirtualMemoryPool::MappedBelow(const PhysPage& x, std::size_t first, std::size_t i) const {
  for (std::int32_t j = x.first_map; j >= 0; j = pages_[j].next_alias) {
    if (static_cast<std::size_t>(j) >= first && static_cast<std::size_t>(j) < i) return true;
  }
  return false;
}

void VirtualMemoryPool::MapAt(std::size_t page, std::int32_t phys) {
  PhysPage& x = phys_[phys];
  runtime_->Map(base_ + page * page_, page_, x.mem, 0, place_.device());
  Page& p = pages_[page];
  p.phys = phys;
  p.next_alias = x.first_map;
  x.first_map = static_cast<std::int32_t>(page);
  ++x.maps;
  ++num_maps_;
  mapped_ += page_;
}

void VirtualMemoryPool::Unmap(std::size_t page) {
  Page& p = pages_[page];
  PhysPage& x = phys_[p.phys];
  runtime_->Unmap(base_ + page * page_, page_);
  std::int32_t* link = &x.first_map;
  while (*link != static_cast<std::int32_t>(page)) link = &pages_[*link].next_alias;
  *link = p.next_alias;
  p.next_alias = -1;
  p.phys = -1;
  p.stream = Stream{};  // no work through this address any more
  p.epoch = 0;
  p.mixed = false;
  --x.maps;
  ++num_unmaps_;
  mapped_ -= page_;
}

void VirtualMemoryPool::MapRange(char* addr, std::size_t size, std::size_t request,
                                 std::size_t missing, Stream stream) {
  if (missing == 0) [[likely]]
    return;
  const std::size_t first = PageOf(addr), last = PageOf(addr + size - 1);
  // Growth before the first free of a block of a page or more (a model's set-up: weights and
  // buffers, which stay; set-up frees only small temporaries), where the pool may grow by every
  // page missing: in one piece, for fewer device calls. Once large blocks come and go, pages
  // stay single: an extent cannot be stitched into another range, nor given back while its last
  // work is pending (the host runs ahead of the device), so extents made then cost memory
  // (gpt2_train replayed with device lag: 11 % more).
  if (missing >= 2 && options_.max_extent_pages > 1 && !freed_large_ && spare_.empty() &&
      !ShouldStitch(missing * page_)) {
    missing -= MapExtents(first, last);
    if (missing == 0) return;
  }
  taken_.clear();
  if (!TakePhysical(missing, stream, &taken_)) ThrowOutOfMemory(request, missing);
  try {
    for (std::size_t i = first; i <= last; ++i) {
      const Page& p = pages_[i];
      if (p.phys >= 0 && (phys_[p.phys].pages > 1 || phys_[p.phys].user == static_cast<int>(i))) {
        continue;
      }
      if (p.phys >= 0) Unmap(i);  // Missing checked that the work through it is done
      if (taken_.empty() && !TakePhysical(1, stream, &taken_)) {
        throw BadAlloc(place_, request).set_pool_usage(allocated_, physical_);
      }
      const std::int32_t y = taken_.back();
      MapAt(i, y);
      taken_.pop_back();
      phys_[y].user = static_cast<std::int32_t>(i);
    }
  } catch (...) {
    PutBack(taken_);  // kept for the next growth
    throw;
  }
}

void VirtualMemoryPool::ThrowOutOfMemory(std::size_t request, std::size_t pages) {
  std::size_t free_bytes = 0, total = 0;
  runtime_->MemInfo(place_.device(), &free_bytes, &total);
  BadAlloc e(place_, request);
  e.set_device_memory(total, free_bytes).set_pool_usage(allocated_, physical_);
  if (memory_limit_ != 0 && physical_ + pages * page_ > memory_limit_) {
    e.set_memory_limit(memory_limit_, physical_);
  }
  throw e;
}

void VirtualMemoryPool::PutBack(const std::vector<std::int32_t>& taken) {
  for (std::int32_t y : taken) {
    if (phys_[y].maps == 0) {
      spare_.push_back(y);
    } else {
      LinkIdle(y);
    }
  }
}

std::int32_t VirtualMemoryPool::CreatePhys(std::size_t pages) {
  const std::size_t bytes = pages * page_;
  if (memory_limit_ != 0 && physical_ + bytes > memory_limit_) return -1;
  const PhysicalMemory m = runtime_->CreatePhysical(place_.device(), bytes);
  if (!m.valid()) return -1;
  std::int32_t slot;
  if (!free_phys_.empty()) {
    slot = free_phys_.back();
    free_phys_.pop_back();
  } else {
    slot = static_cast<std::int32_t>(phys_.size());
    phys_.emplace_back();
  }
  phys_[slot] = PhysPage{};
  phys_[slot].mem = m;
  phys_[slot].pages = static_cast<std::uint32_t>(pages);
  ++num_creates_;
  physical_ += bytes;
  segment_.Increase(1);
  reserved_stat_.Increase(static_cast<std::int64_t>(bytes));
  return slot;
}

void VirtualMemoryPool::ReleasePhys(std::int32_t y) {
  PhysPage& x = phys_[y];
  const std::size_t bytes = x.pages * page_;
  runtime_->ReleasePhysical(x.mem);
  x = PhysPage{};
  free_phys_.push_back(y);
  ++num_releases_;
  physical_ -= bytes;
  segment_.Decrease(1);
  reserved_stat_.Decrease(static_cast<std::int64_t>(bytes));
}

bool VirtualMemoryPool::ShouldStitch(std::size_t need) const {
  const std::size_t live_peak = live_pages_peak_ * page_;
  if (memory_limit_ != 0 && physical_ + need > memory_limit_) return true;
  return physical_ + need >
         live_peak + live_peak / 1000 * options_.stitch_slack_permille + 2 * page_;
}

bool VirtualMemoryPool::TakePhysical(std::size_t count, Stream stream,
                                     std::vector<std::int32_t>* out) {
  while (out->size() < count && !spare_.empty()) {  // their work is complete
    out->push_back(spare_.back());
    spare_.pop_back();
  }
  // Stitching: idle physical pages before more device memory, when more would pass the limit
  // or hold more than the slack above the most pages live blocks ever touched at once. They
  // keep their old mappings, so the range they came from takes them back without driver calls
  // once this one is free again: in a repeating workload the remapping stops after a step or
  // two. The slack spares some of the mapping a first step does.
  // Then idle extents whose work is done make way for the pages still missing.
  const std::size_t need = (count - out->size()) * page_;
  if (need != 0 && ShouldStitch(need)) {
    DropHolds();  // free blocks' pages become idle, to be borrowed
    Borrow(count - out->size(), stream, out);
    if (out->size() < count) DissolveExtents(count - out->size());
  }
  bool grew = false;
  while (out->size() < count) {
    const std::int32_t y = CreatePhys();
    if (y < 0) {
      // The device (or the limit) is full: every idle page whose work is done, then fail.
      DropHolds();
      if (Borrow(count - out->size(), stream, out) == 0 &&
          DissolveExtents(count - out->size()) == 0) {
        PutBack(*out);
        out->clear();
        return false;
      }
      continue;
    }
    grew = true;
    out->push_back(y);
  }
  if (grew) {
    VLOG(2) << "vmm_pool on " << place_ << ": " << FormatBytes(physical_) << " physical; pages "
            << live_pages_ << " live, " << live_pages_peak_ << " at most, for " << allocated_
            << " bytes allocated";
  }
  return true;
}

bool VirtualMemoryPool::UseDone(Stream stream, std::uint64_t epoch, bool mixed, ReclaimScan* scan) {
  if (epoch == 0) return true;
  if (!mixed) {
    if (Done(stream, epoch)) return true;
    Fence(stream);
    return false;
  }
  if (!scan->mixed_checked) {
    scan->mixed_done = AllStreamsDone();
    scan->mixed_checked = true;
  }
  return scan->mixed_done;
}

bool VirtualMemoryPool::PhysDone(const PhysPage& x, ReclaimScan* scan) {
  return UseDone(x.stream, x.epoch, x.mixed, scan);
}

bool VirtualMemoryPool::PageDone(std::size_t i, ReclaimScan* scan) {
  const Page& p = pages_[i];
  return UseDone(p.stream, p.epoch, p.mixed, scan);
}

std::size_t VirtualMemoryPool::Borrow(std::size_t count, Stream stream,
                                      std::vector<std::int32_t>* out) {
  std::size_t got = 0;
  ReclaimScan scan;
  // The longest idle first: in a repeating workload, the pages most recently freed are the
  // likeliest to be needed again where they are.
  for (std::int32_t y = idle_head_; y >= 0 && got < count;) {
    PhysPage& x = phys_[y];
    const std::int32_t next = x.idle_next;
    // Pages last freed on `stream` serve it at once (stream order); they keep their record,
    // so that another stream or an unmap still waits for that work.
    const bool same_stream = x.epoch != 0 && !x.mixed && x.stream == stream;
    if (x.pages == 1 && (same_stream || PhysDone(x, &scan))) {
      if (!same_stream) {  // its work is complete: nothing to order after any more
        x.stream = Stream{};
        x.epoch = 0;
        x.mixed = false;
      }
      UnlinkIdle(y);
      out->push_back(y);
      ++got;
    }
    y = next;
  }
  if (got < count) got += BorrowPending(count - got, stream, out);
  if (got > 0) VLOG(2) << "vmm_pool on " << place_ << ": stitching " << got << " idle page(s)";
  return got;
}

std::size_t VirtualMemoryPool::BorrowPending(std::size_t count, Stream stream,
                                             std::vector<std::int32_t>* out) {
  // One device-side wait per stream, for its latest free among the pages taken; after every
  // other stream's frees so far when a page freed on several streams is taken.
  std::array<std::pair<Stream, std::uint64_t>, 8> after{};
  std::size_t num_after = 0;
  bool all_streams = false;
  const std::size_t first = out->size();
  for (std::int32_t y = idle_head_; y >= 0 && out->size() - first < count;) {
    PhysPage& x = phys_[y];
    const std::int32_t next = x.idle_next;
    if (x.pages > 1) {  // extents are never borrowed
      y = next;
      continue;
    }
    std::size_t k = 0;
    if (!x.mixed) {
      while (k < num_after && after[k].first != x.stream) ++k;
      if (k == after.size()) {  // more streams than one batch of waits: leave it
        y = next;
        continue;
      }
      if (k == num_after) after[num_after++] = {x.stream, 0};
      after[k].second = std::max(after[k].second, x.epoch);
    }
    all_streams = all_streams || x.mixed;
    UnlinkIdle(y);
    out->push_back(y);
    y = next;
  }
  const std::size_t got = out->size() - first;
  if (got == 0) return 0;
  if (all_streams) {
    OrderAfterAllStreams(stream);
  } else {
    for (std::size_t k = 0; k < num_after; ++k) {
      OrderAfter(after[k].first, after[k].second, stream);
    }
  }
  // The pages' earlier work is now ordered before `stream`'s work from here on: a fence on
  // `stream` recorded after this point covers it. A new free number marks that point (a fence
  // recorded before it cannot cover it), so that the pages, whether mapped now or put back,
  // wait for no more than that.
  const std::uint64_t mark = ++StateOf(stream).epoch;
  for (std::size_t i = first; i < out->size(); ++i) {
    PhysPage& x = phys_[(*out)[i]];
    x.stream = stream;
    x.epoch = mark;
    x.mixed = false;
  }
  VLOG(6) << "vmm_pool: " << got << " idle page(s) of pending work taken for " << stream
          << " with device-side waits";
  return got;
}

std::size_t VirtualMemoryPool::ReclaimIdle(std::size_t count) {
  std::size_t got = 0;
  ReclaimScan scan;
  for (std::int32_t y = idle_head_; y >= 0 && got < count;) {
    PhysPage& x = phys_[y];
    const std::int32_t next = x.idle_next;
    if (PhysDone(x, &scan)) {
      UnlinkIdle(y);
      if (x.pages > 1) {
        UnmapExtent(y);
        ReleasePhys(y);
      } else {
        while (x.first_map >= 0) Unmap(static_cast<std::size_t>(x.first_map));
        spare_.push_back(y);
      }
      ++got;
    }
    y = next;
  }
  if (got > 0) VLOG(2) << "vmm_pool on " << place_ << ": unmapped " << got << " idle page(s)";
  return got;
}

}  // namespace strata::strategies
