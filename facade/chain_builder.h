// ChainBuilder: the one place that turns the flags into allocator chains. Each recipe is one
// short function; every flag-to-options translation lives here.
//
// Recipes, by priority (size 0 is answered before any chain, by ZeroSizeLayer):
//   use_system_allocator        raw (+ limit) -> stat            (no caching: for memory checkers)
//   CUDA, per-stream chains     raw -> limit -> auto_growth -> stream_safe -> oom_recovery
//   (use_stream_safe_cuda_allocator      -> retry -> thread_cache -> stat, one chain per stream
//    with allocator_strategy auto_growth) over one raw layer (thread_cache unless
//                               thread_cache_mb is 0)
//   CUDA, otherwise             raw -> limit -> strategy -> oom_recovery -> retry -> stat,
//                               one chain shared by every stream
//   CUDA, virtual memory        vmm_pool view -> stream_safe -> oom_recovery -> retry -> stat:
//   (use_virtual_memory_auto_growth, one VirtualMemoryPool per device, shared by every stream's
//    auto_growth, a device with VMM)  chain (RawLayer is the pool's default-stream view, which
//                               alone reports the pool's figures); without VMM support, the
//                               auto_growth recipe, with a VLOG(1) line saying so
//   CPU / pinned                raw -> naive_best_fit (host fractions) -> stat
// The scoped-cache layer goes on top of a chain once its place uses named caches.
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

#include <memory>

#include "allocation/allocator.h"
#include "facade/graph_pools.h"
#include "flags/allocator_flags.h"
#include "history/history_recorder.h"
#include "layers/oom_recovery_allocator.h"
#include "layers/retry_waiters.h"
#include "layers/stat_allocator.h"
#include "platform/device_runtime.h"
#include "platform/place.h"
#include "platform/stream.h"
#include "strategies/auto_growth_best_fit_allocator.h"
#include "strategies/device_reserved.h"

namespace strata::facade {

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
  // Caps what `raw` (RawLayer of a GPU place) may hold at `bytes`, or at gpu_memory_limit_mb
  // where that is lower (0: no cap but the flag's).
  void SetMemoryLimit(allocation::Allocator& raw, std::size_t bytes) const;
  // Answers size-0 requests of `place`; forwards the rest to `raw`.
  std::shared_ptr<allocation::Allocator> ZeroSizeLayer(
      const platform::Place& place, std::shared_ptr<allocation::Allocator> raw) const;
  // The chain of (`place`, `stream`) over `raw`, up to and including the statistics layer,
  // which counts into `stat_counters` (null: counters of its own). Allocations, frees and
  // deferred frees are reported to `history` (the place's recorder; null: none). The retry
  // layers of a GPU place's chains share `retry_waiters` (null: each chain has its own), so a
  // free on any stream wakes the waiters of all.
  std::shared_ptr<allocation::Allocator> Chain(
      const platform::Place& place, platform::Stream stream,
      std::shared_ptr<allocation::Allocator> raw, layers::OomRecoveryAllocator::Recover recover,
      std::shared_ptr<layers::StatAllocator::Registry> stat_counters = nullptr,
      std::function<bool()> may_free = nullptr,
      std::shared_ptr<strategies::DeviceReserved> device_reserved = nullptr,
      std::shared_ptr<history::HistoryRecorder> history = nullptr,
      std::shared_ptr<layers::RetryWaiters> retry_waiters = nullptr) const;
  // A CUDA graph pool's chain on GPU `place` (graph_pools.h): statistics (counting into
  // `stat_counters`) over an auto-growth pool that never frees on its own, over the place's
  // device memory (`raw`, or plain device memory under the flag's limit where `raw` is the
  // shared virtual-memory pool).
  GraphPools::PoolChain GraphPoolChain(
      const platform::Place& place, std::shared_ptr<allocation::Allocator> raw,
      std::shared_ptr<layers::StatAllocator::Registry> stat_counters,
      std::shared_ptr<history::HistoryRecorder> history = nullptr) const;
  // The named-cache layer over a chain's statistics layer.
  std::shared_ptr<allocation::Allocator> ScopedCacheLayer(
      const platform::Place& place, platform::Stream stream,
      std::shared_ptr<allocation::Allocator> stat) const;

 private:
  // What a host place's pool may hold: its fraction of the host's physical memory.
  std::size_t HostCap(const platform::Place& place) const;
  std::shared_ptr<allocation::Allocator> DeviceChain(
      const platform::Place& place, platform::Stream stream,
      std::shared_ptr<allocation::Allocator> raw, layers::OomRecoveryAllocator::Recover recover,
      std::function<bool()> may_free, std::shared_ptr<strategies::DeviceReserved> device_reserved,
      std::shared_ptr<history::HistoryRecorder> history,
      std::shared_ptr<layers::RetryWaiters> retry_waiters) const;
  std::shared_ptr<strategies::AutoGrowthBestFitAllocator> AutoGrowth(
      const platform::Place& place, std::shared_ptr<allocation::Allocator> below,
      std::shared_ptr<strategies::DeviceReserved> device_reserved) const;
  std::shared_ptr<allocation::Allocator> BuddyStrategy(
      const platform::Place& place, std::shared_ptr<allocation::Allocator> below) const;

  platform::DeviceRuntime* const runtime_;
  const flags::AllocatorFlags flags_;
  const bool per_stream_;
  const bool virtual_memory_;
};

}  // namespace strata::facade
