#include "facade/allocator_facade.h"

#include <cxxabi.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "absl/strings/str_format.h"
#include "allocation/bad_alloc.h"
#include "facade/named_cache.h"
#include "facade/place_state.h"
#include "flags/flag_sources.h"
#include "glog/logging.h"
#include "layers/stat_allocator.h"
#include "layers/stream_safe_cuda_allocator.h"
#include "platform/cuda_runtime.h"
#include "reporting/memory_summary.h"
#include "reporting/snapshot_json.h"

namespace strata::facade {

using allocation::Allocation;
using allocation::AllocationPtr;
using allocation::Allocator;
using platform::Place;
using platform::Stream;

AllocatorFacade& AllocatorFacade::Instance() {
  static AllocatorFacade* instance = [] {
    std::string why;
    platform::DeviceRuntime* runtime = nullptr;
    if (platform::CUDARuntime::Available(&why)) {
      runtime = &platform::CUDARuntime::Instance();
    } else {
      VLOG(4) << "strata: CUDA places unavailable: " << why;
    }
    // The environment (FLAGS_<name>, STRATA_ALLOC_CONF) applies even when the program never
    // parsed a command line; a no-op once loaded, so it never undoes ParseCommandLine.
    flags::EnsureLoadedFromEnvironment();
    return new AllocatorFacade(runtime, flags::Current());
  }();
  return *instance;
}

namespace {
std::atomic<std::uint64_t> g_next_facade_id{1};
}  // namespace

AllocatorFacade::AllocatorFacade(platform::DeviceRuntime* runtime,
                                 const flags::AllocatorFlags& flags)
    : id_(g_next_facade_id.fetch_add(1, std::memory_order_relaxed)),
      recording_runtime_(runtime != nullptr ? std::make_unique<history::RecordingRuntime>(runtime)
                                            : nullptr),
      builder_(recording_runtime_.get(), flags),
      streams_destroyed_(recording_runtime_ != nullptr ? recording_runtime_->StreamDestroyCount()
                                                       : nullptr) {
  VLOG(4) << "strata facade: " << builder_.flags().DebugString() << " on "
          << (runtime ? runtime->Name() : "no device runtime");
}

AllocatorFacade::~AllocatorFacade() {
  // The places' pools give their memory back as they go, after their recorders.
  if (recording_runtime_ != nullptr) recording_runtime_->DetachAll();
  absl::MutexLock lock(&places_mu_);
  for (auto& [place, state] : places_) {
    absl::MutexLock state_lock(&state->mu);
    state->caches.clear();  // gives cached blocks back before the chains go
    for (auto& [handle, chain] : state->chains) {
      absl::MutexLock end_lock(&chain->end_mu);
      if (!chain->end_fence.valid()) continue;
      ended_streams_->Forget(chain->stream);
      runtime()->DestroyEvent(chain->end_fence);  // never waited on
    }
  }
}

AllocationPtr AllocatorFacade::Alloc(const Place& place, std::size_t size) {
  PlaceState& state = StateOf(place);
  if (size == 0) return state.zero_size->Allocate(0);
  if (state.graphs != nullptr && state.graphs->routing() != 0) [[unlikely]] {
    if (AllocationPtr a = MaybeAllocFromGraphPool(state, size, Stream{})) return a;
  }
  Chain* chain = state.default_chain.load(std::memory_order_acquire);
  if (chain == nullptr) {
    chain = &ChainFor(state, Stream{});
    Chain* expected = nullptr;
    state.default_chain.compare_exchange_strong(expected, chain);
    chain = state.default_chain.load(std::memory_order_acquire);
  }
  return AllocOn(state, *chain, size);
}

AllocationPtr AllocatorFacade::Alloc(const Place& place, std::size_t size, Stream stream) {
  PlaceState& state = StateOf(place);
  if (size == 0) return state.zero_size->Allocate(0);
  if (state.graphs != nullptr && state.graphs->routing() != 0) [[unlikely]] {
    if (AllocationPtr a = MaybeAllocFromGraphPool(state, size, stream)) return a;
  }
  // The default stream's chain (and the only chain without per-stream chains) needs no lock.
  Chain* chain = state.default_chain.load(std::memory_order_acquire);
  if (chain != nullptr && (chain->stream == stream || !builder_.per_stream())) {
    return AllocOn(state, *chain, size);
  }
  return AllocOn(state, ChainFor(state, stream), size);
}

AllocationPtr AllocatorFacade::MaybeAllocFromGraphPool(PlaceState& state, std::size_t size,
                                                       Stream stream) {
  std::shared_ptr<Allocator> pool = state.graphs->Route(stream);
  if (pool == nullptr) return nullptr;
  AllocationPtr result;
  bool failed = false;
  try {
    result = pool->Allocate(size);
  } catch (allocation::BadAlloc& e) {
    StashOom(e);
    failed = true;
  }
  if (failed) [[unlikely]]
    ThrowOom(state, size, stream);
  if (builder_.flags().init_allocated_mem) [[unlikely]]
    runtime()->MemsetAsync(result->ptr(), 0xEF, result->size(), stream);
  return result;
}

namespace {
// The failure being reported, between the handler that caught it and ThrowOom: a thread-local
// rather than a local of the allocating function, whose hot path then keeps only a flag.
thread_local std::optional<allocation::BadAlloc> t_oom;
}  // namespace

void AllocatorFacade::StashOom(allocation::BadAlloc& e) { t_oom.emplace(std::move(e)); }

void AllocatorFacade::ThrowOom(PlaceState& state, std::size_t size, Stream stream) {
  // Outside the handler that caught it: a thread that ends inside an observer (a forced unwind)
  // cannot leave through a handler that holds another exception (the C++ runtime terminates).
  allocation::BadAlloc e = std::move(*t_oom);
  t_oom.reset();
  OnOom(state, e, size, stream);
  throw e;
}

void AllocatorFacade::OnOom(PlaceState& state, allocation::BadAlloc& e, std::size_t size,
                            Stream stream) {
  // The failing pool knows only its own figures (its stream's, or a graph's); the user needs the
  // device's (what other streams hold counts too).
  const allocation::MemoryStats s = PlaceStats(state);
  e.set_pool_usage(static_cast<std::uint64_t>(s.allocated_bytes[allocation::kAggregate].current),
                   static_cast<std::uint64_t>(s.reserved_bytes[allocation::kAggregate].current));
  if (state.history->recording()) {
    state.history->Record(history::EventKind::kOom, std::uint64_t{0}, size, stream);
  }
  if (num_observers_.load(std::memory_order_acquire) == 0) return;
  // An observer that allocates from this place and fails must not be called again from inside.
  thread_local bool in_observer = false;
  if (in_observer) return;
  std::vector<Observer> observers;
  {
    absl::MutexLock lock(&observers_mu_);
    observers = observers_;
  }
  in_observer = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{in_observer};
  OomReport report{state.place, stream, size, s, std::string(), e.what()};
  for (const Observer& o : observers) {
    if (o.with_snapshot && report.snapshot.empty()) report.snapshot = Snapshot(state.place);
    try {
      o.fn(report);
    } catch (abi::__forced_unwind&) {
      throw;  // the thread is ending inside the observer (capi/guard.h): let it
    } catch (const std::exception& x) {
      LOG(ERROR) << "strata: an out-of-memory observer threw: " << x.what();
    } catch (...) {
      LOG(ERROR) << "strata: an out-of-memory observer threw";
    }
  }
}

int AllocatorFacade::AddOomObserver(OomObserver observer, bool with_snapshot) {
  if (!observer) throw std::invalid_argument("strata: AddOomObserver needs an observer");
  absl::MutexLock lock(&observers_mu_);
  static std::atomic<int> next_id{1};  // every facade's: ids are never reused
  const int id = next_id.fetch_add(1, std::memory_order_relaxed);
  if (id <= 0) throw std::length_error("strata: out of out-of-memory observer ids");
  observers_.push_back({id, std::move(observer), with_snapshot});
  num_observers_.store(static_cast<int>(observers_.size()), std::memory_order_release);
  return id;
}

void AllocatorFacade::RemoveOomObserver(int id) {
  absl::MutexLock lock(&observers_mu_);
  auto it = std::find_if(observers_.begin(), observers_.end(),
                         [id](const Observer& o) { return o.id == id; });
  if (it == observers_.end()) {
    throw std::invalid_argument(absl::StrCat("strata: no out-of-memory observer with id ", id));
  }
  observers_.erase(it);
  num_observers_.store(static_cast<int>(observers_.size()), std::memory_order_release);
}

GraphPools& AllocatorFacade::GraphsOf(const Place& place) {
  if (!place.is_cuda()) {
    throw std::invalid_argument(
        absl::StrCat("strata: CUDA graph pools exist on GPU places, not ", place.ToString()));
  }
  return *StateOf(place).graphs;
}

void AllocatorFacade::BeginAllocateToPool(const Place& place, GraphPools::PoolId id,
                                          GraphPools::Filter filter) {
  GraphsOf(place).Begin(id, std::move(filter));
}

void AllocatorFacade::EndAllocateToPool(const Place& place, GraphPools::PoolId id) {
  GraphsOf(place).End(id);
}

void AllocatorFacade::ReleasePool(const Place& place, GraphPools::PoolId id) {
  GraphsOf(place).Release(id);
}

inline AllocationPtr AllocatorFacade::AllocOn(PlaceState& state, Chain& chain, std::size_t size) {
  CheckStreamLive(state, chain);  // a stream destroyed after its chain was made: refused
  AllocationPtr result;
  bool failed = false;
  try {
    result = chain.Top().Allocate(size);
  } catch (allocation::BadAlloc& e) {
    StashOom(e);
    failed = true;
  }
  if (failed) [[unlikely]]
    ThrowOom(state, size, chain.stream);
  if (state.after_alloc) [[unlikely]]
    AfterAlloc(state, chain, *result);
  return result;
}

void AllocatorFacade::AfterAlloc(PlaceState& state, Chain& chain, Allocation& result) {
  if (state.device_reserved != nullptr &&
      state.device_reserved->collect.load(std::memory_order_relaxed)) {
    // garbage_collection_threshold: a pool found the device past its target; every pool's idle
    // memory goes (outside the pools' locks).
    if (state.device_reserved->collect.exchange(false)) {
      const std::uint64_t released = ReleaseAll(state);
      VLOG(1) << "strata: garbage collection on " << state.place << " released " << released
              << " bytes";
    }
  }
  if (builder_.flags().init_allocated_mem && result.ptr() != nullptr) {
    // Paddle's debugging aid: fill new memory with a recognisable garbage pattern.
    if (state.place.is_cuda()) {
      runtime()->MemsetAsync(result.ptr(), 0xEF, result.size(), chain.stream);
    } else {
      std::memset(result.ptr(), 0xEF, result.size());
    }
  }
}

allocation::SharedAllocation AllocatorFacade::AllocShared(const Place& place, std::size_t size) {
  return allocation::ToShared(Alloc(place, size));
}

allocation::SharedAllocation AllocatorFacade::AllocShared(const Place& place, std::size_t size,
                                                          Stream stream) {
  return allocation::ToShared(Alloc(place, size, stream));
}

std::uint64_t AllocatorFacade::ReleaseAll(PlaceState& state) {
  if (state.graphs != nullptr && state.graphs->routing() != 0) {
    VLOG(1) << "strata: a CUDA graph capture is underway on " << state.place
            << ": nothing is released (a device free would invalidate it)";
    return 0;
  }
  std::uint64_t bytes = 0;
  ForEachChain(state, [&](Chain& c) { bytes += c.Top().Release(state.place); });
  if (state.graphs != nullptr) bytes += state.graphs->ReleaseRetired();
  return bytes;
}

std::uint64_t AllocatorFacade::Release(const Place& place) {
  PlaceState& state = StateOf(place);
  const std::uint64_t bytes = ReleaseAll(state);
  VLOG(1) << "strata: released " << bytes << " bytes on " << place;
  return bytes;
}

void AllocatorFacade::SetMemoryFraction(const Place& place, double fraction) {
  if (!place.is_cuda()) {
    throw std::invalid_argument(
        absl::StrCat("strata: a memory fraction applies to GPU places, not ", place.ToString()));
  }
  if (!(fraction >= 0.0 && fraction <= 1.0)) {  // NaN fails both
    throw std::invalid_argument(
        absl::StrCat("strata: the memory fraction must be in [0, 1], got ", fraction));
  }
  PlaceState& state = StateOf(place);
  std::size_t free_bytes = 0, total = 0;
  runtime()->MemInfo(place.device(), &free_bytes, &total);
  // 0 would read as "no limit" below: the smallest limit refuses every request instead.
  const std::size_t bytes =
      fraction == 1.0 ? 0
                      : std::max<std::size_t>(
                            1, static_cast<std::size_t>(fraction * static_cast<double>(total)));
  builder_.SetMemoryLimit(state, bytes);
  VLOG(4) << "strata: memory fraction " << fraction << " of " << total << " bytes on " << place;
}

std::uint64_t AllocatorFacade::EmptyCache(const Place& place) {
  PlaceState& state = StateOf(place);
  if (state.graphs != nullptr && state.graphs->routing() != 0) {  // no wait, no free
    VLOG(1) << "strata: EmptyCache during a CUDA graph capture on " << place << " does nothing";
    return 0;
  }
  // Release first: completed pending frees reach the pool, and are then waited for too.
  const std::uint64_t released = Release(place);
  ChainBuilder::WaitBeforeEmptyCache(*state.raw);
  const std::uint64_t total = released + Release(place);
  if (state.history->recording()) {
    state.history->Record(history::EventKind::kEmptyCache, std::uint64_t{0}, total, Stream{});
  }
  return total;
}

std::uint64_t AllocatorFacade::Release(const Place& place, Stream stream) {
  PlaceState& state = StateOf(place);
  return ChainFor(state, stream).Top().Release(place);
}

bool AllocatorFacade::RecordStream(const Allocation& allocation, Stream stream) {
  auto* s = layers::StreamSafeCUDAAllocator::Find(allocation);
  if (s == nullptr) {
    // cudaFree (the system allocator) waits for the device, and host memory of the CPU place
    // has no stream; a pooled GPU or pinned block without the stream-safe layer could be reused
    // while `stream` still uses it: say so rather than pretend.
    const Place& place = allocation.place();
    if (allocation.ptr() != nullptr && !builder_.flags().use_system_allocator &&
        (place.is_cuda() || place.is_cuda_pinned())) {
      std::string why = "use_stream_safe_cuda_allocator=false";
      if (place.is_cuda() && builder_.per_stream()) {
        // The flags give every stream's chain a stream-safe layer: this block came from
        // elsewhere (a CUDA graph's private pool has none).
        why =
            "the block is not from a stream's chain (a CUDA graph pool's block, or not made by "
            "this allocator)";
      } else if (place.is_cuda()) {
        why = std::string("allocator_strategy=") +
              std::string(flags::AllocatorStrategyName(builder_.flags().allocator_strategy)) +
              (builder_.flags().use_stream_safe_cuda_allocator
                   ? " has no stream-safe layer"
                   : " with use_stream_safe_cuda_allocator=false");
      }
      throw std::invalid_argument(absl::StrCat(
          "strata: RecordStream cannot be honoured for ", place.ToString(), ": ", why,
          "; the block could be reused while the stream still uses it. Use allocator_strategy="
          "auto_growth with use_stream_safe_cuda_allocator=true (the defaults), or synchronize "
          "the stream before freeing."));
    }
    return false;
  }
  if (s->ptr() == nullptr || s->owning_stream() == stream) return false;
  s->RecordStream(stream);
  return true;
}

Stream AllocatorFacade::GetStream(const Allocation& allocation) const {
  const auto* s = layers::StreamSafeCUDAAllocator::Find(allocation);
  return s == nullptr ? Stream{} : s->owning_stream();
}

NamedCache* AllocatorFacade::GetNamedCache(const Place& place, std::string_view name) {
  PlaceState& state = StateOf(place);
  absl::MutexLock lock(&state.mu);
  if (!state.scoped_caches) {
    state.scoped_caches = true;
    for (auto& [handle, chain] : state.chains) AddScopedCacheLayer(state, *chain);
    VLOG(4) << "strata: named caches enabled on " << place;
  }
  auto& slot = state.caches[std::string(name)];
  if (slot == nullptr) slot = std::make_unique<NamedCache>(std::string(name));
  return slot.get();
}

std::uint64_t AllocatorFacade::InvalidateCache(const Place& place, std::string_view name) {
  PlaceState& state = StateOf(place);
  NamedCache* cache = nullptr;
  {
    absl::ReaderMutexLock lock(&state.mu);
    auto it = state.caches.find(std::string(name));
    if (it == state.caches.end()) return 0;
    cache = it->second.get();
  }
  return cache->Invalidate();
}

}  // namespace strata::facade
