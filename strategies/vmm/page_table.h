// PageTable: the virtual-memory pool's physical-page layer. One reservation of address space, cut
// into pages of the device's VMM granularity; physical allocations (one page, or an extent of
// several) created, mapped, unmapped and released; the idle list and the spare stack; the
// physical memory limit and the device-call counts.
//
// Owns: the address pages (what is mapped where, the blocks counted on each, the last free
// through each), the physical pages (their state, mappings, last free), and the figures of
// physical memory (bytes, segments, creates, releases, maps, unmaps).
//
// A physical page's state changes only through Move, the one transition function; the table of
// legal transitions is kLegalMove. A physical page may be mapped at several addresses
// (stitching leaves old mappings so either range can take it back without driver calls); at
// most one of them, the `user`, has live blocks. An extent (`pages` > 1) is mapped at one run of
// addresses only, whole (CUDA maps a physical allocation only whole).
//
// Contract
// - Not thread-safe: the pool calls it under its lock.
// - Never waits for the device: the caller unmaps only mappings whose work is done.
// - Throws platform::RuntimeError from the runtime, and std::logic_error for an illegal state
//   transition (a bug in the pool; the state is left as it was).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "allocation/memory_stats.h"
#include "platform/device_runtime.h"
#include "platform/physical_memory.h"
#include "platform/place.h"
#include "strategies/vmm/stream_clock.h"

namespace strata::strategies::vmm {

enum class PhysState : std::uint8_t {
  kUnused,  // the slot holds no physical memory
  kTaken,   // created, or taken off the idle list or the spare stack, to be mapped or put back
  kSpare,   // created, mapped nowhere: on the spare stack
  kIdle,    // mapped (at one address or more), no live or held block uses it: on the idle list
  kInUse,   // live or held blocks of one range use it (an extent: of one of its pages or more)
};
inline constexpr int kNumPhysStates = 5;
static_assert(static_cast<int>(PhysState::kInUse) + 1 == kNumPhysStates, "one row per state");
const char* ToString(PhysState state);
// kLegalMove[from][to]: the transitions of a physical page (PageTable::Move).
inline constexpr bool kLegalMove[kNumPhysStates][kNumPhysStates] = {
    // to: unused taken  spare  idle   in use
    {false, true, false, false, false},  // from kUnused: Create
    {true, false, true, true, true},     // from kTaken: a failed map, put back, mapped for a range
    {true, true, false, false, false},   // from kSpare: released, taken for a range
    {true, true, true, false, true},     // from kIdle: an extent released, borrowed, unmapped,
                                         // its own range's block again
    {false, false, false, true, false},  // from kInUse: its last block gone
};
// The table as a bit mask (bit from * kNumPhysStates + to): the check costs no memory load on the
// warm path.
inline constexpr std::uint32_t kLegalMoveMask = [] {
  std::uint32_t mask = 0;
  for (int from = 0; from < kNumPhysStates; ++from) {
    for (int to = 0; to < kNumPhysStates; ++to) {
      mask |= std::uint32_t{kLegalMove[from][to]} << (from * kNumPhysStates + to);
    }
  }
  return mask;
}();
constexpr bool IsLegalMove(PhysState from, PhysState to) {
  return (kLegalMoveMask >> (static_cast<int>(from) * kNumPhysStates + static_cast<int>(to))) & 1u;
}

// A page of address space.
struct AddressPage {
  std::int32_t phys = -1;        // the physical page mapped here, or -1
  std::int32_t next_alias = -1;  // the next address page mapping the same physical page
  std::uint32_t live = 0;        // live and held free blocks touching the page
  // The last free of a block touching the page since it was mapped: the work through this
  // mapping, which must be done before it is removed.
  LastUse use;
};

// A physical allocation of one page or of an extent of several.
struct PhysPage {
  platform::PhysicalMemory mem;  // invalid: the slot is unused
  std::uint32_t pages = 1;       // address pages it covers when mapped
  std::uint32_t live_pages = 0;  // extents: pages of it with live blocks
  std::int32_t user = -1;        // one page: the address page whose live blocks use it, or -1
  std::int32_t first_map = -1;   // the address pages mapping it (a list via next_alias)
  std::uint32_t maps = 0;
  PhysState state = PhysState::kUnused;
  // The last free touching it, through any mapping. Reset when it is taken for a new range
  // (its earlier work is complete then).
  LastUse use;
  std::int32_t idle_prev = -1, idle_next = -1;
  bool extent() const { return pages > 1; }
};

class PageTable {
 public:
  // `page_size`: the device's VMM granularity, a power of two.
  PageTable(platform::DeviceRuntime* runtime, const platform::Place& place, std::size_t page_size);
  PageTable(const PageTable&) = delete;
  PageTable& operator=(const PageTable&) = delete;

  // Reserves `bytes` (a multiple of the page size) of address space; returns its base.
  char* Reserve(std::size_t bytes);
  // Unmaps every mapping, releases every physical allocation and gives the address space back.
  // For teardown: the caller has waited for the work through them.
  void Teardown();

  char* base() const { return base_; }
  std::size_t page_size() const { return page_; }
  std::size_t num_pages() const { return pages_.size(); }
  std::size_t reserved_address() const { return reserved_address_; }
  std::size_t PageOf(const char* addr) const {
    return static_cast<std::size_t>(addr - base_) >> page_shift_;
  }
  AddressPage& page(std::size_t i) { return pages_[i]; }
  const AddressPage& page(std::size_t i) const { return pages_[i]; }
  PhysPage& phys(std::int32_t phys_id) { return phys_[phys_id]; }
  const PhysPage& phys(std::int32_t phys_id) const { return phys_[phys_id]; }

  // The transition function: moves physical page `phys_id` to `to`, keeping the idle list (entering
  // kIdle links it last, leaving kIdle unlinks it). Throws std::logic_error for a transition
  // that is not legal.
  void Move(std::int32_t phys_id, PhysState to) {  // inline: per page on the warm path
    PhysPage& phys_page = phys_[phys_id];
    const PhysState from = phys_page.state;
    if (!IsLegalMove(from, to)) [[unlikely]]
      ThrowIllegalMove(phys_id, from, to);
    if (from == PhysState::kIdle) UnlinkIdle(phys_id);
    phys_page.state = to;
    if (to == PhysState::kIdle) LinkIdle(phys_id);
  }

  // A new physical allocation of `pages` pages, kTaken and mapped nowhere; -1 when the memory
  // limit or the device refuses it.
  std::int32_t Create(std::size_t pages = 1);
  // Gives physical allocation `phys_id` (mapped nowhere, not on the spare stack) back to the
  // device.
  void Release(std::int32_t phys_id);
  // Maps one-page physical `phys_id` at address page `page` (not mapped).
  void MapAt(std::size_t page, std::int32_t phys_id);
  // Removes the mapping of address page `page` (work through it must be complete).
  void Unmap(std::size_t page);
  // Removes every mapping of one-page physical `phys_id`.
  void UnmapAll(std::int32_t phys_id);
  // Maps each run of at least two unmapped pages of [first, last], up to `max_pages` long, to a
  // new extent (kInUse: the caller counted a block on each page); returns the pages mapped
  // (fewer when the device or the limit refuses one).
  std::size_t MapExtents(std::size_t first, std::size_t last, std::size_t max_pages);
  void UnmapExtent(std::int32_t phys_id);
  // Whether physical `phys_page` is also mapped at an address page in [first, i).
  bool MappedBelow(const PhysPage& phys_page, std::size_t first, std::size_t i) const;

  // The spare stack (kSpare pages: their work is complete).
  bool has_spares() const { return !spare_.empty(); }
  void AddSpare(std::int32_t phys_id);
  std::int32_t TakeSpare();
  void ReleaseSpares();
  // The idle list, the longest idle first (walk with phys(phys_id).idle_next).
  std::int32_t idle_head() const { return idle_head_; }

  void set_memory_limit(std::size_t bytes) { memory_limit_ = bytes; }
  std::size_t memory_limit() const { return memory_limit_; }
  // Bytes held under the same limit outside this table (the place's CUDA graph pools), or null.
  void set_held_elsewhere(const std::atomic<std::size_t>* bytes) { held_elsewhere_ = bytes; }
  std::size_t held_elsewhere() const {
    return held_elsewhere_ == nullptr ? 0 : held_elsewhere_->load(std::memory_order_relaxed);
  }
  // Whether `need` more bytes would pass the memory limit.
  bool PassesLimit(std::size_t need) const {
    return memory_limit_ != 0 && physical_ + held_elsewhere() + need > memory_limit_;
  }
  std::size_t physical_bytes() const { return physical_; }  // created and not released
  std::size_t mapped_bytes() const { return mapped_; }  // address space mapped (a page twice: 2x)

  void CollectStats(allocation::MemoryStats* stats) const;
  void ResetPeakStats();
  void ResetAccumulatedStats();

 private:
  [[noreturn, gnu::cold, gnu::noinline]] void ThrowIllegalMove(std::int32_t phys_id, PhysState from,
                                                               PhysState to) const;
  void LinkIdle(std::int32_t phys_id) {
    PhysPage& phys_page = phys_[phys_id];
    phys_page.idle_next = -1;
    phys_page.idle_prev = idle_tail_;
    (idle_tail_ >= 0 ? phys_[idle_tail_].idle_next : idle_head_) = phys_id;
    idle_tail_ = phys_id;
  }
  void UnlinkIdle(std::int32_t phys_id) {
    PhysPage& phys_page = phys_[phys_id];
    (phys_page.idle_prev >= 0 ? phys_[phys_page.idle_prev].idle_next : idle_head_) =
        phys_page.idle_next;
    (phys_page.idle_next >= 0 ? phys_[phys_page.idle_next].idle_prev : idle_tail_) =
        phys_page.idle_prev;
    phys_page.idle_prev = phys_page.idle_next = -1;
  }

  platform::DeviceRuntime* const runtime_;
  const platform::Place place_;
  const std::size_t page_;
  const int page_shift_;
  char* base_ = nullptr;
  std::size_t reserved_address_ = 0;
  std::vector<AddressPage> pages_;
  std::vector<PhysPage> phys_;
  std::vector<std::int32_t> free_slots_;  // kUnused slots of phys_
  std::vector<std::int32_t> spare_;
  std::int32_t idle_head_ = -1;
  std::int32_t idle_tail_ = -1;
  std::size_t memory_limit_ = 0;
  const std::atomic<std::size_t>* held_elsewhere_ = nullptr;
  std::size_t physical_ = 0;
  std::size_t mapped_ = 0;
  allocation::StatValue segment_{};
  allocation::StatValue reserved_stat_{};
  std::int64_t num_creates_ = 0;
  std::int64_t num_releases_ = 0;
  std::int64_t num_maps_ = 0;
  std::int64_t num_unmaps_ = 0;
};

}  // namespace strata::strategies::vmm
