// ChainBuilder: the one place that turns the flags into allocator chains. Each recipe is one
// short function that reads as its chain, bottom to top; every flag-to-options translation lives
// here.
//
// Recipes, by priority (size 0 is answered before any chain, by ZeroSizeLayer):
//   use_system_allocator        raw (+ limit) -> stat            (no caching: for memory checkers)
//   CUDA (DeviceChain):
//   - per-stream chains         raw -> limit -> auto_growth -> stream_safe -> oom_recovery
//     (use_stream_safe_cuda_allocator    -> retry -> thread_cache -> stat, one chain per stream
//     with allocator_strategy auto_growth) over one raw layer (thread_cache unless
//                               thread_cache_mb is 0)
//   - virtual memory            vmm_pool view -> stream_safe -> oom_recovery -> retry
//     (use_virtual_memory_auto_growth,  -> thread_cache -> stat: one VirtualMemoryPool per
//     auto_growth, a device with VMM)  device, shared by every stream's chain (RawLayer is the
//                               pool's default-stream view, which alone reports the pool's
//                               figures); without VMM support, the auto_growth recipe, with a
//                               VLOG(1) line saying so
//   - otherwise                 raw -> limit -> strategy -> oom_recovery -> retry -> stat,
//                               one chain shared by every stream
//   CPU / pinned (HostChain)    raw -> limit (host fraction) -> naive_best_fit
//                               (-> stream_safe, pinned with use_stream_safe_cuda_allocator)
//                               -> stat
// The scoped-cache layer goes on top of a chain once its place uses named caches.
//
// What the chains of a place share (raw layer, statistics counters, history, the recovery and
// retry hooks) comes in one ChainContext, which the facade makes once per place.
//
// Out of memory: oom_recovery is the one recovery policy. Its `recover` callback (given by the
// facade) releases every chain of the device, then the request is tried once more; above it the
// retry layer waits up to gpu_allocator_retry_time for frees on the device (any chain sharing
// its RetryWaiters), less when nobody is left to free.
//
// Contract: const after construction, so thread-safe. Throws std::invalid_argument for places
// it cannot serve (a CUDA or pinned place without a device runtime, a device ordinal out of
// range), naming the place.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "allocation/allocator.h"
#include "facade/graph_pools.h"
#include "flags/allocator_flags.h"
#include "history/history_recorder.h"
#include "layers/ended_streams.h"
#include "layers/memory_limit_allocator.h"
#include "layers/oom_recovery_allocator.h"
#include "layers/retry_waiters.h"
#include "layers/stat_allocator.h"
#include "platform/device_runtime.h"
#include "platform/place.h"
#include "platform/stream.h"
#include "strategies/auto_growth_best_fit_allocator.h"
#include "strategies/device_reserved.h"

namespace strata::facade {

// What every chain of one place shares. The facade fills it once per place, before the place's
// first chain, and leaves it alone after.
struct ChainContext {
  platform::Place place;
  // The memory limit of a GPU place whose device pool is the virtual-memory pool, shared by its
  // CUDA graph pools, which count their device memory in it and the pool's own against it (the
  // pool counts theirs too): together they stay under gpu_memory_limit_mb or the memory
  // fraction (GraphBudget; null otherwise). Declared before `raw`, which reads it to the end.
  std::shared_ptr<layers::MemoryLimitAllocator::Budget> graph_budget;
  // What every chain of the place draws on (ChainBuilder::RawLayer).
  std::shared_ptr<allocation::Allocator> raw;
  // The one counter set of the place's statistics layers, so that its figures are the place's
  // (null: each chain counts alone).
  std::shared_ptr<layers::StatAllocator::Registry> stat_counters;
  // The place's recorder of allocations, frees and deferred frees (null: none).
  std::shared_ptr<history::HistoryRecorder> history;

  // GPU places only (host chains have no recovery or retry layer, nor a device pool):
  // The recovery layer's callback: releases every chain of the device. Required.
  layers::OomRecoveryAllocator::Recover recover;
  // Whether the retry layer's wait could end in a free (null: always).
  std::function<bool()> may_free;
  // Shared by the retry layers of the place's chains, so that a free on any stream wakes the
  // waiters of all (null: each chain has its own).
  std::shared_ptr<layers::RetryWaiters> retry_waiters;
  // What the place's pools hold together, for garbage_collection_threshold (null when off).
  std::shared_ptr<strategies::DeviceReserved> device_reserved;
  // The streams ended (AllocatorFacade::EndStream), for the stream-safe layers (null: none).
  std::shared_ptr<const layers::EndedStreams> ended_streams;
};

class ChainBuilder {
 public:
  // `runtime` may be null (then only CPU places can be built); it must outlive the chains.
  ChainBuilder(platform::DeviceRuntime* runtime, const flags::AllocatorFlags& flags);

  const flags::AllocatorFlags& flags() const { return flags_; }
  platform::DeviceRuntime* runtime() const { return runtime_; }
  // Whether CUDA places get one chain per stream (else one chain per place).
  bool per_stream() const { return per_stream_; }

  // What every chain of `place` draws on: the raw allocator, under the memory limit on GPUs, or
  // the device's virtual-memory pool.
  std::shared_ptr<allocation::Allocator> RawLayer(const platform::Place& place) const;
  // Whether `raw` (from RawLayer) reports figures no chain reports: the shared pool's.
  static bool ReportsDeviceFigures(const allocation::Allocator& raw);
  // Before an explicit EmptyCache: waits for the device where the cache below `raw` could not
  // give memory back otherwise (the shared pool's pages of pending work). No-op elsewhere.
  static void WaitBeforeEmptyCache(allocation::Allocator& raw);
  // AllocatorFacade::EndStream: tells the device's shared pool (under `raw`) that `stream` is
  // about to be destroyed. No-op elsewhere: a chunk pool is the stream's own chain's.
  static void EndStream(allocation::Allocator& raw, platform::Stream stream);
  // The place's reserved peak, exact, where the chains' own peaks, summed into `stats`, only
  // bound it (each stream's pool peaks at its own time): `raw` (RawLayer of a place whose chains
  // have pools of their own) counts every device allocation of the place at once. Applied only
  // where the summed current figure equals `raw`'s.
  static void ExactReservedPeak(const allocation::Allocator& raw, allocation::MemoryStats* stats);
  // Caps what the place's device memory (its RawLayer `context.raw` and its graph pools) may
  // hold at `bytes`, or at gpu_memory_limit_mb where that is lower (0: no cap but the flag's).
  void SetMemoryLimit(const ChainContext& context, std::size_t bytes) const;
  // The graph pools' shared limit for a place whose RawLayer is `raw` (see
  // ChainContext::graph_budget): null unless `raw` is the virtual-memory pool, which it then
  // tells to count the graph pools' bytes.
  std::shared_ptr<layers::MemoryLimitAllocator::Budget> GraphBudget(
      allocation::Allocator& raw) const;
  // Answers size-0 requests of `place`; forwards the rest to `raw`.
  std::shared_ptr<allocation::Allocator> ZeroSizeLayer(
      const platform::Place& place, std::shared_ptr<allocation::Allocator> raw) const;
  // The chain of `stream` on `context.place`, up to and including the statistics layer.
  std::shared_ptr<allocation::Allocator> Chain(const ChainContext& context,
                                               platform::Stream stream) const;
  // A CUDA graph pool's chain on GPU `context.place` (graph_pools.h): statistics over an
  // auto-growth pool that never frees on its own, over the place's device memory
  // (`context.raw`, or plain device memory under the flag's limit where that is the shared
  // virtual-memory pool).
  GraphPools::PoolChain GraphPoolChain(const ChainContext& context) const;
  // The named-cache layer over a chain's statistics layer.
  std::shared_ptr<allocation::Allocator> ScopedCacheLayer(
      const platform::Place& place, platform::Stream stream, std::uint64_t facade_id,
      std::shared_ptr<allocation::Allocator> stat) const;

 private:
  using AllocatorPtr = std::shared_ptr<allocation::Allocator>;
  // A device chain's pool, and the pool its thread cache gives blocks back to before growth.
  struct DevicePool;

  // The recipes: a chain below its statistics layer.
  AllocatorPtr DeviceChain(const ChainContext& context, platform::Stream stream) const;
  AllocatorPtr HostChain(const ChainContext& context) const;

  // The layers and pools the recipes stack.
  DevicePool DevicePoolOf(const ChainContext& context, platform::Stream stream) const;
  std::shared_ptr<strategies::AutoGrowthBestFitAllocator> AutoGrowth(
      const platform::Place& place, AllocatorPtr below,
      std::shared_ptr<strategies::DeviceReserved> device_reserved) const;
  AllocatorPtr BuddyStrategy(const platform::Place& place, AllocatorPtr below) const;
  AllocatorPtr StreamSafeLayer(const ChainContext& context, platform::Stream stream,
                               AllocatorPtr below) const;
  AllocatorPtr ThreadCacheLayer(AllocatorPtr below, const DevicePool& pool) const;
  static AllocatorPtr StatLayer(const ChainContext& context, platform::Stream stream,
                                AllocatorPtr below);
  // What a host place's pool may hold: its fraction of the host's physical memory.
  std::size_t HostCap(const platform::Place& place) const;

  platform::DeviceRuntime* const runtime_;
  const flags::AllocatorFlags flags_;
  const bool per_stream_;
  const bool virtual_memory_;
};

}  // namespace strata::facade
