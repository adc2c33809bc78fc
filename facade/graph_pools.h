// GraphPools: the private memory pools of CUDA graph capture on one GPU place (PyTorch's graph
// pools, reached through CUDAPluggableAllocator's begin/end-allocate-to-pool and release-pool
// hooks; Paddle's CUDAGraphAllocator).
//
// Why: a captured graph replays its kernels on the same addresses later, so the memory its
// allocations got during capture must stay the graph's: no other allocation may reuse it while
// the graph lives, and blocks freed during the capture may serve only later allocations of the
// same capture (the replay keeps that order).
//
// How
// - A pool is a chain of its own (statistics -> auto-growth pool -> the place's device memory),
//   keyed by a pool id (PyTorch's MempoolId_t). Begin(id, filter) routes every allocation whose
//   stream passes `filter` (the capturing stream) to pool `id` until End(id); blocks freed during
//   and after the capture return to that pool (an allocation frees through the chain that made
//   it). Its pool never gives memory back on its own (no idle-chunk frees: cudaFree is refused
//   during a capture), and grows with cudaMalloc in relaxed capture mode (the runtime's).
// - Sharing: Begin on an existing id adds a user (a second graph in the same pool); Release(id)
//   drops one. With no user left the pool is retired: its cached memory goes back to the device
//   once no capture is underway and, with no live block left, the pool goes away. Retired pools
//   are retried at every Release/End (and by the facade's Release/EmptyCache).
//
// Contract
// - Thread-safe (one mutex; Route takes it only while a capture routes, see routing()).
// - Throws std::invalid_argument for End or Release of an id that is not begun / known, and
//   whatever building a pool's chain throws.
// - Statistics: pools count into the place's statistics set (CollectStats reports their
//   pools' reserved memory and segments).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "allocation/allocator.h"
#include "allocation/memory_stats.h"
#include "platform/place.h"
#include "platform/stream.h"

namespace strata::facade {

class GraphPools {
 public:
  using PoolId = std::pair<std::uint64_t, std::uint64_t>;
  using Filter = std::function<bool(platform::Stream)>;
  // A new pool's chain: the top (statistics layer) and the bytes its pool holds live.
  struct PoolChain {
    std::shared_ptr<allocation::Allocator> top;
    std::function<std::size_t()> allocated_bytes;
  };
  using MakeChain = std::function<PoolChain()>;

  GraphPools(const platform::Place& place, MakeChain make_chain);
  ~GraphPools();

  void Begin(PoolId id, Filter filter);
  void End(PoolId id);
  void Release(PoolId id);
  // Captures routing now (Begin without End): allocations check Route only when this is not 0.
  int routing() const { return routing_.load(std::memory_order_acquire); }
  // The chain of the pool claiming `stream` (the latest Begin whose filter passes), or null.
  std::shared_ptr<allocation::Allocator> Route(platform::Stream stream);
  // Gives back what retired pools hold, where no capture is underway; returns the bytes.
  std::uint64_t ReleaseRetired();
  void CollectStats(allocation::MemoryStats* stats);
  // Every pool's segments and blocks, labelled "graph <id>".
  void Snapshot(allocation::MemorySnapshot* snapshot);
  std::size_t num_pools();

 private:
  struct Pool {
    PoolChain chain;
    int users = 0;
  };
  struct Active {
    PoolId id;
    Filter filter;
  };
  std::uint64_t ReleaseRetiredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const platform::Place place_;
  const MakeChain make_chain_;
  absl::Mutex mu_;
  absl::flat_hash_map<PoolId, std::unique_ptr<Pool>> pools_ ABSL_GUARDED_BY(mu_);
  std::vector<Active> active_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> routing_{0};
};

}  // namespace strata::facade
