#include "strategies/vmm_pool.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "allocation/bad_alloc.h"
#include "glog/logging.h"
#include "reporting/byte_format.h"
#include "strategies/vmm_pool_internal.h"

namespace strata::strategies {

using allocation::Allocation;
using allocation::BadAlloc;
using allocation::FormatBytes;
using platform::Stream;

namespace {
std::size_t RoundUp(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
}  // namespace

VirtualMemoryPool::VirtualMemoryPool(platform::DeviceRuntime* runtime, const platform::Place& place,
                                     Options options)
    : runtime_(runtime),
      place_(place),
      options_(options),
      page_(runtime != nullptr ? runtime->VmmGranularity(place.device()) : 0),
      page_shift_(page_ != 0 ? std::countr_zero(page_) : 0) {
  if (runtime_ == nullptr) throw std::invalid_argument("VirtualMemoryPool: the runtime is null");
  if (page_ == 0) {
    throw std::invalid_argument(
        absl::StrCat("VirtualMemoryPool: ", place.ToString(), " has no virtual memory management"));
  }
  if (!std::has_single_bit(page_)) {
    throw std::invalid_argument(absl::StrCat("VirtualMemoryPool: the granularity of ",
                                             place.ToString(), " (", page_,
                                             ") is not a power of two"));
  }
  const std::size_t a = options_.alignment;
  if (a == 0 || (a & (a - 1)) != 0 || a > page_) {
    throw std::invalid_argument(absl::StrCat("VirtualMemoryPool: alignment must be a power of two ",
                                             "up to the granularity ", page_, ", got ", a));
  }
  memory_limit_ = options_.memory_limit;
  VLOG(4) << "vmm_pool on " << place_ << ": granularity " << FormatBytes(page_) << ", limit "
          << memory_limit_;
}

VirtualMemoryPool::~VirtualMemoryPool() {
  std::lock_guard<platform::SpinLock> lock(mu_);
  try {
    FlushParked();
  } catch (const std::exception& e) {
    LOG(ERROR) << "vmm_pool on " << place_ << ": cannot file parked blocks: " << e.what();
  }
  DropHolds();  // pages then count live blocks only
  // Teardown may wait: pages must not go while work that used them is pending.
  for (auto& [stream, state] : streams_) {
    if (state.last_fence_epoch == 0) continue;
    try {
      runtime_->SynchronizeEvent(state.Covering(state.last_fence_epoch)->event);
    } catch (const std::exception& e) {
      LOG(ERROR) << "vmm_pool on " << place_ << ": cannot wait for " << stream << ": " << e.what();
    }
  }
  std::size_t live = 0;
  try {
    for (std::size_t i = 0; i < pages_.size(); ++i) {
      live += pages_[i].live;
      if (pages_[i].phys < 0) continue;
      const PhysPage& x = phys_[pages_[i].phys];
      if (x.pages == 1) {
        runtime_->Unmap(base_ + i * page_, page_);
      } else if (x.first_map == static_cast<std::int32_t>(i)) {
        runtime_->Unmap(base_ + i * page_, x.pages * page_);
      }
    }
    for (const PhysPage& x : phys_) {
      if (x.mem.valid()) runtime_->ReleasePhysical(x.mem);
    }
    if (base_ != nullptr) runtime_->FreeAddress(base_, reserved_address_);
    for (auto& [stream, state] : streams_) {
      for (auto& f : state.fences) {
        if (f.event.handle != nullptr) runtime_->DestroyEvent(f.event);
      }
    }
  } catch (const std::exception& e) {
    LOG(ERROR) << "vmm_pool on " << place_ << ": teardown failed: " << e.what();
  }
  if (live != 0) LOG(ERROR) << "vmm_pool on " << place_ << ": destroyed with live blocks";
  // Block records: live ones are the caller's leak; the rest are ours.
  for (Block* b = first_; b != nullptr;) {
    Block* next = b->next;
    if (b->free) delete b;
    b = next;
  }
  for (Block* b : spare_records_) delete b;
}

void VirtualMemoryPool::ThrowTooLarge(std::size_t size) const {
  throw std::invalid_argument(absl::StrCat("strata: cannot allocate ", size, " bytes on ",
                                           place_.ToString(), ": requests are limited to ",
                                           kMaxRequestBytes, " bytes"));
}

void VirtualMemoryPool::ReserveAddressSpace() {
  std::size_t bytes = options_.reserve_bytes;
  if (bytes == 0) {
    std::size_t free_bytes = 0, total = 0;
    runtime_->MemInfo(place_.device(), &free_bytes, &total);
    bytes = 4 * total;
  }
  bytes = RoundUp(std::max(bytes, page_), page_);
  base_ = static_cast<char*>(runtime_->ReserveAddress(place_.device(), bytes));
  reserved_address_ = bytes;
  pages_.assign(bytes / page_, Page{});
  // Two regions that never merge: small blocks pack into their own pages instead of pinning
  // pages (and splitting free ranges) between large ones.
  const std::size_t small = bytes / page_ >= 8 ? RoundUp(bytes / 8, page_) : 0;
  Block* large = NewBlock(base_ + small, bytes - small);
  large->region = kLargeRegion;
  if (small != 0) {
    Block* front = NewBlock(base_, small);
    front->region = kSmallRegion;
    front->next = large;
    large->prev = front;
    index_[kSmallRegion].Insert(front);
    first_ = front;
  } else {
    first_ = large;
  }
  index_[kLargeRegion].Insert(large);
  VLOG(1) << "vmm_pool on " << place_ << ": reserved " << FormatBytes(bytes) << " of address space";
}

VirtualMemoryPool::Block* VirtualMemoryPool::NewBlock(char* addr, std::size_t size) {
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
  b->stream = Stream{};
  b->epoch = 0;
  b->stream2 = Stream{};
  b->epoch2 = 0;
  b->all_streams = false;
  b->held = false;
  b->held_prev = b->held_next = nullptr;
  return b;
}

// Splits free `block` at `at`: `block` keeps the front; returns the rest, a free block with the
// same last use and hold, linked after it. Neither is put in the index.
VirtualMemoryPool::Block* VirtualMemoryPool::Split(Block* block, std::size_t at) {
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
  if (block->held) {
    Hold(rest, block);
    // Both halves touch the page the cut falls in: it counts each.
    if ((reinterpret_cast<std::uintptr_t>(rest->addr()) & (page_ - 1)) != 0) {
      ++pages_[PageOf(rest->addr())].live;
    }
  }
  return rest;
}

// Splits the front `size` bytes off free `block` (out of the index); the rest stays free.
void VirtualMemoryPool::Carve(Block* block, std::size_t size) {
  if (block->size() == size) return;
  Block* rest = Split(block, size);
  index_[rest->region].Insert(rest);
}

// Splits free `block` (out of the index) at `offset`: the front stays free, in the index; returns
// the rest, out of it.
VirtualMemoryPool::Block* VirtualMemoryPool::SplitOff(Block* block, std::size_t offset) {
  Block* rest = Split(block, offset);
  index_[block->region].Insert(block);
  return rest;
}

namespace {
// Adds a last use (`s`, free number `e`; 0: none) to free block `b`'s records.
void AddUse(VirtualMemoryPool::Block* b, Stream s, std::uint64_t e) {
  if (e == 0) return;
  if (b->epoch == 0) {
    b->stream = s;
    b->epoch = e;
  } else if (b->stream == s) {
    b->epoch = std::max(b->epoch, e);
  } else if (b->epoch2 == 0) {
    b->stream2 = s;
    b->epoch2 = e;
  } else if (b->stream2 == s) {
    b->epoch2 = std::max(b->epoch2, e);
  } else {
    b->all_streams = true;
  }
}
}  // namespace

void VirtualMemoryPool::DropDoneUses(Block* b) {
  if (b->epoch2 != 0 && Done(b->stream2, b->epoch2)) b->epoch2 = 0;
  if (b->epoch != 0 && Done(b->stream, b->epoch)) {
    b->stream = b->stream2;
    b->epoch = b->epoch2;
    b->epoch2 = 0;
  }
}

// Files free `block`, merged with its free neighbours (in its region) whose last uses it can share
// without waits: the same stream, or no use (records of work seen done are dropped first, a query
// each, only where the streams differ). With `join_pending`, also neighbours whose uses on
// different streams are pending: the merged block keeps up to two streams' last uses, or "every
// stream" beyond, and its next user waits for them on the device. Otherwise such a pair is noted
// for RetryMerges. Free neighbours of different streams left apart for good would split the free
// space by stream: a large request then fits nowhere mapped, and the pool maps new address
// ranges every step.
VirtualMemoryPool::Block* VirtualMemoryPool::InsertFree(Block* block, bool join_pending) {
  auto mergeable = [&](Block* a, Block* b) {
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
    if (unmerged_.size() == kMaxUnmerged) unmerged_.erase(unmerged_.begin());
    unmerged_.push_back(a->next == b ? a : b);
    return false;
  };
  auto absorb = [&](Block* into, Block* gone) {  // `gone` follows `into`
    // One hold for the whole block, or none: a block without one may have pages unmapped or
    // used elsewhere.
    if (into->held != gone->held) ReleaseHold(into->held ? into : gone);
    if (gone->held) {
      Unhold(gone);
      if (PageOf(into->addr() + into->size() - 1) == PageOf(gone->addr())) {
        --pages_[PageOf(gone->addr())].live;  // counted for both, now for one block
      }
    }
    into->all_streams = into->all_streams || gone->all_streams;
    AddUse(into, gone->stream, gone->epoch);
    AddUse(into, gone->stream2, gone->epoch2);
    into->next = gone->next;
    if (gone->next != nullptr) gone->next->prev = into;
    into->Reset(into->addr(), base_, into->size() + gone->size(), place_);
    gone->free = false;  // a spare record, not a free block (RetryMerges skips it)
    spare_records_.push_back(gone);
  };
  if (mergeable(block, block->next)) {
    index_[block->region].Remove(block->next);
    absorb(block, block->next);
  }
  if (mergeable(block, block->prev)) {
    Block* prev = block->prev;
    index_[block->region].Remove(prev);
    absorb(prev, block);
    block = prev;
  }
  block->free = true;
  index_[block->region].Insert(block);
  return block;
}

bool VirtualMemoryPool::RetryMerges() {
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

VirtualMemoryPool::Block* VirtualMemoryPool::Place(std::size_t size, std::size_t* missing,
                                                   std::size_t* offset) {
  *offset = 0;
  TlsfIndex<Block>& index = index_[RegionFor(size)];
  Block* best = index.FindBestFit(size);
  if (best == nullptr) [[unlikely]]
    return nullptr;
  // A page to map costs driver calls, and maybe growth or stitching.
  // A held block's pages are all mapped to it.
  std::size_t best_cost = best->held ? 0 : Missing(best->addr(), size);
  *missing = best_cost;
  if (best_cost == 0) [[likely]]
    return best;
  auto weigh = [&](Block* b) {
    if (b == best) return false;
    const std::size_t c = b->held ? 0 : Missing(b->addr(), size);
    if (c < best_cost || (c == best_cost && c != kBlocked && b->size() < best->size())) {
      best = b;
      best_cost = c;
    }
    return best_cost == 0;
  };
  index.VisitFits(size, kPlacementScan, weigh);
  // Every fit weighed so far has, at its start, a mapping that cannot go yet: weigh every fit
  // from the first offset clear of such mappings (the unused end of the address space has none).
  const bool blocked = best_cost == kBlocked;
  if (blocked) {
    index.VisitFits(size, std::numeric_limits<int>::max(), [&](Block* b) {
      const std::size_t off = ClearOffset(*b, size);
      if (off == kBlocked) return false;
      const std::size_t c = Missing(b->addr() + off, size);
      if (c < best_cost) {
        best = b;
        best_cost = c;
        *offset = off;
      }
      return best_cost == 0;
    });
  }
  *missing = best_cost;
  if (best_cost == kBlocked) return nullptr;
  VLOG(8) << "vmm_pool: placed " << size << " at page " << PageOf(best->addr() + *offset)
          << " in a free block of " << best->size() << " (" << best_cost << " page(s) to map"
          << (blocked ? "; every fit starts on a mapping of pending work" : "") << ")";
  return best;
}

allocation::Allocation* VirtualMemoryPool::Allocate(std::size_t size, Stream stream) {
  const std::size_t rounded = Round(size);
  std::lock_guard<platform::SpinLock> lock(mu_);
  if (num_parked_ != 0) [[likely]] {
    // Quick reuse: the latest parked block of this size and stream.
    for (int i = num_parked_ - 1; i >= 0; --i) {
      Block* b = parked_[i];
      if (b->size() != rounded || b->stream != stream) continue;
      for (int j = i + 1; j < num_parked_; ++j) parked_[j - 1] = parked_[j];
      --num_parked_;
      b->owner = this;
      b->epoch = 0;                 // live again, on the stream that freed it
      b->set_requested_size(size);  // for snapshots; upper layers may wrap the block
      allocated_ += rounded;
      VLOG(10) << "vmm_pool: allocate " << size << " -> " << rounded << " at " << b->ptr() << " on "
               << stream << " (parked)";
      return b;
    }
    FlushParked();
  }
  if (base_ == nullptr) [[unlikely]]
    ReserveAddressSpace();
  std::size_t missing = 0, offset = 0;
  auto place = [&] {
    Block* b = Place(rounded, &missing, &offset);
    if (held_conflict_) [[unlikely]] {
      // A page weighed is used through another range, maybe only by a held free block there:
      // with the holds released it may be taken back without driver calls.
      held_conflict_ = false;
      DropHolds();
      b = Place(rounded, &missing, &offset);
      held_conflict_ = false;
    }
    return b;
  };
  Block* block = place();
  if ((block == nullptr || missing != 0) && !unmerged_.empty() && RetryMerges()) {
    block = place();
  }
  if (block == nullptr) [[unlikely]] {
    throw BadAlloc(place_, size)
        .set_pool_usage(allocated_, physical_)
        .set_hint(absl::StrCat("The pool's address space (", FormatBytes(reserved_address_),
                               ") is exhausted, or its free ranges are mapped to pages whose ",
                               "work is pending."));
  }
  index_[block->region].Remove(block);
  if (offset != 0) [[unlikely]]
    block = SplitOff(block, offset);
  if (block->all_streams) [[unlikely]] {
    OrderAfterAllStreams(stream);
  } else if (block->epoch != 0) {
    if (block->stream != stream) OrderAfter(block->stream, block->epoch, stream);
    if (block->epoch2 != 0 && block->stream2 != stream) {
      OrderAfter(block->stream2, block->epoch2, stream);
    }
  }
  Carve(block, rounded);
  Activate(block->addr(), rounded);
  if (block->held) [[likely]] {
    Unhold(block);  // its pages count it already, mapped to this range
  } else {
    // Live first: the block's pages are then neither idle nor reclaimable while it maps them.
    AddLive(block->addr(), rounded, stream);
    try {
      MapRange(block->addr(), rounded, size, missing, stream);
    } catch (...) {
      UndoLive(block->addr(), rounded);
      Deactivate(block->addr(), rounded);
      InsertFree(block);
      throw;
    }
  }
  block->free = false;
  block->owner = this;
  block->stream = stream;
  block->epoch = 0;
  block->epoch2 = 0;
  block->all_streams = false;
  block->set_requested_size(size);
  allocated_ += rounded;
  VLOG(10) << "vmm_pool: allocate " << size << " -> " << rounded << " at " << block->ptr() << " on "
           << stream;
  return block;
}

void VirtualMemoryPool::Free(Allocation* allocation) {
  auto* block = static_cast<Block*>(allocation);
  std::lock_guard<platform::SpinLock> lock(mu_);
  if (block->owner != this || block->free) [[unlikely]] {
    throw std::invalid_argument(absl::StrCat("strata: vmm_pool on ", place_.ToString(),
                                             " asked to free a block it does not hold"));
  }
  VLOG(10) << "vmm_pool: free " << block->size() << " at " << block->ptr();
  allocated_ -= block->size();
  freed_large_ = freed_large_ || block->size() >= page_;
  block->owner = nullptr;  // a second free of a parked block is caught above
  // Numbered now, not when filed: another stream taking the block later waits for the work up
  // to this free only.
  StreamState& s = StateOf(block->stream);
  block->epoch = ++s.epoch;
  // A fence every kFenceEvery frees, so that another stream taking this block waits only for
  // work up to about its free, and so that pages of work long done are seen as done (the host
  // runs far ahead of the device: a fence recorded only when asked would cover the newest work
  // too). With one stream, only at frees of page-sized blocks: small frees stay off the driver.
  if (s.epoch - s.last_fence_epoch >= kFenceEvery &&
      (streams_.size() > 1 || block->size() >= page_)) [[unlikely]] {
    try {
      RecordFence(block->stream, s);
    } catch (const platform::RuntimeError& e) {
      // The stream is gone: the free still happens (later checks fence on demand, and ordering
      // after a destroyed stream falls back to a device synchronize).
      LOG(WARNING) << "vmm_pool on " << place_ << ": cannot fence " << block->stream << ": "
                   << e.what();
    }
  }
  if (num_parked_ == kParkCapacity) [[unlikely]]
    FlushParked();
  parked_[num_parked_++] = block;
}

void VirtualMemoryPool::FlushParked() {
  for (int i = 0; i < num_parked_; ++i) {
    Block* block = parked_[i];
    Deactivate(block->addr(), block->size());
    Hold(block);  // its pages stay counted: a block carved here again does no page work
    InsertFree(block);
  }
  num_parked_ = 0;
}

std::uint64_t VirtualMemoryPool::Release() {
  std::lock_guard<platform::SpinLock> lock(mu_);
  FlushParked();
  DropHolds();
  const std::size_t before = physical_;
  ReclaimIdle(pages_.size());
  for (std::int32_t y : spare_) ReleasePhys(y);
  spare_.clear();
  const std::uint64_t released = before - physical_;
  VLOG(1) << "vmm_pool on " << place_ << ": released " << FormatBytes(released) << ", "
          << FormatBytes(physical_) << " physical left";
  return released;
}

void VirtualMemoryPool::Snapshot(allocation::MemorySnapshot* snapshot) const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  const Block* b = first_;
  const auto base = reinterpret_cast<std::uintptr_t>(base_);
  for (std::size_t i = 0; i < pages_.size();) {
    if (pages_[i].phys < 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < pages_.size() && pages_[j].phys >= 0) ++j;
    allocation::SnapshotSegment s;
    s.address = base + i * page_;
    s.size = s.mapped_bytes = (j - i) * page_;
    const std::uintptr_t end = s.address + s.size;
    auto addr = [](const Block* x) { return reinterpret_cast<std::uintptr_t>(x->ptr()); };
    while (b != nullptr && addr(b) + b->size() <= s.address) b = b->next;
    for (const Block* c = b; c != nullptr && addr(c) < end; c = c->next) {
      const std::uintptr_t lo = std::max(addr(c), s.address);
      const std::uintptr_t hi = std::min(addr(c) + c->size(), end);
      const bool live = !c->free && c->owner == this;  // parked: freed, not filed yet
      s.blocks.push_back(
          {lo, hi - lo, live ? c->requested_size() : 0,
           live ? allocation::BlockState::kAllocated : allocation::BlockState::kFree});
    }
    snapshot->AddSegment(std::move(s));
    i = j;
  }
}

void VirtualMemoryPool::CollectStats(allocation::MemoryStats* stats) const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  for (int pool : {allocation::kAggregate, allocation::kLargePool}) {
    stats->segment[pool].Merge(segment_);
    stats->reserved_bytes[pool].Merge(reserved_stat_);
  }
  stats->num_device_alloc += num_creates_;
  stats->num_device_free += num_releases_;
  stats->num_device_map += num_maps_;
  stats->num_device_unmap += num_unmaps_;
  stats->num_stream_waits += num_waits_;
  stats->num_sync_all_streams += num_sync_all_;
}

void VirtualMemoryPool::ResetPeakStats() {
  std::lock_guard<platform::SpinLock> lock(mu_);
  segment_.ResetPeak();
  reserved_stat_.ResetPeak();
}

void VirtualMemoryPool::ResetAccumulatedStats() {
  std::lock_guard<platform::SpinLock> lock(mu_);
  segment_.ResetAccumulated();
  reserved_stat_.ResetAccumulated();
}

void VirtualMemoryPool::SetMemoryLimit(std::size_t bytes) {
  std::lock_guard<platform::SpinLock> lock(mu_);
  memory_limit_ = bytes;
  VLOG(4) << "vmm_pool on " << place_ << ": limit " << bytes;
}
std::size_t VirtualMemoryPool::memory_limit() const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  return memory_limit_;
}
std::size_t VirtualMemoryPool::reserved_bytes() const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  return physical_;
}
std::size_t VirtualMemoryPool::mapped_bytes() const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  return mapped_;
}
std::size_t VirtualMemoryPool::allocated_bytes() const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  return allocated_;
}
std::int64_t VirtualMemoryPool::num_stream_waits() const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  return num_waits_;
}

}  // namespace strata::strategies
