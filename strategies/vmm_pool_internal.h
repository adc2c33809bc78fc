// The private types of VirtualMemoryPool, shared by its three parts: vmm_pool.cc (blocks,
// allocate, free, release, statistics), vmm_pool_pages.cc (pages: live counts, the idle list,
// mapping and stitching) and vmm_pool_streams.cc (fences and cross-stream ordering). Not for use
// outside them.
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
  char* addr() const { return static_cast<char*>(ptr()); }
};

struct VirtualMemoryPool::Page {
  platform::PhysicalMemory mem;  // valid while mapped
  std::uint32_t live = 0;        // live blocks touching the page
  bool idle = false;             // mapped, no live block: on the idle list
  // The last free that touched the page: its stream and free number; `mixed` once two streams
  // freed blocks on it (then every stream's fence must be done).
  platform::Stream stream;
  std::uint64_t epoch = 0;
  bool mixed = false;
  std::int64_t idle_prev = -1, idle_next = -1;
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
