#include "strategies/vmm_pool.h"

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "allocation/bad_alloc.h"
#include "glog/logging.h"
#include "reporting/byte_format.h"

namespace strata::strategies {

using allocation::Allocation;
using allocation::BadAlloc;
using allocation::FormatBytes;
using platform::PhysicalMemory;
using platform::Stream;

// A block of address space: live (handed out) or free (in index_). Address neighbours are
// linked, so a free merges with free neighbours.
struct VirtualMemoryPool::Block : Allocation, TlsfHook<Block> {
  Block* prev = nullptr;
  Block* next = nullptr;
  bool free = true;
  VirtualMemoryPool* owner = nullptr;
  // Free: the stream that freed it last and that stream's free number then (0: never used, or
  // used only by work known to be done). Live: the stream it was allocated for.
  Stream stream;
  std::uint64_t epoch = 0;
  char* addr() const { return static_cast<char*>(ptr()); }
};

struct VirtualMemoryPool::Page {
  PhysicalMemory mem;      // valid while mapped
  std::uint32_t live = 0;  // live blocks touching the page
  bool idle = false;       // mapped, no live block: on the idle list
  // The last free that touched the page: its stream and free number; `mixed` once two streams
  // freed blocks on it (then every stream's fence must be done).
  Stream stream;
  std::uint64_t epoch = 0;
  bool mixed = false;
  std::int64_t idle_prev = -1, idle_next = -1;
};

struct VirtualMemoryPool::StreamState {
  std::uint64_t epoch = 0;  // frees made on the stream so far
  platform::Event fence;    // created on first use
  bool has_fence = false;
  std::uint64_t fence_epoch = 0;  // the frees the fence covers
  bool fence_done = false;        // its completion, once seen
};

namespace {
std::size_t RoundUp(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
}  // namespace

VirtualMemoryPool::VirtualMemoryPool(platform::DeviceRuntime* runtime, const platform::Place& place,
                                     Options options)
    : runtime_(runtime),
      place_(place),
      options_(options),
      page_(runtime != nullptr ? runtime->VmmGranularity(place.device()) : 0) {
  if (runtime_ == nullptr) throw std::invalid_argument("VirtualMemoryPool: the runtime is null");
  if (page_ == 0) {
    throw std::invalid_argument(
        absl::StrCat("VirtualMemoryPool: ", place.ToString(), " has no virtual memory management"));
  }
  const std::size_t a = options_.alignment;
  if (a == 0 || (a & (a - 1)) != 0 || a > page_) {
    throw std::invalid_argument(absl::StrCat("VirtualMemoryPool: alignment must be a power of two ",
                                             "up to the granularity ", page_, ", got ", a));
  }
  VLOG(4) << "vmm_pool on " << place_ << ": granularity " << FormatBytes(page_) << ", limit "
          << options_.memory_limit;
}

VirtualMemoryPool::~VirtualMemoryPool() {
  std::lock_guard<platform::SpinLock> lock(mu_);
  // Teardown may wait: pages must not go while work that used them is pending.
  for (auto& [stream, state] : streams_) {
    if (!state.has_fence) continue;
    try {
      runtime_->SynchronizeEvent(state.fence);
    } catch (const std::exception& e) {
      LOG(ERROR) << "vmm_pool on " << place_ << ": cannot wait for " << stream << ": " << e.what();
    }
  }
  std::size_t live = 0;
  try {
    for (std::size_t i = 0; i < pages_.size(); ++i) {
      Page& p = pages_[i];
      live += p.live;
      if (!p.mem.valid()) continue;
      runtime_->Unmap(base_ + i * page_, page_);
      runtime_->ReleasePhysical(p.mem);
    }
    for (PhysicalMemory m : spare_) runtime_->ReleasePhysical(m);
    if (base_ != nullptr) runtime_->FreeAddress(base_, reserved_address_);
    for (auto& [stream, state] : streams_) {
      if (state.fence.handle != nullptr) runtime_->DestroyEvent(state.fence);
    }
  } catch (const std::exception& e) {
    LOG(ERROR) << "vmm_pool on " << place_ << ": teardown failed: " << e.what();
  }
  if (live != 0) LOG(ERROR) << "vmm_pool on " << place_ << ": destroyed with live blocks";
  // Blocks: live ones are the caller's leak; the rest are ours.
  for (Block* b : spare_records_) delete b;
}

std::size_t VirtualMemoryPool::Round(std::size_t size) const {
  if (size > kMaxRequestBytes) {
    throw std::invalid_argument(absl::StrCat("strata: cannot allocate ", size, " bytes on ",
                                             place_.ToString(), ": requests are limited to ",
                                             kMaxRequestBytes, " bytes"));
  }
  return RoundUp(std::max<std::size_t>(size, 1), options_.alignment);
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
  Block* all = NewBlock(base_, bytes);
  index_.Insert(all);
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
  return b;
}

// Splits the front `size` bytes off free `block` (out of the index); the rest stays free.
void VirtualMemoryPool::Carve(Block* block, std::size_t size) {
  if (block->size() == size) return;
  Block* rest = NewBlock(block->addr() + size, block->size() - size);
  rest->stream = block->stream;
  rest->epoch = block->epoch;
  rest->prev = block;
  rest->next = block->next;
  if (block->next != nullptr) block->next->prev = rest;
  block->next = rest;
  block->Reset(block->addr(), base_, size, place_);
  index_.Insert(rest);
}

// Files free `block`, merged with free neighbours whose last use it can share: the same stream,
// or never used.
void VirtualMemoryPool::InsertFree(Block* block) {
  auto mergeable = [](const Block* a, const Block* b) {
    return b != nullptr && b->free && (a->epoch == 0 || b->epoch == 0 || a->stream == b->stream);
  };
  auto absorb = [&](Block* into, Block* gone) {  // `gone` follows `into`
    if (into->epoch == 0 || (gone->epoch != 0 && gone->epoch > into->epoch)) {
      into->stream = gone->epoch != 0 ? gone->stream : into->stream;
      into->epoch = std::max(into->epoch, gone->epoch);
    }
    into->next = gone->next;
    if (gone->next != nullptr) gone->next->prev = into;
    into->Reset(into->addr(), base_, into->size() + gone->size(), place_);
    spare_records_.push_back(gone);
  };
  if (mergeable(block, block->next)) {
    index_.Remove(block->next);
    absorb(block, block->next);
  }
  if (mergeable(block, block->prev)) {
    Block* prev = block->prev;
    index_.Remove(prev);
    absorb(prev, block);
    block = prev;
  }
  block->free = true;
  index_.Insert(block);
}

VirtualMemoryPool::StreamState& VirtualMemoryPool::StateOf(Stream stream) {
  return streams_[stream];
}

bool VirtualMemoryPool::Done(Stream stream, std::uint64_t epoch) {
  if (epoch == 0) return true;
  StreamState& s = StateOf(stream);
  if (!s.has_fence || s.fence_epoch < epoch) return false;
  if (!s.fence_done) s.fence_done = runtime_->QueryEvent(s.fence);
  return s.fence_done;
}

platform::Event VirtualMemoryPool::Fence(Stream stream) {
  StreamState& s = StateOf(stream);
  if (s.has_fence && s.fence_epoch == s.epoch) return s.fence;
  if (s.fence.handle == nullptr) s.fence = runtime_->CreateEvent(place_.device());
  runtime_->RecordEvent(s.fence, stream);
  s.has_fence = true;
  s.fence_epoch = s.epoch;
  s.fence_done = false;
  return s.fence;
}

bool VirtualMemoryPool::AllStreamsDone() {
  bool done = true;
  for (auto& [stream, s] : streams_) {
    if (s.epoch == 0) continue;
    if (!Done(stream, s.epoch)) {
      Fence(stream);
      done = false;
    }
  }
  return done;
}

void VirtualMemoryPool::OrderAfterLastUse(const Block& block, Stream stream) {
  if (Done(block.stream, block.epoch)) return;  // the last user's work is complete
  try {
    runtime_->StreamWaitEvent(stream, Fence(block.stream));
    ++num_waits_;
    VLOG(8) << "vmm_pool: " << stream << " waits for " << block.stream << " on the device";
  } catch (const platform::RuntimeError& e) {
    // The last user's stream is gone (destroyed): its work cannot be fenced any more.
    LOG(WARNING) << "vmm_pool on " << place_ << ": cannot order " << stream << " after "
                 << block.stream << " (" << e.what() << "); synchronizing the device instead";
    runtime_->SynchronizeDevice(place_.device());
    StateOf(block.stream).epoch = 0;
  }
}

allocation::Allocation* VirtualMemoryPool::Allocate(std::size_t size, Stream stream) {
  const std::size_t rounded = Round(size);
  std::lock_guard<platform::SpinLock> lock(mu_);
  if (base_ == nullptr) [[unlikely]]
    ReserveAddressSpace();
  Block* block = index_.FindBestFit(rounded);
  if (block == nullptr) [[unlikely]] {
    throw BadAlloc(place_, size)
        .set_pool_usage(allocated_, physical_)
        .set_hint(absl::StrCat("The pool's address space (", FormatBytes(reserved_address_),
                               ") is exhausted."));
  }
  index_.Remove(block);
  if (block->epoch != 0 && block->stream != stream) OrderAfterLastUse(*block, stream);
  Carve(block, rounded);
  // Live first: the block's pages are then neither idle nor reclaimable while it maps them.
  AddLive(block->addr(), rounded);
  try {
    MapRange(block->addr(), rounded, size);
  } catch (...) {
    UndoLive(block->addr(), rounded);
    InsertFree(block);
    throw;
  }
  block->free = false;
  block->owner = this;
  block->stream = stream;
  block->epoch = 0;
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
  StreamState& s = StateOf(block->stream);
  block->epoch = ++s.epoch;
  block->owner = nullptr;
  DropLive(block->addr(), block->size(), block->stream, block->epoch);
  InsertFree(block);
}

void VirtualMemoryPool::AddLive(char* addr, std::size_t size) {
  const std::size_t first = (addr - base_) / page_, last = (addr + size - 1 - base_) / page_;
  for (std::size_t i = first; i <= last; ++i) {
    Page& p = pages_[i];
    if (p.live++ == 0) {
      ++live_pages_;
      if (p.idle) UnlinkIdle(i);
    }
  }
  live_pages_peak_ = std::max(live_pages_peak_, live_pages_);
}

void VirtualMemoryPool::UndoLive(char* addr, std::size_t size) {
  const std::size_t first = (addr - base_) / page_, last = (addr + size - 1 - base_) / page_;
  for (std::size_t i = first; i <= last; ++i) {
    Page& p = pages_[i];
    if (--p.live == 0) {
      --live_pages_;
      if (p.mem.valid()) LinkIdle(i);
    }
  }
}

void VirtualMemoryPool::DropLive(char* addr, std::size_t size, Stream stream, std::uint64_t epoch) {
  const std::size_t first = (addr - base_) / page_, last = (addr + size - 1 - base_) / page_;
  for (std::size_t i = first; i <= last; ++i) {
    Page& p = pages_[i];
    if (p.epoch != 0 && p.stream != stream) p.mixed = true;
    p.stream = stream;
    p.epoch = epoch;
    if (--p.live == 0) {
      --live_pages_;
      LinkIdle(i);
    }
  }
}

void VirtualMemoryPool::LinkIdle(std::size_t page) {
  Page& p = pages_[page];
  p.idle = true;
  p.idle_next = -1;
  p.idle_prev = idle_tail_;
  if (idle_tail_ >= 0) {
    pages_[idle_tail_].idle_next = static_cast<std::int64_t>(page);
  } else {
    idle_head_ = static_cast<std::int64_t>(page);
  }
  idle_tail_ = static_cast<std::int64_t>(page);
}

void VirtualMemoryPool::UnlinkIdle(std::size_t page) {
  Page& p = pages_[page];
  (p.idle_prev >= 0 ? pages_[p.idle_prev].idle_next : idle_head_) = p.idle_next;
  (p.idle_next >= 0 ? pages_[p.idle_next].idle_prev : idle_tail_) = p.idle_prev;
  p.idle = false;
  p.idle_prev = p.idle_next = -1;
}

void VirtualMemoryPool::MapRange(char* addr, std::size_t size, std::size_t request) {
  const std::size_t first = (addr - base_) / page_, last = (addr + size - 1 - base_) / page_;
  std::size_t missing = 0;
  for (std::size_t i = first; i <= last; ++i) missing += pages_[i].mem.valid() ? 0 : 1;
  if (missing == 0) [[likely]]
    return;
  std::vector<PhysicalMemory> mems;
  if (!TakePhysical(missing, &mems)) {
    for (PhysicalMemory m : mems) spare_.push_back(m);
    std::size_t free_bytes = 0, total = 0;
    runtime_->MemInfo(place_.device(), &free_bytes, &total);
    BadAlloc e(place_, request);
    e.set_device_memory(total, free_bytes).set_pool_usage(allocated_, physical_);
    if (options_.memory_limit != 0 && physical_ + missing * page_ > options_.memory_limit) {
      e.set_memory_limit(options_.memory_limit, physical_);
    }
    throw e;
  }
  for (std::size_t i = first; i <= last; ++i) {
    Page& p = pages_[i];
    if (p.mem.valid()) continue;
    PhysicalMemory m = mems.back();
    try {
      runtime_->Map(base_ + i * page_, page_, m, 0, place_.device());
    } catch (...) {
      spare_.insert(spare_.end(), mems.begin(), mems.end());  // kept for the next growth
      throw;
    }
    mems.pop_back();
    p.mem = m;
    p.stream = Stream{};
    p.epoch = 0;
    p.mixed = false;
    ++num_maps_;
    mapped_ += page_;
  }
}

bool VirtualMemoryPool::TakePhysical(std::size_t count, std::vector<PhysicalMemory>* out) {
  auto from_spare = [&] {
    while (out->size() < count && !spare_.empty()) {
      out->push_back(spare_.back());
      spare_.pop_back();
    }
  };
  from_spare();
  if (out->size() == count) return true;
  // Stitching: pages idle elsewhere before more device memory, when more would pass the limit
  // or hold more than 1/kSlackDivisor above the most pages live blocks ever touched at once. The
  // slack spares remapping pages back and forth in steady state (emulated warm gpt2_train replay:
  // 1/32 remaps on most events, 16 ms an iteration; 1/8, 2.4 ms; the default pool 0.84 ms).
  const std::size_t need = (count - out->size()) * page_;
  const std::size_t live_peak = live_pages_peak_ * page_;
  const bool past_limit = options_.memory_limit != 0 && physical_ + need > options_.memory_limit;
  if (past_limit || physical_ + need > live_peak + live_peak / kSlackDivisor + 2 * page_) {
    ReclaimIdle(count - out->size());
    from_spare();
  }
  while (out->size() < count) {
    if (options_.memory_limit != 0 && physical_ + page_ > options_.memory_limit) return false;
    PhysicalMemory m = runtime_->CreatePhysical(place_.device(), page_);
    if (!m.valid()) {
      // The device is full: every idle page that is safe now, then try again.
      if (ReclaimIdle(count - out->size()) == 0) return false;
      from_spare();
      continue;
    }
    ++num_creates_;
    physical_ += page_;
    segment_.Increase(1);
    reserved_stat_.Increase(static_cast<std::int64_t>(page_));
    out->push_back(m);
  }
  VLOG(2) << "vmm_pool on " << place_ << ": " << FormatBytes(physical_) << " physical";
  return true;
}

std::size_t VirtualMemoryPool::ReclaimIdle(std::size_t count) {
  std::size_t got = 0;
  bool mixed_done = false, mixed_checked = false;
  for (std::int64_t i = idle_head_; i >= 0 && got < count;) {
    Page& p = pages_[i];
    const std::int64_t next = p.idle_next;
    bool done;
    if (p.mixed) {
      if (!mixed_checked) {
        mixed_done = AllStreamsDone();
        mixed_checked = true;
      }
      done = mixed_done;
    } else {
      done = Done(p.stream, p.epoch);
      if (!done) Fence(p.stream);
    }
    if (done) {
      UnlinkIdle(static_cast<std::size_t>(i));
      runtime_->Unmap(base_ + i * page_, page_);
      spare_.push_back(p.mem);
      p.mem = PhysicalMemory{};
      p.epoch = 0;
      p.mixed = false;
      ++num_unmaps_;
      mapped_ -= page_;
      ++got;
    }
    i = next;
  }
  if (got > 0) VLOG(2) << "vmm_pool on " << place_ << ": unmapped " << got << " idle page(s)";
  return got;
}

void VirtualMemoryPool::WaitForStreams() {
  std::vector<std::pair<Stream, platform::Event>> fences;
  {
    std::lock_guard<platform::SpinLock> lock(mu_);
    for (auto& [stream, s] : streams_) {
      if (s.epoch != 0 && !Done(stream, s.epoch)) fences.emplace_back(stream, Fence(stream));
    }
  }
  // Outside the lock: other threads keep allocating while the host waits.
  for (const auto& [stream, fence] : fences) runtime_->SynchronizeEvent(fence);
  VLOG(1) << "vmm_pool on " << place_ << ": waited for " << fences.size() << " stream(s)";
}

std::uint64_t VirtualMemoryPool::Release() {
  std::lock_guard<platform::SpinLock> lock(mu_);
  ReclaimIdle(pages_.size());
  std::uint64_t released = 0;
  for (PhysicalMemory m : spare_) {
    runtime_->ReleasePhysical(m);
    ++num_releases_;
    physical_ -= page_;
    released += page_;
    segment_.Decrease(1);
    reserved_stat_.Decrease(static_cast<std::int64_t>(page_));
  }
  spare_.clear();
  VLOG(1) << "vmm_pool on " << place_ << ": released " << FormatBytes(released) << ", "
          << FormatBytes(physical_) << " physical left";
  return released;
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
