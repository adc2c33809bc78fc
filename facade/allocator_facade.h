// AllocatorFacade: builds and owns, per place (CPU, each GPU, pinned host) and per CUDA stream,
// the chain of decorator allocators chosen by the flags, and is the one entry point of the
// public API (strata/strata.h).
//
// Which layers make a chain is the chain builder's business (chain_builder.h); the facade
// keeps places, streams, default streams and the statistics.
//
// Contract
// - Thread-safe. Per-stream chains are created lazily under a lock; the default stream's chain
//   and a device's first 16 streams' chains are reached without one (a reader lock beyond).
// - Streams: an allocation made on stream s may be used on other streams after RecordStream;
//   its memory is reused only after the work recorded on those streams completes (never by
//   synchronizing the device).
// - Out of memory on a device: the chain's recovery layer releases every stream's cache on that
//   device and tries once more, then its retry layer waits for frees; then BadAlloc (its message
//   carries the place, request, device capacity and free memory, strata's allocated and
//   reserved bytes, a hint).
// - Bad input (unknown place, device ordinal out of range, a CUDA place without a CUDA
//   runtime, absurd sizes, a stream handle the runtime does not know when first used) ->
//   std::invalid_argument with the values involved. A stream destroyed after its first use is
//   refused the same way where the runtime reports destructions
//   (DeviceRuntime::StreamDestroyCount: the emulated runtime does; CUDA's cannot see a
//   framework's cudaStreamDestroy): its chain checks the stream again, once, after any stream
//   was destroyed, so the hot path pays one load and compare. The chain stays: its handle may
//   come back for a new stream, which then uses it, after the old stream's work where the
//   framework called EndStream before destroying it.
// - Statistics: per place. The statistics layers of a device's per-stream chains count into one
//   set, so current and peak figures are the device's (a peak is the device's peak, not a sum of
//   per-stream peaks); the device's reserved memory is counted once.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "allocation/allocator.h"
#include "allocation/memory_stats.h"
#include "facade/chain_builder.h"
#include "flags/allocator_flags.h"
#include "history/history_recorder.h"
#include "history/recording_runtime.h"
#include "platform/device_runtime.h"
#include "platform/place.h"
#include "platform/stream.h"

namespace strata::allocation {
class BadAlloc;
}  // namespace strata::allocation

namespace strata::facade {

class NamedCache;

class AllocatorFacade {
 public:
  // What an out-of-memory observer is told (AddOomObserver).
  struct OomReport {
    platform::Place place;
    platform::Stream stream;
    std::size_t requested = 0;
    allocation::MemoryStats stats;  // the place's, at the failure
    std::string snapshot;           // Snapshot(place) when the observer asked for it, else empty
    std::string message;            // the BadAlloc's message
  };
  using OomObserver = std::function<void(const OomReport&)>;

  // The process-wide facade: flags from the environment (FLAGS_<name>, STRATA_ALLOC_CONF) and
  // the command line if parsed (flag_sources.h), the CUDA runtime when a GPU is usable (else
  // CUDA places are refused).
  static AllocatorFacade& Instance();

  // `runtime` may be null (then only host places work); it must outlive the facade.
  AllocatorFacade(platform::DeviceRuntime* runtime, const flags::AllocatorFlags& flags);
  ~AllocatorFacade();
  AllocatorFacade(const AllocatorFacade&) = delete;
  AllocatorFacade& operator=(const AllocatorFacade&) = delete;

  allocation::AllocationPtr Alloc(const platform::Place& place, std::size_t size);
  allocation::AllocationPtr Alloc(const platform::Place& place, std::size_t size,
                                  platform::Stream stream);
  allocation::SharedAllocation AllocShared(const platform::Place& place, std::size_t size);
  allocation::SharedAllocation AllocShared(const platform::Place& place, std::size_t size,
                                           platform::Stream stream);

  // Returns cached memory of `place` (all its streams, or one stream's chain) to the device.
  std::uint64_t Release(const platform::Place& place);
  std::uint64_t Release(const platform::Place& place, platform::Stream stream);
  // Release on every stream of the place, completed pending frees included: what
  // torch.cuda.empty_cache() does. The one call that may wait for the device (the virtual-memory
  // pool's pages of pending work); Release never does.
  std::uint64_t EmptyCache(const platform::Place& place);

  // Marks `allocation` as used on `stream`; false when there is nothing to record (host or
  // empty allocations, the owning stream, a chain without stream safety).
  // PyTorch's set_per_process_memory_fraction: caps what GPU `place` may hold at `fraction` of
  // the device's memory (or at gpu_memory_limit_mb where that is lower); 1 leaves only the
  // flag's cap. Memory above a lowered cap stays until freed; requests past it are refused
  // (BadAlloc naming the limit) after the cache is released. Throws std::invalid_argument for
  // a fraction outside [0, 1] (or NaN) or a place that is not a GPU.
  void SetMemoryFraction(const platform::Place& place, double fraction);
  // CUDA graph capture on GPU `place` (graph_pools.h; PyTorch's begin/end-allocate-to-pool and
  // release-pool hooks): from BeginAllocateToPool until EndAllocateToPool, allocations whose
  // stream passes `filter` come from the private pool `id`, which stays the graph's until
  // ReleasePool drops its last user. While a capture routes, nothing here frees device memory
  // (Release and EmptyCache give back nothing; CUDA refuses a free during a capture). Throws
  // std::invalid_argument for a place that is not a GPU, an End or Release without a Begin.
  void BeginAllocateToPool(const platform::Place& place, GraphPools::PoolId id,
                           GraphPools::Filter filter);
  void EndAllocateToPool(const platform::Place& place, GraphPools::PoolId id);
  void ReleasePool(const platform::Place& place, GraphPools::PoolId id);
  // Marks `allocation` as used on `stream` too (see Streams above): true when recorded, false
  // when there is nothing to record (its own stream, a size-0 or CPU allocation, the system
  // allocator, whose cudaFree waits for the device). Throws std::invalid_argument when the block
  // cannot be guarded: a GPU chain without the stream-safe layer (naive_best_fit, thread_local,
  // use_stream_safe_cuda_allocator=false), or pinned memory with that flag off. Pinned memory
  // belongs to no stream: every stream recorded on it (the default one too) holds it.
  bool RecordStream(const allocation::Allocation& allocation, platform::Stream stream);
  // Whether RecordStream can guard blocks of `place` (false: it would throw).
  bool HonoursRecordStream(const platform::Place& place) const {
    return builder_.flags().use_system_allocator || place.is_cpu() ||
           (place.is_cuda() && builder_.per_stream()) ||
           (place.is_cuda_pinned() && builder_.flags().use_stream_safe_cuda_allocator);
  }
  platform::Stream GetStream(const allocation::Allocation& allocation) const;
  bool InSameStream(const allocation::Allocation& allocation, platform::Stream stream) const {
    return GetStream(allocation) == stream;
  }
  // The framework is about to destroy `stream` of GPU `place`: call before cudaStreamDestroy.
  // What strata keeps for a stream (freed blocks parked for its next request, pages whose last
  // work was on it) is keyed by its handle, and CUDA may give the handle to a stream created
  // later; that stream would then reuse them with the old stream's work still pending. EndStream
  // records a fence on `stream`; the next allocation on the handle makes its stream wait for
  // the fence on the device (no host wait), once. The memory cached for the handle stays; a
  // Release(place, stream) gives it back. A no-op for a stream never allocated on, or without
  // per-stream chains. Throws std::invalid_argument for a place that is not a GPU, the default
  // stream, a stream under graph capture, or a stream the runtime no longer knows (already
  // destroyed).
  void EndStream(const platform::Place& place, platform::Stream stream);
  // The stream Alloc(place, size) uses on that device from now on.
  void SetDefaultStream(const platform::Place& place, platform::Stream stream);
  platform::Stream GetDefaultStream(const platform::Place& place);

  // PyTorch's figures for `place`, summed over its chains (and graph pools). The aggregate
  // reserved peak is the place's own, counted where every chain draws device memory, not the
  // sum of each chain's peak; the small and large pools' peaks are such sums (upper bounds).
  allocation::MemoryStats GetMemoryStats(const platform::Place& place);
  std::string MemorySummary(const platform::Place& place, bool abbreviated = false);
  std::string MemoryStatsJson(const platform::Place& place);
  void ResetPeakStats(const platform::Place& place);
  void ResetAccumulatedStats(const platform::Place& place);

  // Memory history (docs/HISTORY.md): records the place's allocations, frees, deferred frees,
  // device calls, OOMs and empty-caches into a ring of the newest options.max_entries events
  // (restarting a recording underway). StopHistory returns the recording as trace text, or
  // writes it to `path` (gzip when it ends in ".gz"); std::logic_error when the place is not
  // recording, std::runtime_error when the file cannot be written.
  void RecordHistory(const platform::Place& place, history::HistoryOptions options);
  std::string StopHistory(const platform::Place& place);
  void StopHistory(const platform::Place& place, const std::string& path);
  bool IsRecordingHistory(const platform::Place& place);

  // Every segment and block of `place` with its statistics, as JSON (docs/HISTORY.md,
  // "Snapshots"). Segments and blocks come from the pools (every strategy lists its own; the
  // system allocator, which pools nothing, lists none: its figures are in `stats`). Consistent
  // when no other thread allocates or frees meanwhile.
  std::string Snapshot(const platform::Place& place);

  // Out-of-memory observers (PyTorch's attach_out_of_memory_observer): `observer` runs once for
  // each BadAlloc about to surface from Alloc (after the chain's recovery and retries), on the
  // allocating thread, before the exception propagates; with `with_snapshot`, the report
  // carries Snapshot(place). It may read statistics, take snapshots, log, record; it must not
  // allocate from the failing place (if such an allocation fails, no observer hears of it)
  // nor add or remove observers. An exception it throws is logged and dropped. Returns an id for
  // RemoveOomObserver, which throws std::invalid_argument for an unknown id. Ids are never
  // reused in a process, not even by another facade: an id kept across a reconfiguration of the
  // C ABI cannot remove a newer observer.
  int AddOomObserver(OomObserver observer, bool with_snapshot = false);
  void RemoveOomObserver(int id);

  // Named scoped caches (see cache_scope.h).
  NamedCache* GetNamedCache(const platform::Place& place, std::string_view name);
  // Unique in the process, never reused (unlike an address): what a CacheScope names its
  // facade by, so a scope never reaches another facade's chains, nor a destroyed one's caches.
  std::uint64_t id() const { return id_; }
  std::uint64_t InvalidateCache(const platform::Place& place, std::string_view name);

  // The names of the layers an allocation went through, innermost first (diagnostics, tests).
  static std::vector<std::string> ChainOf(const allocation::Allocation& allocation);

  const flags::AllocatorFlags& flags() const { return builder_.flags(); }
  platform::DeviceRuntime* runtime() const { return builder_.runtime(); }

 private:
  struct Chain;
  struct PlaceState;

  PlaceState& StateOf(const platform::Place& place);
  PlaceState& StateOfSlow(const platform::Place& place);
  Chain& ChainFor(PlaceState& state, platform::Stream stream);
  // The chain of `stream` if it was made, else null.
  Chain* FindChain(PlaceState& state, platform::Stream stream);
  // Throws std::invalid_argument when the runtime does not know `stream`.
  void CheckStream(const platform::Place& place, platform::Stream stream);
  // Throws as CheckStream when `chain`'s stream was destroyed since the chain last checked it;
  // after an EndStream, orders the stream after the ended stream's work (OrderAfterEnd).
  void CheckStreamLive(const PlaceState& state, Chain& chain);
  [[gnu::noinline, gnu::cold]] void OrderAfterEnd(Chain& chain);
  [[gnu::noinline, gnu::cold]] void RecheckStream(const PlaceState& state, Chain& chain);
  // Streams the runtime destroyed so far (zero when it cannot tell).
  std::uint64_t StreamsDestroyed() const {
    return streams_destroyed_ == nullptr ? 0 : streams_destroyed_->load(std::memory_order_acquire);
  }
  // Both called with state.mu held.
  std::unique_ptr<Chain> BuildChain(PlaceState& state, platform::Stream stream);
  void AddScopedCacheLayer(PlaceState& state, Chain& chain);
  std::unique_ptr<PlaceState> BuildPlace(const platform::Place& place);
  allocation::AllocationPtr AllocOn(PlaceState& state, Chain& chain, std::size_t size);
  // The rare work after an allocation: garbage collection, init_allocated_mem's fill.
  [[gnu::noinline, gnu::cold]] void AfterAlloc(PlaceState& state, Chain& chain,
                                               allocation::Allocation& result);
  // The allocation from a graph pool when a capture routes `stream` there; null otherwise.
  allocation::AllocationPtr MaybeAllocFromGraphPool(PlaceState& state, std::size_t size,
                                                    platform::Stream stream);
  GraphPools& GraphsOf(const platform::Place& place);
  // A BadAlloc about to surface from the place: the device's figures into `e`, the history, the
  // observers (called outside any catch handler: see ThrowOom).
  void OnOom(PlaceState& state, allocation::BadAlloc& e, std::size_t size, platform::Stream stream);
  // A BadAlloc caught on the allocation path: StashOom keeps it (inside the handler), ThrowOom
  // (after it) runs OnOom and throws it.
  [[gnu::cold, gnu::noinline]] static void StashOom(allocation::BadAlloc& e);
  [[noreturn, gnu::cold]] void ThrowOom(PlaceState& state, std::size_t size,
                                        platform::Stream stream);
  std::uint64_t ReleaseAll(PlaceState& state);
  // Every chain's figures of the place, the shared pool's once.
  allocation::MemoryStats PlaceStats(PlaceState& state);
  template <typename F>
  void ForEachChain(PlaceState& state, F&& f);

  // Under every chain: reports device calls to the recording places (null without a runtime).
  const std::uint64_t id_;
  const std::unique_ptr<history::RecordingRuntime> recording_runtime_;
  const ChainBuilder builder_;
  // The runtime's count of destroyed streams (DeviceRuntime::StreamDestroyCount); null when it
  // cannot tell.
  const std::atomic<std::uint64_t>* const streams_destroyed_;
  // EndStream's fences, for the stream-safe layers of every place (a stream of one device may
  // be recorded on memory of another place, pinned memory included).
  const std::shared_ptr<layers::EndedStreams> ended_streams_ =
      std::make_shared<layers::EndedStreams>();

  struct Observer {
    int id;
    OomObserver fn;
    bool with_snapshot;
  };
  absl::Mutex observers_mu_;
  std::vector<Observer> observers_ ABSL_GUARDED_BY(observers_mu_);
  std::atomic<int> num_observers_{0};

  // Places are created on first use; a place, once created, lives as long as the facade.
  absl::Mutex places_mu_;
  absl::flat_hash_map<platform::Place, std::unique_ptr<PlaceState>> places_
      ABSL_GUARDED_BY(places_mu_);
  // Lock-free lookup for the common places: CPU and GPUs 0..kFastDevices-1.
  static constexpr int kFastDevices = 16;
  std::atomic<PlaceState*> cpu_state_{nullptr};
  std::atomic<PlaceState*> gpu_states_[kFastDevices] = {};
};

}  // namespace strata::facade
