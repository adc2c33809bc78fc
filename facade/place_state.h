// The facade's per-place state and per-stream chains (internal to facade/allocator_facade*.cc):
// what AllocatorFacade keeps for each place, and the lookups every part of the facade shares.
//
// Thread safety: as documented on each field; a PlaceState, once published, lives as long as
// the facade, and so does every Chain it holds.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "facade/allocator_facade.h"
#include "facade/chain_builder.h"
#include "facade/graph_pools.h"

namespace strata::facade {

class NamedCache;

// One chain: the top allocator of a stream (or of the whole place). `top` is `stat`, or the
// scoped-cache layer over it once the place has named caches: that layer is only put in when a
// cache is first asked for, so programs that never use cache scopes never pay for it.
struct AllocatorFacade::Chain {
  platform::Stream stream;
  int number = 0;  // the place's streams in order of first use, the null stream 0 (snapshots)
  std::shared_ptr<allocation::Allocator> stat;
  std::shared_ptr<allocation::Allocator> scoped;
  std::atomic<allocation::Allocator*> top{nullptr};
  // The runtime's count of destroyed streams when `stream` was last found alive; a different
  // count makes the next allocation check the stream again (AllocatorFacade::CheckStreamLive).
  std::atomic<std::uint64_t> live_as_of{0};
  // EndStream: a fence after the work of the stream that is about to be destroyed; the next
  // allocation on the handle (a stream CUDA gave it to later) waits for it on the device, so
  // that the blocks and pages this chain's layers keep for the handle are reused in order.
  std::atomic<bool> ended{false};
  absl::Mutex end_mu;
  platform::Event end_fence ABSL_GUARDED_BY(end_mu);

  allocation::Allocator& Top() const { return *top.load(std::memory_order_acquire); }
};

// A place: what its chains share (the ChainContext the builder builds them from: the place, its
// raw layer, counters, history, recovery and retry hooks; set in BuildPlace, then only read), and
// the facade's own state.
struct AllocatorFacade::PlaceState : ChainContext {
  std::shared_ptr<allocation::Allocator> zero_size;
  std::unique_ptr<GraphPools> graphs;  // GPU places only
  // Whether an allocation needs AfterAlloc (garbage collection, init_allocated_mem).
  bool after_alloc = false;
  std::atomic<Chain*> default_chain{nullptr};
  // The first kFastChains chains, readable without `mu`: a chain lives as long as the facade,
  // so a published pointer stays valid. Frameworks use a few streams per device; lookups on
  // more streams than this take `mu` (shared).
  static constexpr int kFastChains = 16;
  std::array<std::atomic<Chain*>, kFastChains> fast_chains{};
  std::atomic<int> num_fast_chains{0};
  absl::Mutex mu;  // guards chains and caches
  absl::flat_hash_map<void*, std::unique_ptr<Chain>> chains ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<std::string, std::unique_ptr<NamedCache>> caches ABSL_GUARDED_BY(mu);
  bool scoped_caches ABSL_GUARDED_BY(mu) = false;  // chains carry the scoped-cache layer
  int streams ABSL_GUARDED_BY(mu) = 0;             // chains of non-null streams so far
};

inline AllocatorFacade::PlaceState& AllocatorFacade::StateOf(const platform::Place& place) {
  // Hot: one atomic load for the CPU and the first kFastDevices GPUs.
  PlaceState* s = nullptr;
  if (place.is_cuda()) {
    if (static_cast<unsigned>(place.device()) < kFastDevices) {
      s = gpu_states_[place.device()].load(std::memory_order_acquire);
    }
  } else if (place.is_cpu() && place.device() == 0) {  // another device is refused slowly
    s = cpu_state_.load(std::memory_order_acquire);
  }
  return s != nullptr ? *s : StateOfSlow(place);
}

inline void AllocatorFacade::CheckStreamLive(const PlaceState& state, Chain& chain) {
  // Hot: the default stream (never destroyed) pays one compare; another stream a load and a
  // compare more (two where the runtime counts destructions), until a stream is destroyed or
  // ended.
  if (chain.stream.is_default()) return;
  if (streams_destroyed_ != nullptr && chain.live_as_of.load(std::memory_order_relaxed) !=
                                           streams_destroyed_->load(std::memory_order_relaxed))
      [[unlikely]] {
    RecheckStream(state, chain);
  }
  if (chain.ended.load(std::memory_order_acquire)) [[unlikely]]
    OrderAfterEnd(chain);
}

template <typename F>
void AllocatorFacade::ForEachChain(PlaceState& state, F&& f) {
  std::vector<Chain*> chains;
  {
    absl::ReaderMutexLock lock(&state.mu);
    for (auto& [handle, chain] : state.chains) chains.push_back(chain.get());
  }
  // In order of first use, not the handles' hash order: what a chain's layers give back while
  // visited (a stream-safe layer's pending frees, reclaimed by CollectStats) reaches a pool
  // shared by the chains in the same order in every run.
  std::sort(chains.begin(), chains.end(),
            [](const Chain* a, const Chain* b) { return a->number < b->number; });
  for (Chain* c : chains) f(*c);
}

}  // namespace strata::facade
