// MemorySnapshot: every segment and block of a place at one moment (docs/HISTORY.md), filled by
// the layers of its chains through Allocator::Snapshot: pools add their segments and blocks
// (allocated or free, as the pool sees them), layers above re-mark the allocated blocks they
// hold (pending a deferred free, kept by a named cache).
//
// Contract: not thread-safe (one snapshot is built by one thread); pools fill it under their own
// lock, so each pool's part is consistent, and the whole is when no other thread allocates or
// frees meanwhile. Throws only std::bad_alloc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace strata::allocation {

enum class BlockState : std::uint8_t {
  kAllocated,      // handed out, not freed
  kFree,           // in the pool
  kPendingEvents,  // freed, waiting for work recorded on other streams
  kNamedCache,     // kept by a named cache scope
  kThreadCache,    // freed into a thread's front cache, not yet back in the pool
};
const char* BlockStateName(BlockState state);

struct SnapshotBlock {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::size_t requested_size = 0;  // what the allocation asked for (0 when free)
  BlockState state = BlockState::kFree;
};

struct SnapshotSegment {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::size_t mapped_bytes = 0;       // device memory behind it (its size, but for virtual memory)
  std::string pool;                   // whose: "stream N", "device", "graph N", "host"
  std::vector<SnapshotBlock> blocks;  // in address order
};

class MemorySnapshot {
 public:
  // The `pool` label of the segments added next (the facade sets it per chain).
  void set_pool(std::string pool) { pool_ = std::move(pool); }
  const std::string& pool() const { return pool_; }

  // Adds a segment; its `pool` is taken from set_pool when empty.
  void AddSegment(SnapshotSegment segment);
  // The allocated block at `address` is held by a layer in `state`.
  void Mark(const void* address, BlockState state);

  // The segments in address order, marks applied (reporting/snapshot_json.h writes them).
  std::vector<SnapshotSegment> Segments() const;

 private:
  std::string pool_;
  std::vector<SnapshotSegment> segments_;
  absl::flat_hash_map<std::uintptr_t, BlockState> marks_;
};

}  // namespace strata::allocation
