// NamedCache: the blocks one named cache scope holds (GPUArrays.jl's cache scopes), keyed by
// exact size and stream. While a CacheScope with this name is active on a thread, frees of that
// thread go here instead of down the chain and allocations are served from here first, so a
// loop body that runs inside the scope reuses exactly the blocks of its last iteration — no
// search, no growth.
//
// Thread-safe (one mutex; the cache is only touched while a scope is active). Cached blocks
// remain allocated from the pool's point of view until Invalidate() frees them down their chain.
#pragma once

#include <atomic>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "allocation/allocation.h"
#include "allocation/memory_snapshot.h"
#include "platform/stream.h"

namespace strata::facade {

class NamedCache {
 public:
  explicit NamedCache(std::string name) : name_(std::move(name)) {}
  ~NamedCache() { Invalidate(); }
  NamedCache(const NamedCache&) = delete;
  NamedCache& operator=(const NamedCache&) = delete;

  const std::string& name() const { return name_; }

  // An allocation of exactly `size` bytes on `stream`, or nullptr.
  allocation::Allocation* Take(std::size_t size, platform::Stream stream);
  // Keeps `allocation` (whose next layer down is its top decorator) for reuse.
  void Put(allocation::Allocation* allocation, platform::Stream stream);
  // Frees every cached block down its chain; returns the bytes given back to the pool.
  std::uint64_t Invalidate();

  // Marks every cached block (allocated from the pool's point of view) as the cache's.
  void MarkBlocks(allocation::MemorySnapshot* snapshot) const;
  std::size_t cached_blocks() const;
  std::uint64_t cached_bytes() const;
  std::uint64_t hits() const;
  // Bumped by every Invalidate: blocks handed out before it no longer come back here.
  std::uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  using Key = std::pair<std::size_t, void*>;
  const std::string name_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Key, std::vector<allocation::Allocation*>> blocks_ ABSL_GUARDED_BY(mu_);
  std::size_t count_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<std::uint64_t> generation_{0};
};

}  // namespace strata::facade
