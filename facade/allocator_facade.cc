#include "facade/allocator_facade.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "absl/strings/str_format.h"
#include "allocation/bad_alloc.h"
#include "facade/named_cache.h"
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

// One chain: the top allocator of a stream (or of the whole place). `top` is `stat`, or the
// scoped-cache layer over it once the place has named caches: that layer is only put in when a
// cache is first asked for, so programs that never use cache scopes never pay for it.
struct AllocatorFacade::Chain {
  Stream stream;
  int number = 0;  // the place's streams in order of first use, the null stream 0 (snapshots)
  std::shared_ptr<Allocator> stat;
  std::shared_ptr<Allocator> scoped;
  std::atomic<Allocator*> top{nullptr};

  Allocator& Top() const { return *top.load(std::memory_order_acquire); }
};

struct AllocatorFacade::PlaceState {
  Place place;
  std::shared_ptr<Allocator> raw;  // raw (+ limit): shared by the place's chains
  std::shared_ptr<Allocator> zero_size;
  std::unique_ptr<GraphPools> graphs;  // GPU places only
  std::shared_ptr<history::HistoryRecorder> history;
  // What the place's pools hold together, for garbage_collection_threshold (null when off).
  std::shared_ptr<strategies::DeviceReserved> device_reserved;
  // Whether an allocation needs AfterAlloc (garbage collection, init_allocated_mem).
  bool after_alloc = false;
  // The statistics layers of the place's chains count into one set: per-device figures.
  std::shared_ptr<allocation::StatAllocator::Registry> stat_counters =
      allocation::StatAllocator::NewCounters();
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

AllocatorFacade::AllocatorFacade(platform::DeviceRuntime* runtime,
                                 const flags::AllocatorFlags& flags)
    : recording_runtime_(runtime != nullptr ? std::make_unique<history::RecordingRuntime>(runtime)
                                            : nullptr),
      builder_(recording_runtime_.get(), flags) {
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
  }
}

inline AllocatorFacade::PlaceState& AllocatorFacade::StateOf(const Place& place) {
  // Hot: one atomic load for the CPU and the first kFastDevices GPUs.
  PlaceState* s = nullptr;
  if (place.is_cuda()) {
    if (static_cast<unsigned>(place.device()) < kFastDevices) {
      s = gpu_states_[place.device()].load(std::memory_order_acquire);
    }
  } else if (place.is_cpu()) {
    s = cpu_state_.load(std::memory_order_acquire);
  }
  return s != nullptr ? *s : StateOfSlow(place);
}

AllocatorFacade::PlaceState& AllocatorFacade::StateOfSlow(const Place& place) {
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
  state->place = place;
  state->raw = builder_.RawLayer(place);
  state->zero_size = builder_.ZeroSizeLayer(place, state->raw);
  state->history = std::make_shared<history::HistoryRecorder>(place.ToString());
  if (recording_runtime_ != nullptr) {
    if (place.is_cuda()) recording_runtime_->Attach(place.device(), state->history.get());
    if (place.is_cuda_pinned()) recording_runtime_->AttachHost(state->history.get());
  }
  if (place.is_cuda() && builder_.flags().garbage_collection_threshold > 0) {
    state->device_reserved = std::make_shared<strategies::DeviceReserved>();
  }
  state->after_alloc = state->device_reserved != nullptr || builder_.flags().init_allocated_mem;
  if (place.is_cuda()) {
    PlaceState* s = state.get();
    state->graphs = std::make_unique<GraphPools>(place, [this, s] {
      return builder_.GraphPoolChain(s->place, s->raw, s->stat_counters, s->history);
    });
  }
  VLOG(4) << "strata: place " << place << " ready";
  return state;
}

AllocatorFacade::Chain& AllocatorFacade::ChainFor(PlaceState& state, Stream stream) {
  if (!builder_.per_stream() || !state.place.is_cuda()) stream = Stream{};
  const int published = state.num_fast_chains.load(std::memory_order_acquire);
  for (int i = 0; i < published; ++i) {
    Chain* c = state.fast_chains[i].load(std::memory_order_relaxed);
    if (c->stream == stream) return *c;
  }
  if (published == PlaceState::kFastChains) {
    absl::ReaderMutexLock lock(&state.mu);
    auto it = state.chains.find(stream.handle);
    if (it != state.chains.end()) return *it->second;
  }
  absl::MutexLock lock(&state.mu);
  auto it = state.chains.find(stream.handle);
  if (it == state.chains.end()) {
    if (!stream.is_default()) CheckStream(state.place, stream);
    it = state.chains.emplace(stream.handle, BuildChain(state, stream)).first;
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
  try {
    runtime()->IsCapturing(stream);
  } catch (const platform::RuntimeError& e) {
    throw std::invalid_argument(absl::StrCat("strata: ", absl::StrFormat("%p", stream.handle),
                                             " is not a stream of ", place.ToString(),
                                             " (destroyed, or not a stream handle): ", e.what()));
  }
}

std::unique_ptr<AllocatorFacade::Chain> AllocatorFacade::BuildChain(PlaceState& state,
                                                                    Stream stream) {
  auto chain = std::make_unique<Chain>();
  chain->stream = stream;
  chain->number = stream.handle == nullptr ? 0 : ++state.streams;
  // Out of memory on one chain: every chain of the device may hold cached memory.
  chain->stat = builder_.Chain(
      state.place, stream, state.raw, [this, &state](std::size_t) { return ReleaseAll(state); },
      state.stat_counters,
      [this, &state] {
        // Waiting for memory helps only if some could come back: live blocks (another thread
        // may free them) or frees pending on other streams' work.
        const allocation::MemoryStats s = PlaceStats(state);
        return s.allocated_bytes[allocation::kAggregate].current > 0 ||
               s.active_bytes[allocation::kAggregate].current > 0;
      },
      state.device_reserved, state.history);
  chain->top.store(chain->stat.get(), std::memory_order_release);
  if (state.scoped_caches) AddScopedCacheLayer(state, *chain);
  return chain;
}

void AllocatorFacade::AddScopedCacheLayer(PlaceState& state, Chain& chain) {
  chain.scoped = builder_.ScopedCacheLayer(state.place, chain.stream, chain.stat);
  // Allocations made before keep freeing through the layers that made them.
  chain.top.store(chain.scoped.get(), std::memory_order_release);
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
  try {
    result = pool->Allocate(size);
  } catch (allocation::BadAlloc& e) {
    OnOom(state, e, size, stream);
    throw;
  }
  if (builder_.flags().init_allocated_mem) [[unlikely]]
    runtime()->MemsetAsync(result->ptr(), 0xEF, result->size(), stream);
  return result;
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
  OomReport report{state.place, stream, size, s, std::string(), e.what()};
  for (const Observer& o : observers) {
    if (o.with_snapshot && report.snapshot.empty()) report.snapshot = Snapshot(state.place);
    try {
      o.fn(report);
    } catch (const std::exception& x) {
      LOG(ERROR) << "strata: an out-of-memory observer threw: " << x.what();
    } catch (...) {
      LOG(ERROR) << "strata: an out-of-memory observer threw";
    }
  }
  in_observer = false;
}

int AllocatorFacade::AddOomObserver(OomObserver observer, bool with_snapshot) {
  if (!observer) throw std::invalid_argument("strata: AddOomObserver needs an observer");
  absl::MutexLock lock(&observers_mu_);
  const int id = next_observer_id_++;
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
  AllocationPtr result;
  try {
    result = chain.Top().Allocate(size);
  } catch (allocation::BadAlloc& e) {
    OnOom(state, e, size, chain.stream);
    throw;
  }
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

template <typename F>
void AllocatorFacade::ForEachChain(PlaceState& state, F&& f) {
  std::vector<Chain*> chains;
  {
    absl::ReaderMutexLock lock(&state.mu);
    for (auto& [handle, chain] : state.chains) chains.push_back(chain.get());
  }
  for (Chain* c : chains) f(*c);
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
  builder_.SetMemoryLimit(*state.raw, bytes);
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

void AllocatorFacade::RecordHistory(const Place& place, history::HistoryOptions options) {
  StateOf(place).history->Start(std::move(options));
}

std::string AllocatorFacade::StopHistory(const Place& place) {
  return StateOf(place).history->Stop();
}

void AllocatorFacade::StopHistory(const Place& place, const std::string& path) {
  StateOf(place).history->StopTo(path);
}

bool AllocatorFacade::IsRecordingHistory(const Place& place) {
  return StateOf(place).history->recording();
}

std::uint64_t AllocatorFacade::Release(const Place& place, Stream stream) {
  PlaceState& state = StateOf(place);
  return ChainFor(state, stream).Top().Release(place);
}

bool AllocatorFacade::RecordStream(const Allocation& allocation, Stream stream) {
  auto* s = allocation::StreamSafeCUDAAllocator::Find(allocation);
  if (s == nullptr) {
    // cudaFree (the system allocator) waits for the device, and host memory of the CPU place
    // has no stream; a pooled GPU or pinned block without the stream-safe layer could be reused
    // while `stream` still uses it: say so rather than pretend.
    const Place& place = allocation.place();
    if (allocation.ptr() != nullptr && !builder_.flags().use_system_allocator &&
        (place.is_cuda() || place.is_cuda_pinned())) {
      std::string why = "use_stream_safe_cuda_allocator=false";
      if (place.is_cuda()) {
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
  const auto* s = allocation::StreamSafeCUDAAllocator::Find(allocation);
  return s == nullptr ? Stream{} : s->owning_stream();
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

allocation::MemoryStats AllocatorFacade::GetMemoryStats(const Place& place) {
  return PlaceStats(StateOf(place));
}

allocation::MemoryStats AllocatorFacade::PlaceStats(PlaceState& state) {
  allocation::MemoryStats stats;
  // Chains reach the shared raw layer themselves when no pool stands between (system
  // allocator); pools report their own segments and do not forward to the raw layer, so a
  // segment is never counted twice.
  ForEachChain(state, [&](Chain& c) { c.Top().CollectStats(&stats); });
  if (state.graphs != nullptr) state.graphs->CollectStats(&stats);
  // A pool shared by the chains (virtual memory) reports once, through the raw layer.
  if (ChainBuilder::ReportsDeviceFigures(*state.raw)) state.raw->CollectStats(&stats);
  stats.max_split_size = static_cast<std::int64_t>(builder_.flags().max_split_size_mb << 20);
  if (runtime() != nullptr)
    stats.num_host_waits = static_cast<std::int64_t>(runtime()->SyncCount());
  return stats;
}

std::string AllocatorFacade::MemorySummary(const Place& place, bool abbreviated) {
  return FormatMemorySummary(GetMemoryStats(place), place, abbreviated);
}

std::string AllocatorFacade::MemoryStatsJson(const Place& place) {
  return MemoryStatsToJson(GetMemoryStats(place));
}

std::string AllocatorFacade::Snapshot(const Place& place) {
  PlaceState& state = StateOf(place);
  allocation::MemorySnapshot snapshot;
  const bool shared = !place.is_cuda() || !builder_.per_stream();
  ForEachChain(state, [&](Chain& c) {
    snapshot.set_pool(place.is_cuda()
                          ? (shared ? std::string("device") : absl::StrCat("stream ", c.number))
                          : std::string("host"));
    c.Top().Snapshot(&snapshot);
  });
  if (ChainBuilder::ReportsDeviceFigures(*state.raw)) {  // the pool shared by every stream
    snapshot.set_pool("device");
    state.raw->Snapshot(&snapshot);
  }
  if (state.graphs != nullptr) state.graphs->Snapshot(&snapshot);
  {
    absl::ReaderMutexLock lock(&state.mu);
    for (const auto& [name, cache] : state.caches) cache->MarkBlocks(&snapshot);
  }
  return SnapshotToJson(snapshot, place, PlaceStats(state));
}

void AllocatorFacade::ResetPeakStats(const Place& place) {
  PlaceState& state = StateOf(place);
  ForEachChain(state, [&](Chain& c) { c.Top().ResetPeakStats(); });
  if (ChainBuilder::ReportsDeviceFigures(*state.raw)) state.raw->ResetPeakStats();
}

void AllocatorFacade::ResetAccumulatedStats(const Place& place) {
  PlaceState& state = StateOf(place);
  ForEachChain(state, [&](Chain& c) { c.Top().ResetAccumulatedStats(); });
  if (ChainBuilder::ReportsDeviceFigures(*state.raw)) state.raw->ResetAccumulatedStats();
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

std::vector<std::string> AllocatorFacade::ChainOf(const Allocation& allocation) {
  std::vector<std::string> names;
  names.reserve(allocation.num_decorators());
  for (int i = 0; i < allocation.num_decorators(); ++i) {
    names.emplace_back(allocation.decorator(i)->Name());
  }
  return names;
}

}  // namespace strata::facade
