// The private types of VirtualMemoryPool, shared by its five parts: vmm_pool.cc (blocks,
// allocate, free, release, statistics), vmm_pool_pages.cc (pages: live counts, the idle list,
// mapping and stitching), vmm_pool_holds.cc (free blocks keeping their pages counted),
// vmm_pool_extents.cc (physical allocations of several pages) and vmm_pool_streams.cc (fences
// and cross-stream ordering). Not for use outside them.
#pragma once

#include <array>
#include <cstdint>

#include "allocation/allocation.h"
#include "platform/event.h"
#include "platform/physical_memory.h"
#include "platform/stream.h"
#include "strategies/tlsf_index.h"
#include "strategies/vmm_pool.h"

namespace strata::strategies {

// A block of address space: live (handed out) or free (in index_). Address neighbours are
// linked, so a free merges with free neighbours.
struct VirtualMemoryPool::Block : allocation::Allocation, TlsfHook<Block> {
  Block* prev = nullptr;
  Block* next = nullptr;
  bool free = true;
  std::uint8_t region = 0;  // kSmallRegion or kLargeRegion: blocks merge within one only
  VirtualMemoryPool* owner = nullptr;
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
  // Free and "held": its pages still count it in Page::live, as when it was live, so that a
  // block carved from it again needs no page work (no live counts, idle list or mapping checks:
  // its pages stay mapped to this range, and its last uses are on the block). The page records
  // get its uses when the hold is released (ReleaseHold). Held blocks are listed, oldest first.
  bool held = false;
  Block* held_prev = nullptr;
  Block* held_next = nullptr;
  char* addr() const { return static_cast<char*>(ptr()); }
};

// A page of address space: which physical page is mapped there, and the blocks counted on it.
struct VirtualMemoryPool::Page {
  std::int32_t phys = -1;        // index into phys_, or -1: not mapped
  std::int32_t next_alias = -1;  // the next page of address space mapping the same physical page
  std::uint32_t live = 0;        // live and held free blocks touching the page
  std::uint32_t active = 0;      // live blocks whose first or last page it is (Activate)
  bool mixed = false;            // freed on two streams since mapped (see `epoch`)
  // The last free of a block touching the page since it was mapped: its stream and free number
  // (0: none). The work through this mapping, which must be done before it is removed; the
  // physical page's own record also covers work through its other mappings.
  platform::Stream stream;
  std::uint64_t epoch = 0;
};

// A physical page of the device's granularity. It may be mapped at several pages of address
// space: stitching maps an idle physical page into a new range and leaves its old mapping, so
// that either range takes it back later without driver calls. At most one of them has live
// blocks (the `user`); a range whose physical page another range uses must be remapped.
// An extent (`pages` > 1) is one physical allocation of several pages, mapped at one run of
// address pages only (from `first_map`), whole: it has no `user` nor aliases, is idle when none
// of its pages has a live block, and is never borrowed.
struct VirtualMemoryPool::PhysPage {
  platform::PhysicalMemory mem;  // invalid: the slot is unused
  std::uint32_t pages = 1;       // address pages it covers when mapped
  std::uint32_t live_pages = 0;  // extents: pages of it with live blocks
  std::int32_t user = -1;        // the page of address space whose live blocks use it, or -1
  std::int32_t first_map = -1;   // the pages of address space mapping it (a list via next_alias)
  std::uint32_t maps = 0;
  bool idle = false;  // mapped, no user: on the idle list
  // The last free touching it, through any mapping: its stream and free number; `mixed` once two
  // streams freed blocks on it (then every stream's fence must be done). Reset when it is taken
  // for a new range (its earlier work is complete then).
  platform::Stream stream;
  std::uint64_t epoch = 0;
  bool mixed = false;
  std::int32_t idle_prev = -1, idle_next = -1;
};

// A stream's frees are numbered (epochs); fences are events recorded on the stream, each
// covering the frees numbered up to its epoch. A ring of recent fences lets another stream wait
// for the work up to a block's free rather than for everything the stream did since.
struct VirtualMemoryPool::StreamState {
  static constexpr int kFences = 8;
  struct FenceSlot {
    platform::Event event;    // created on first use
    std::uint64_t epoch = 0;  // the frees it covers (0: never recorded)
  };
  std::uint64_t epoch = 0;       // frees made on the stream so far
  std::uint64_t done_epoch = 0;  // frees known complete (a fence seen done, or a device sync)
  std::uint64_t last_fence_epoch = 0;
  int next_slot = 0;
  std::array<FenceSlot, kFences> fences;
  // The oldest recorded fence covering free number `e`; nullptr if none does yet.
  FenceSlot* Covering(std::uint64_t e) {
    FenceSlot* best = nullptr;
    for (FenceSlot& f : fences) {
      if (f.epoch >= e && f.epoch != 0 && (best == nullptr || f.epoch < best->epoch)) best = &f;
    }
    return best;
  }
};

}  // namespace strata::strategies
