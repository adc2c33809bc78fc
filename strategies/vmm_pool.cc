// VirtualMemoryPool: lifecycle, allocate, free, quick reuse, release and statistics.
#include "strategies/vmm_pool.h"

#include <algorithm>
#include <bit>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocation/bad_alloc.h"
#include "allocation/byte_format.h"
#include "glog/logging.h"

namespace strata::strategies {

using allocation::Allocation;
using allocation::BadAlloc;
using allocation::FormatBytes;
using platform::Stream;

namespace {
std::size_t RoundUp(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
std::size_t GranularityOf(platform::DeviceRuntime* runtime, const platform::Place& place) {
  return runtime != nullptr ? runtime->VmmGranularity(place.device()) : 0;
}
// The pool's page: Options::page_bytes, or the granularity when it is 0 (or the device has no
// VMM: the constructor then throws for that).
std::size_t PageBytesOf(platform::DeviceRuntime* runtime, const platform::Place& place,
                        std::size_t page_bytes) {
  const std::size_t granularity = GranularityOf(runtime, place);
  return granularity == 0 || page_bytes == 0 ? granularity : page_bytes;
}
}  // namespace

VirtualMemoryPool::VirtualMemoryPool(platform::DeviceRuntime* runtime, const platform::Place& place,
                                     Options options)
    : runtime_(runtime),
      place_(place),
      options_(options),
      page_(PageBytesOf(runtime, place, options.page_bytes)),
      pages_(runtime, place, page_),
      clock_(runtime, place),
      blocks_(place, &clock_, this, options.max_unmerged),
      idle_(place, &pages_, &clock_),
      slack_permille_(options.stitch_slack_permille) {
  if (runtime_ == nullptr) throw std::invalid_argument("VirtualMemoryPool: the runtime is null");
  if (page_ == 0) {
    throw std::invalid_argument(
        absl::StrCat("VirtualMemoryPool: ", place.ToString(), " has no virtual memory management"));
  }
  const std::size_t granularity = GranularityOf(runtime, place);
  if (!std::has_single_bit(granularity)) {
    throw std::invalid_argument(absl::StrCat("VirtualMemoryPool: the granularity of ",
                                             place.ToString(), " (", granularity,
                                             ") is not a power of two"));
  }
  if (!std::has_single_bit(page_) || page_ % granularity != 0) {
    throw std::invalid_argument(absl::StrCat(
        "VirtualMemoryPool: page_bytes must be 0 (the granularity) or a power-of-two multiple of ",
        "the granularity of ", place.ToString(), " (", FormatBytes(granularity), "), got ", page_));
  }
  std::size_t free_bytes = 0, total_bytes = 0;
  runtime_->MemInfo(place_.device(), &free_bytes, &total_bytes);
  if (page_ > total_bytes) {
    throw std::invalid_argument(absl::StrCat("VirtualMemoryPool: a page of ", FormatBytes(page_),
                                             " is larger than ", place.ToString(), " (",
                                             FormatBytes(total_bytes), "): no page could be made"));
  }
  const std::size_t a = options_.alignment;
  if (a == 0 || (a & (a - 1)) != 0 || a > page_) {
    throw std::invalid_argument(absl::StrCat("VirtualMemoryPool: alignment must be a power of two ",
                                             "up to the granularity ", page_, ", got ", a));
  }
  if (options_.park_capacity < 1 || options_.park_capacity > kMaxParked ||
      options_.placement_scan < 1 || options_.fence_every < 1 || options_.max_unmerged < 1 ||
      options_.slack_window_turnover < 1) {
    throw std::invalid_argument(absl::StrCat(
        "VirtualMemoryPool: park_capacity must be in [1, ", kMaxParked, "] (got ",
        options_.park_capacity, "); placement_scan (", options_.placement_scan, "), fence_every (",
        options_.fence_every, "), max_unmerged (", options_.max_unmerged,
        ") and slack_window_turnover (", options_.slack_window_turnover, ") must be at least 1"));
  }
  std::lock_guard<platform::SpinLock> lock(mu_);
  pages_.set_memory_limit(options_.memory_limit);
  parked_.reserve(static_cast<std::size_t>(options_.park_capacity));
  VLOG(4) << "vmm_pool on " << place_ << ": pages of " << FormatBytes(page_) << ", limit "
          << options_.memory_limit;
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
  clock_.SynchronizeLastFences();
  std::size_t live = 0;
  for (std::size_t i = 0; i < pages_.num_pages(); ++i) live += pages_.page(i).live;
  try {
    pages_.Teardown();
    clock_.DestroyEvents();
  } catch (const std::exception& e) {
    LOG(ERROR) << "vmm_pool on " << place_ << ": teardown failed: " << e.what();
  }
  if (live != 0) LOG(ERROR) << "vmm_pool on " << place_ << ": destroyed with live blocks";
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
  char* base = pages_.Reserve(bytes);
  live_.Resize(pages_.num_pages());
  const std::size_t small = vmm::SmallRegionBytes(bytes, page_, options_.small_region_divisor);
  blocks_.Init(base, bytes, small);
  // A reservation too small to split has one region, which takes every request.
  small_block_bytes_ = small != 0 ? options_.small_block_bytes : 0;
  VLOG(1) << "vmm_pool on " << place_ << ": reserved " << FormatBytes(bytes) << " of address space";
}

vmm::PhysicalFigures VirtualMemoryPool::Figures() const {
  vmm::PhysicalFigures f;
  f.physical = pages_.physical_bytes();
  f.live_peak_bytes = live_.peak() * page_;
  f.memory_limit = pages_.memory_limit();
  f.page = page_;
  f.stitch_slack_permille = slack_permille_;
  return f;
}

void VirtualMemoryPool::EndSlackWindow() {
  const std::size_t peak = live_.peak();
  const std::size_t before = slack_permille_;
  slack_permille_ =
      vmm::SlackAfter(slack_permille_, window_, peak,
                      {options_.slack_step_permille, options_.max_stitch_slack_permille});
  if (slack_permille_ != before) {
    VLOG(2) << "vmm_pool on " << place_ << ": " << window_.remaps
            << " page(s) remapped at a steady live peak; stitching slack " << before << " -> "
            << slack_permille_ << " permille";
  }
  VLOG(6) << "vmm_pool on " << place_ << ": window: live peak " << peak << " pages, "
          << pages_.physical_bytes() / page_ << " physical, " << pages_.mapped_bytes() / page_
          << " mapped, " << window_.remaps << " remapped, slack " << slack_permille_;
  peak_held_ = peak == window_.peak_at_start;
  window_ = {0, peak, 0};
  window_end_bytes_ = vmm::WindowBytes(peak, page_, options_.slack_window_turnover);
}

struct VirtualMemoryPool::CostView {
  VirtualMemoryPool* pool;
  std::size_t size;
  vmm::StreamClock::Scan scan{};  // one for every fit weighed
  // A held block's pages are all mapped to it.
  std::size_t StartCost(Block* b) { return b->held ? 0 : pool->Missing(b->addr(), size, &scan); }
  std::size_t ClearOffset(Block* b) { return pool->ClearOffset(*b, size, &scan); }
  std::size_t CostAt(Block* b, std::size_t offset) {
    return pool->Missing(b->addr() + offset, size, &scan);
  }
};

vmm::Placement<VirtualMemoryPool::Block> VirtualMemoryPool::ChooseBlock(std::size_t size) {
  CostView view{this, size};
  auto& index = blocks_.index(vmm::RegionFor(size, small_block_bytes_));
  auto p = vmm::ChoosePlacement<Block>(index, size, options_.placement_scan, view);
  if (held_conflict_) [[unlikely]] {
    // A page weighed is used through another range, maybe only by a held free block there:
    // with the holds released it may be taken back without driver calls.
    held_conflict_ = false;
    DropHolds();
    p = vmm::ChoosePlacement<Block>(index, size, options_.placement_scan, view);
    held_conflict_ = false;
  }
  if (p.block != nullptr && p.missing != 0) {
    VLOG(8) << "vmm_pool: placed " << size << " at page " << PageOf(p.block->addr() + p.offset)
            << " in a free block of " << p.block->size() << " (" << p.missing << " page(s) to map"
            << (p.every_fit_blocked ? "; every fit starts on a mapping of pending work" : "")
            << ")";
  }
  return p;
}

allocation::Allocation* VirtualMemoryPool::Allocate(std::size_t size, Stream stream) {
  const std::size_t rounded = Round(size);
  const bool ask_first = has_hooks_.load(std::memory_order_acquire);
  if (Allocation* a = AllocateLocked(size, rounded, stream, /*may_map=*/!ask_first,
                                     /*reuse_placement=*/false)) [[likely]]
    return a;
  const bool gave_back = GiveBackBeforeGrowth();
  return AllocateLocked(size, rounded, stream, /*may_map=*/true, /*reuse_placement=*/!gave_back);
}

void VirtualMemoryPool::AddBeforeGrowth(std::weak_ptr<void> owner, BeforeGrowth hook) {
  if (hook == nullptr) throw std::invalid_argument("VirtualMemoryPool: null BeforeGrowth hook");
  absl::MutexLock lock(&hooks_mu_);
  std::erase_if(hooks_, [](const GrowthHook& h) { return h.owner.expired(); });
  hooks_.push_back({std::move(owner), hook});
  has_hooks_.store(true, std::memory_order_release);
}

bool VirtualMemoryPool::GiveBackBeforeGrowth() {
  // Owners are held while called, and let go outside hooks_mu_: the last reference to a chain
  // may be dropped here, and its teardown frees into this pool.
  std::vector<std::pair<std::shared_ptr<void>, BeforeGrowth>> live;
  {
    absl::MutexLock lock(&hooks_mu_);
    live.reserve(hooks_.size());
    for (const GrowthHook& h : hooks_) {
      if (auto owner = h.owner.lock()) live.emplace_back(std::move(owner), h.hook);
    }
  }
  bool gave_back = false;
  for (const auto& [owner, hook] : live) gave_back |= hook(owner.get());
  VLOG(6) << "vmm_pool on " << place_ << ": asked " << live.size()
          << " cache(s) for their blocks before mapping" << (gave_back ? "" : ": none had any");
  return gave_back;
}

Allocation* VirtualMemoryPool::TakeParked(std::size_t size, std::size_t rounded, Stream stream) {
  if (parked_.empty()) return nullptr;
  // Quick reuse: the latest parked block of this size and stream.
  for (auto it = parked_.end(); it != parked_.begin();) {
    Block* b = *--it;
    if (b->size() != rounded || b->stream != stream) continue;
    parked_.erase(it);
    clock_.TakenBack(stream);
    b->owner = this;
    b->epoch = 0;                 // live again, on the stream that freed it
    b->set_requested_size(size);  // for snapshots; upper layers may wrap the block
    allocated_ += rounded;
    ++changes_;
    CountAllocation(rounded);
    VLOG(10) << "vmm_pool: allocate " << size << " -> " << rounded << " at " << b->ptr() << " on "
             << stream << " (parked)";
    return b;
  }
  FlushParkedOf(stream);
  return nullptr;
}

allocation::Allocation* VirtualMemoryPool::AllocateLocked(std::size_t size, std::size_t rounded,
                                                          Stream stream, bool may_map,
                                                          bool reuse_placement) {
  std::lock_guard<platform::SpinLock> lock(mu_);
  clock_.Resume(stream);  // if its handle was ended, a new stream has it
  vmm::Placement<Block> p;
  if (reuse_placement && deferred_.changes == changes_ && deferred_.rounded == rounded &&
      deferred_.stream == stream) [[likely]] {
    // The hooks gave nothing back and nothing changed since: the placement stands. (Choosing
    // again would see the fences the first choice recorded, and place otherwise than a pool with
    // no cache above it.)
    p = deferred_.placement;
  } else {
    if (Allocation* parked = TakeParked(size, rounded, stream)) [[likely]]
      return parked;
    if (pages_.base() == nullptr) [[unlikely]]  // the address space is reserved at first use
      ReserveAddressSpace();
    p = ChooseBlock(rounded);
    if ((p.block == nullptr || p.missing != 0) && !parked_.empty()) {
      FlushParked();  // other streams' parked blocks before any page work
      p = ChooseBlock(rounded);
    }
    if ((p.block == nullptr || p.missing != 0) && blocks_.has_unmerged() && blocks_.RetryMerges()) {
      p = ChooseBlock(rounded);
    }
    if (!may_map && (p.block == nullptr || p.missing != 0)) {
      deferred_ = {p, changes_, rounded, stream};
      return nullptr;
    }
  }
  ++changes_;
  Block* block = p.block;
  if (block == nullptr) [[unlikely]] {
    throw BadAlloc(place_, size)
        .set_pool_usage(allocated_, pages_.physical_bytes())
        .set_hint(absl::StrCat("The pool's address space (", FormatBytes(pages_.reserved_address()),
                               ") is exhausted, or its free ranges are mapped to pages whose ",
                               "work is pending."));
  }
  blocks_.index(block->region).Remove(block);
  if (p.offset != 0) [[unlikely]]
    block = blocks_.SplitOff(block, p.offset);
  if (block->all_streams) [[unlikely]] {
    clock_.OrderAfterAllStreams(stream);
  } else if (block->epoch != 0) {
    if (block->stream != stream) clock_.OrderAfter(block->stream, block->epoch, stream);
    if (block->epoch2 != 0 && block->stream2 != stream) {
      clock_.OrderAfter(block->stream2, block->epoch2, stream);
    }
  }
  blocks_.Carve(block, rounded);
  const std::size_t peak_before = live_.peak();
  Activate(block->addr(), rounded);
  if (block->held) [[likely]] {
    held_.Unhold(block);  // its pages count it already, mapped to this range
  } else {
    // Live first: the block's pages are then neither idle nor reclaimable while it maps them.
    AddLive(block->addr(), rounded, stream);
    try {
      MapRange(block->addr(), rounded, size, p.missing, stream,
               /*new_peak_after_steady=*/peak_held_ && live_.peak() > peak_before);
    } catch (...) {
      UndoLive(block->addr(), rounded);
      Deactivate(block->addr(), rounded);
      blocks_.InsertFree(block);
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
  CountAllocation(rounded);
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
  ++changes_;
  allocated_ -= block->size();
  const bool page_sized = block->size() >= page_;
  freed_large_ = freed_large_ || page_sized;
  block->owner = nullptr;  // a second free of a parked block is caught above
  // Numbered now, not when filed: another stream taking the block later waits for the work up
  // to this free only.
  block->epoch = clock_.NumberFree(block->stream, [&](std::uint64_t since, std::size_t streams) {
    return vmm::FenceDue(since, streams, page_sized, options_.fence_every);
  });
  if (parked_.size() == static_cast<std::size_t>(options_.park_capacity)) [[unlikely]]
    FlushParked();
  parked_.push_back(block);
}

bool VirtualMemoryPool::EndStream(Stream stream) {
  std::lock_guard<platform::SpinLock> lock(mu_);
  ++changes_;
  FlushParkedOf(stream);
  return clock_.End(stream);
}

std::uint64_t VirtualMemoryPool::Release() {
  std::lock_guard<platform::SpinLock> lock(mu_);
  ++changes_;
  FlushParked();
  DropHolds();
  const std::size_t before = pages_.physical_bytes();
  // Idle pages whose last free no fence covers yet get one in the first pass; on a device with
  // nothing pending it is complete at once, and the second pass unmaps them.
  idle_.Reclaim(pages_.num_pages());
  if (pages_.idle_head() >= 0) idle_.Reclaim(pages_.num_pages());
  pages_.ReleaseSpares();
  const std::uint64_t released = before - pages_.physical_bytes();
  VLOG(1) << "vmm_pool on " << place_ << ": released " << FormatBytes(released) << ", "
          << FormatBytes(pages_.physical_bytes()) << " physical left";
  return released;
}

void VirtualMemoryPool::WaitForStreams() {
  std::vector<platform::Event> fences;
  bool gone = false;
  {
    std::lock_guard<platform::SpinLock> lock(mu_);
    FlushParked();  // their frees get numbers the fences below cover
    gone = clock_.FencesToWaitFor(&fences);
  }
  // Outside the lock: other threads keep allocating while the host waits.
  for (const platform::Event& fence : fences) runtime_->SynchronizeEvent(fence);
  if (gone) {
    // A destroyed stream's work can be waited for only with the whole device.
    runtime_->SynchronizeDevice(place_.device());
    std::lock_guard<platform::SpinLock> lock(mu_);
    clock_.CatchUpGoneStreams();
  }
  VLOG(1) << "vmm_pool on " << place_ << ": waited for " << fences.size() << " stream(s)";
}

void VirtualMemoryPool::Snapshot(allocation::MemorySnapshot* snapshot) const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  const Block* b = blocks_.first();
  const auto base = reinterpret_cast<std::uintptr_t>(pages_.base());
  const std::size_t n = pages_.num_pages();
  for (std::size_t i = 0; i < n;) {
    if (pages_.page(i).phys < 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < n && pages_.page(j).phys >= 0) ++j;
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
  pages_.CollectStats(stats);
  stats->num_stream_waits += clock_.num_waits();
  stats->num_sync_all_streams += clock_.num_host_waits();
}

void VirtualMemoryPool::ResetPeakStats() {
  std::lock_guard<platform::SpinLock> lock(mu_);
  pages_.ResetPeakStats();
}

void VirtualMemoryPool::ResetAccumulatedStats() {
  std::lock_guard<platform::SpinLock> lock(mu_);
  pages_.ResetAccumulatedStats();
}

void VirtualMemoryPool::SetMemoryLimit(std::size_t bytes) {
  std::lock_guard<platform::SpinLock> lock(mu_);
  pages_.set_memory_limit(bytes);
  VLOG(4) << "vmm_pool on " << place_ << ": limit " << bytes;
}
std::size_t VirtualMemoryPool::memory_limit() const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  return pages_.memory_limit();
}
void VirtualMemoryPool::SetHeldElsewhere(const std::atomic<std::size_t>* bytes) {
  std::lock_guard<platform::SpinLock> lock(mu_);
  pages_.set_held_elsewhere(bytes);
}
std::size_t VirtualMemoryPool::physical_bytes() const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  return pages_.physical_bytes();
}
std::size_t VirtualMemoryPool::reserved_bytes() const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  return pages_.physical_bytes();
}
std::size_t VirtualMemoryPool::mapped_bytes() const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  return pages_.mapped_bytes();
}
std::size_t VirtualMemoryPool::allocated_bytes() const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  return allocated_;
}
std::int64_t VirtualMemoryPool::num_stream_waits() const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  return clock_.num_waits();
}

}  // namespace strata::strategies
