#include "facade/allocator_facade.h"

#include <memory>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "facade/named_cache.h"
#include "facade/place_state.h"
#include "glog/logging.h"
#include "platform/device_runtime.h"

namespace strata::facade {

using platform::Place;
using platform::Stream;

AllocatorFacade::PlaceState& AllocatorFacade::StateOfSlow(const Place& place) {
  if (!place.is_cpu() && !place.is_cuda() && !place.is_cuda_pinned()) {
    throw std::invalid_argument(absl::StrCat("strata: unknown place type ",
                                             static_cast<int>(place.type()), " (device ",
                                             place.device(), ")"));
  }
  if (!place.is_cuda() && place.device() != 0) {
    // One host pool each: a second "device" would be a second pool with a cap of its own.
    throw std::invalid_argument(absl::StrCat("strata: ", place.is_cpu() ? "cpu" : "cuda_pinned",
                                             " places have device 0, not ", place.device()));
  }
  std::atomic<PlaceState*>* fast = nullptr;
  if (place.is_cpu()) {
    fast = &cpu_state_;
  } else if (place.is_cuda() && static_cast<unsigned>(place.device()) < kFastDevices) {
    fast = &gpu_states_[place.device()];
  }
  absl::MutexLock lock(&places_mu_);
  auto it = places_.find(place);
  if (it == places_.end()) it = places_.emplace(place, BuildPlace(place)).first;
  if (fast != nullptr) fast->store(it->second.get(), std::memory_order_release);
  return *it->second;
}

std::unique_ptr<AllocatorFacade::PlaceState> AllocatorFacade::BuildPlace(const Place& place) {
  auto state = std::make_unique<PlaceState>();
  PlaceState* s = state.get();
  // The statistics layers of the place's chains count into one set: per-device figures.
  state->stat_counters = layers::StatAllocator::NewCounters();
  state->place = place;
  state->raw = builder_.RawLayer(place);
  if (place.is_cuda()) state->graph_budget = builder_.GraphBudget(*state->raw);
  state->zero_size = builder_.ZeroSizeLayer(place, state->raw);
  state->history = std::make_shared<history::HistoryRecorder>(place.ToString());
  state->ended_streams = ended_streams_;
  if (recording_runtime_ != nullptr) {
    if (place.is_cuda()) recording_runtime_->Attach(place.device(), state->history.get());
    if (place.is_cuda_pinned()) recording_runtime_->AttachHost(state->history.get());
  }
  if (place.is_cuda() && builder_.flags().garbage_collection_threshold > 0) {
    state->device_reserved = std::make_shared<strategies::DeviceReserved>();
  }
  if (place.is_cuda()) {
    // Out of memory on one chain: every chain of the device may hold cached memory.
    state->recover = [this, s](std::size_t) { return ReleaseAll(*s); };
    state->may_free = [this, s] {
      // Waiting for memory helps only if some could come back: live blocks (another thread may
      // free them) or frees pending on other streams' work.
      const allocation::MemoryStats m = PlaceStats(*s);
      return m.allocated_bytes[allocation::kAggregate].current > 0 ||
             m.active_bytes[allocation::kAggregate].current > 0;
    };
    // Whether memory would come back with no thread acting: frees waiting for stream work.
    state->retry_waiters = layers::RetryWaiters::Create([this, s] {
      const allocation::MemoryStats m = PlaceStats(*s);
      return m.active_bytes[allocation::kAggregate].current >
             m.allocated_bytes[allocation::kAggregate].current;
    });
  }
  state->after_alloc = state->device_reserved != nullptr || builder_.flags().init_allocated_mem;
  if (place.is_cuda()) {
    state->graphs =
        std::make_unique<GraphPools>(place, [this, s] { return builder_.GraphPoolChain(*s); });
  }
  VLOG(4) << "strata: place " << place << " ready";
  return state;
}

AllocatorFacade::Chain* AllocatorFacade::FindChain(PlaceState& state, Stream stream) {
  const int published = state.num_fast_chains.load(std::memory_order_acquire);
  for (int i = 0; i < published; ++i) {
    Chain* c = state.fast_chains[i].load(std::memory_order_relaxed);
    if (c->stream == stream) return c;
  }
  if (published == PlaceState::kFastChains) {
    absl::ReaderMutexLock lock(&state.mu);
    auto it = state.chains.find(stream.handle);
    if (it != state.chains.end()) return it->second.get();
  }
  return nullptr;
}

AllocatorFacade::Chain& AllocatorFacade::ChainFor(PlaceState& state, Stream stream) {
  if (!builder_.per_stream() || !state.place.is_cuda()) stream = Stream{};
  if (Chain* c = FindChain(state, stream)) return *c;
  absl::MutexLock lock(&state.mu);
  auto it = state.chains.find(stream.handle);
  if (it == state.chains.end()) {
    // Read before the check: a stream destroyed after it makes the first allocation check again.
    const std::uint64_t destroyed = StreamsDestroyed();
    if (!stream.is_default()) CheckStream(state.place, stream);
    it = state.chains.emplace(stream.handle, BuildChain(state, stream)).first;
    it->second->live_as_of.store(destroyed, std::memory_order_relaxed);
    VLOG(4) << "strata: chain for " << state.place << " " << stream << " created";
    // Published after it is complete: the count's release orders the slot and the chain.
    if (const int n = state.num_fast_chains.load(std::memory_order_relaxed);
        n < PlaceState::kFastChains) {
      state.fast_chains[n].store(it->second.get(), std::memory_order_relaxed);
      state.num_fast_chains.store(n + 1, std::memory_order_release);
    }
  }
  return *it->second;
}

void AllocatorFacade::CheckStream(const Place& place, Stream stream) {
  // Once per stream (its chain is made once): a handle the runtime does not know (garbage, or
  // destroyed before first use) is refused rather than given a pool. A capture-status query is
  // legal during a capture, unlike a stream query.
  int device = -1;
  try {
    runtime()->IsCapturing(stream);
    device = runtime()->StreamDevice(stream);
  } catch (const platform::RuntimeError& e) {
    throw std::invalid_argument(absl::StrCat("strata: ", absl::StrFormat("%p", stream.handle),
                                             " is not a stream of ", place.ToString(),
                                             " (destroyed, or not a stream handle): ", e.what()));
  }
  // Another device's stream: the pool could not fence it (an event of this device cannot be
  // recorded there), and its work would not be ordered with this device's memory.
  if (place.is_cuda() && device >= 0 && device != place.device()) {
    throw std::invalid_argument(
        absl::StrCat("strata: stream ", absl::StrFormat("%p", stream.handle),
                     " belongs to cuda:", device, ", not ", place.ToString()));
  }
}

void AllocatorFacade::EndStream(const Place& place, Stream stream) {
  if (!place.is_cuda()) {
    throw std::invalid_argument(
        absl::StrCat("strata: EndStream applies to GPU places, not ", place.ToString()));
  }
  if (stream.is_default()) {
    throw std::invalid_argument(absl::StrCat("strata: EndStream on the default stream of ",
                                             place.ToString(), ": it is never destroyed"));
  }
  PlaceState& state = StateOf(place);
  // One chain for every stream: nothing is kept under the handle.
  if (!builder_.per_stream()) return;
  Chain* chain = FindChain(state, stream);
  if (chain == nullptr) return;  // never allocated on: nothing to order after
  absl::MutexLock lock(&chain->end_mu);
  bool created = false;
  try {
    // A record during a capture would be a node of the graph, not a fence that completes.
    if (runtime()->IsCapturing(stream)) {
      throw std::invalid_argument(absl::StrCat("strata: EndStream(", place.ToString(), ", ",
                                               absl::StrFormat("%p", stream.handle),
                                               ") during a graph capture on it: end the capture "
                                               "first"));
    }
    created = !chain->end_fence.valid();
    if (created) chain->end_fence = runtime()->CreateEvent(place.device());
    runtime()->RecordEvent(chain->end_fence, stream);
  } catch (const platform::RuntimeError& e) {
    if (created) {
      runtime()->DestroyEvent(chain->end_fence);
      chain->end_fence = {};
    }
    throw std::invalid_argument(absl::StrCat(
        "strata: EndStream(", place.ToString(), ", ", absl::StrFormat("%p", stream.handle),
        "): not a live stream (call EndStream before destroying the stream): ", e.what()));
  }
  ChainBuilder::EndStream(*state.raw, stream);
  ended_streams_->Add(stream, chain->end_fence);
  chain->ended.store(true, std::memory_order_release);
  VLOG(4) << "strata: " << stream << " of " << place
          << " ended; the next allocation on its handle waits for its work on the device";
}

void AllocatorFacade::OrderAfterEnd(Chain& chain) {
  absl::MutexLock lock(&chain.end_mu);
  if (!chain.ended.load(std::memory_order_relaxed)) return;  // another thread did it
  runtime()->StreamWaitEvent(chain.stream, chain.end_fence);
  ended_streams_->Forget(chain.stream);      // a live stream has the handle now
  runtime()->DestroyEvent(chain.end_fence);  // the wait took its snapshot
  chain.end_fence = {};
  chain.ended.store(false, std::memory_order_release);
  VLOG(6) << "strata: " << chain.stream
          << " waits on the device for the work of the stream that had its handle before";
}

void AllocatorFacade::RecheckStream(const PlaceState& state, Chain& chain) {
  // Read before the check, as in ChainFor. Racing rechecks may store an older count: that only
  // costs one more check.
  const std::uint64_t destroyed = StreamsDestroyed();
  CheckStream(state.place, chain.stream);
  chain.live_as_of.store(destroyed, std::memory_order_relaxed);
  VLOG(6) << "strata: " << chain.stream << " of " << state.place << " still alive after "
          << destroyed << " stream destructions";
}

std::unique_ptr<AllocatorFacade::Chain> AllocatorFacade::BuildChain(PlaceState& state,
                                                                    Stream stream) {
  auto chain = std::make_unique<Chain>();
  chain->stream = stream;
  chain->number = stream.handle == nullptr ? 0 : ++state.streams;
  chain->stat = builder_.Chain(state, stream);
  chain->top.store(chain->stat.get(), std::memory_order_release);
  if (state.scoped_caches) AddScopedCacheLayer(state, *chain);
  return chain;
}

void AllocatorFacade::AddScopedCacheLayer(PlaceState& state, Chain& chain) {
  chain.scoped = builder_.ScopedCacheLayer(state.place, chain.stream, id_, chain.stat);
  // Allocations made before keep freeing through the layers that made them.
  chain.top.store(chain.scoped.get(), std::memory_order_release);
}

void AllocatorFacade::SetDefaultStream(const Place& place, Stream stream) {
  PlaceState& state = StateOf(place);
  state.default_chain.store(&ChainFor(state, stream), std::memory_order_release);
  VLOG(4) << "strata: default stream of " << place << " is now " << stream;
}

Stream AllocatorFacade::GetDefaultStream(const Place& place) {
  PlaceState& state = StateOf(place);
  Chain* c = state.default_chain.load(std::memory_order_acquire);
  return c == nullptr ? Stream{} : c->stream;
}

}  // namespace strata::facade
