#include "facade/allocator_facade.h"

#include <unistd.h>

#include <cstring>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "allocation/bad_alloc.h"
#include "allocation/cpu_allocator.h"
#include "allocation/cuda_pinned_allocator.h"
#include "allocation/device_allocator.h"
#include "allocation/memory_limit_allocator.h"
#include "allocation/retry_allocator.h"
#include "allocation/stat_allocator.h"
#include "allocation/stream_safe_cuda_allocation.h"
#include "allocation/stream_safe_cuda_allocator.h"
#include "allocation/zero_size_allocator.h"
#include "facade/memory_summary.h"
#include "facade/named_cache.h"
#include "facade/scoped_cache_allocator.h"
#include "flags/flag_sources.h"
#include "glog/logging.h"
#include "platform/cuda_runtime.h"
#include "strategies/auto_growth_best_fit_allocator.h"
#include "strategies/naive_best_fit_allocator.h"
#include "strategies/thread_local_allocator.h"

namespace strata::facade {

using allocation::Allocation;
using allocation::AllocationPtr;
using allocation::Allocator;
using allocation::BadAlloc;
using flags::AllocatorStrategy;
using platform::Place;
using platform::Stream;

namespace {
constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kDefaultAutoGrowthChunk = 20 * kMiB;
constexpr std::uint64_t kThreadLocalRefill = 256 * kMiB;

bool NotRecordedElsewhere(const Allocation& a) {
  const auto* s = dynamic_cast<const allocation::StreamSafeCUDAAllocation*>(&a);
  return s == nullptr || s->num_recorded_streams() == 0;
}
}  // namespace

// One chain: the top allocator of a stream (or of the whole place). `top` is `stat`, or the
// scoped-cache layer over it once the place has named caches: that layer is only put in when a
// cache is first asked for, so programs that never use cache scopes never pay for it.
struct AllocatorFacade::Chain {
  Stream stream;
  std::shared_ptr<Allocator> stat;
  std::shared_ptr<Allocator> scoped;
  std::atomic<Allocator*> top{nullptr};

  Allocator& Top() const { return *top.load(std::memory_order_acquire); }
};

struct AllocatorFacade::PlaceState {
  Place place;
  std::shared_ptr<Allocator> base;  // raw (+ limit): shared by the place's chains
  std::shared_ptr<Allocator> zero_size;
  std::atomic<Chain*> default_chain{nullptr};
  absl::Mutex mu;  // guards chains and caches
  absl::flat_hash_map<void*, std::unique_ptr<Chain>> chains ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<std::string, std::unique_ptr<NamedCache>> caches ABSL_GUARDED_BY(mu);
  bool scoped_caches ABSL_GUARDED_BY(mu) = false;  // chains carry the scoped-cache layer
  std::atomic<std::int64_t> facade_ooms{0};
};

AllocatorFacade& AllocatorFacade::Instance() {
  static AllocatorFacade* instance = [] {
    std::string why;
    platform::DeviceRuntime* runtime = nullptr;
    if (platform::CudaRuntime::Available(&why)) {
      runtime = &platform::CudaRuntime::Instance();
    } else {
      VLOG(4) << "strata: CUDA places unavailable: " << why;
    }
    return new AllocatorFacade(runtime, flags::Current());
  }();
  return *instance;
}

AllocatorFacade::AllocatorFacade(platform::DeviceRuntime* runtime,
                                 const flags::AllocatorFlags& flags)
    : runtime_(runtime),
      flags_(flags),
      per_stream_(!flags.use_system_allocator && flags.use_stream_safe_cuda_allocator &&
                  flags.allocator_strategy == AllocatorStrategy::kAutoGrowth) {
  flags_.Validate();
  VLOG(4) << "strata facade: " << flags_.DebugString() << " on "
          << (runtime_ ? runtime_->Name() : "no device runtime");
}

AllocatorFacade::~AllocatorFacade() {
  absl::MutexLock lock(&places_mu_);
  for (auto& [place, state] : places_) {
    absl::MutexLock state_lock(&state->mu);
    state->caches.clear();  // gives cached blocks back before the chains go
  }
}

AllocatorFacade::PlaceState& AllocatorFacade::StateOf(const Place& place) {
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
  if (place.is_cuda()) {
    if (runtime_ == nullptr) {
      throw std::invalid_argument(absl::StrCat("strata: cannot allocate on ", place.ToString(),
                                               ": no CUDA device runtime is available"));
    }
    if (place.device() < 0 || place.device() >= runtime_->DeviceCount()) {
      throw std::invalid_argument(absl::StrCat("strata: invalid place ", place.ToString(), " (",
                                               runtime_->DeviceCount(), " device(s))"));
    }
    auto raw = std::make_shared<allocation::DeviceAllocator>(runtime_, place.device());
    state->base = std::make_shared<allocation::MemoryLimitAllocator>(
        raw, place, flags_.gpu_memory_limit_mb * kMiB);
  } else if (place.is_cuda_pinned()) {
    if (runtime_ == nullptr) {
      throw std::invalid_argument("strata: cannot allocate pinned memory: no device runtime");
    }
    state->base = std::make_shared<allocation::CUDAPinnedAllocator>(runtime_);
  } else {
    state->base = std::make_shared<allocation::CPUAllocator>();
  }
  state->zero_size = std::make_shared<allocation::ZeroSizeAllocator>(state->base, place);
  VLOG(4) << "strata: place " << place << " ready";
  return state;
}

AllocatorFacade::Chain& AllocatorFacade::ChainFor(PlaceState& state, Stream stream) {
  if (!per_stream_ || !state.place.is_cuda()) stream = Stream{};
  {
    absl::ReaderMutexLock lock(&state.mu);
    auto it = state.chains.find(stream.handle);
    if (it != state.chains.end()) return *it->second;
  }
  absl::MutexLock lock(&state.mu);
  auto it = state.chains.find(stream.handle);
  if (it == state.chains.end()) {
    it = state.chains.emplace(stream.handle, BuildChain(state, stream)).first;
    VLOG(4) << "strata: chain for " << state.place << " " << stream << " created";
  }
  return *it->second;
}

std::unique_ptr<AllocatorFacade::Chain> AllocatorFacade::BuildChain(PlaceState& state,
                                                                    Stream stream) {
  const Place& place = state.place;
  auto chain = std::make_unique<Chain>();
  chain->stream = stream;
  // Every chain of the place draws on the same raw (+ limit) allocator.
  std::shared_ptr<Allocator> a = state.base;
  if (flags_.use_system_allocator) {
    chain->stat = std::make_shared<allocation::StatAllocator>(a);
    chain->top.store(chain->stat.get(), std::memory_order_release);
    return chain;
  }
  a = MakeStrategy(place, std::move(a));
  if (place.is_cuda()) {
    if (per_stream_) {
      a = std::make_shared<allocation::StreamSafeCUDAAllocator>(
          a, runtime_, place, stream, [this, &state](const Place&) { return ReleaseAll(state); });
    }
    a = std::make_shared<allocation::RetryAllocator>(a, flags_.gpu_allocator_retry_time);
  }
  chain->stat = std::make_shared<allocation::StatAllocator>(a);
  chain->top.store(chain->stat.get(), std::memory_order_release);
  if (state.scoped_caches) AddScopedCacheLayer(state, *chain);
  return chain;
}

void AllocatorFacade::AddScopedCacheLayer(PlaceState& state, Chain& chain) {
  chain.scoped = std::make_shared<ScopedCacheAllocator>(chain.stat, state.place, chain.stream,
                                                        &NotRecordedElsewhere);
  // Allocations made before keep freeing through the layers that made them.
  chain.top.store(chain.scoped.get(), std::memory_order_release);
}

std::shared_ptr<Allocator> AllocatorFacade::MakeStrategy(const Place& place,
                                                         std::shared_ptr<Allocator> below) {
  using strategies::BuddyAllocator;
  if (place.is_cuda() && flags_.allocator_strategy == AllocatorStrategy::kAutoGrowth) {
    return std::make_shared<strategies::AutoGrowthBestFitAllocator>(std::move(below), place,
                                                                    AutoGrowthOptions(place));
  }
  BuddyAllocator::Options o;
  if (place.is_cuda()) {
    o.fraction = flags_.fraction_of_gpu_memory_to_use;
    o.initial_bytes = flags_.initial_gpu_memory_in_mb * kMiB;
    o.reallocate_bytes = flags_.reallocate_gpu_memory_in_mb * kMiB;
    platform::DeviceRuntime* runtime = runtime_;
    const int device = place.device();
    o.available_bytes = [runtime, device] {
      std::size_t free_bytes = 0, total = 0;
      runtime->MemInfo(device, &free_bytes, &total);
      return free_bytes;
    };
  } else {
    // Host places: Paddle's naive best-fit over host memory, sized by the host fractions.
    o.fraction = place.is_cpu() ? flags_.fraction_of_cpu_memory_to_use
                                : flags_.fraction_of_cuda_pinned_memory_to_use;
    if (place.is_cpu()) o.initial_bytes = flags_.initial_cpu_memory_in_mb * kMiB;
    o.available_bytes = [] {
      return static_cast<std::size_t>(sysconf(_SC_AVPHYS_PAGES)) *
             static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    };
    o.chunk_granularity = 4096;
  }
  if (place.is_cuda() && flags_.allocator_strategy == AllocatorStrategy::kThreadLocal) {
    // Every thread refills its own pool: a fraction of the device per thread would leave the
    // sixth thread nothing, so unset sizes mean kThreadLocalRefill per refill.
    if (o.initial_bytes == 0) o.initial_bytes = kThreadLocalRefill;
    if (o.reallocate_bytes == 0) o.reallocate_bytes = kThreadLocalRefill;
    return std::make_shared<strategies::ThreadLocalAllocator>(std::move(below), place, o);
  }
  return std::make_shared<strategies::NaiveBestFitAllocator>(std::move(below), place, o);
}

strategies::AutoGrowthBestFitAllocator::Options AllocatorFacade::AutoGrowthOptions(
    const Place& place) const {
  strategies::AutoGrowthBestFitAllocator::Options o;
  // Growth policy (measured on real PyTorch traces, docs/BENCHMARKS.md): one pool for all sizes,
  // grown by at least 20 MiB (PyTorch's large-buffer size), and idle chunks are given back
  // before the reservation would reach a new high. Together these keep peak reserved within a
  // few percent of peak requested at fewer device mallocs than PyTorch's segments.
  o.chunk_size = flags_.auto_growth_chunk_size_in_mb != 0
                     ? flags_.auto_growth_chunk_size_in_mb * kMiB
                     : kDefaultAutoGrowthChunk;
  o.small_size = 0;
  o.release_idle_before_new_peak = true;
  o.free_idle_chunk = flags_.free_idle_chunk;
  o.free_when_no_cache_hit = flags_.free_when_no_cache_hit;
  o.max_split_size = flags_.max_split_size_mb * kMiB;
  if (flags_.roundup_power2_divisions.enabled()) {
    for (int i = 0; i < flags::RoundupPower2Divisions::kIntervals; ++i) {
      o.roundup_power2_divisions.push_back(flags_.roundup_power2_divisions.divisions(i));
    }
  }
  o.garbage_collection_threshold = flags_.garbage_collection_threshold;
  if (o.garbage_collection_threshold > 0) {
    // The threshold is a fraction of the memory limit, or of the device when there is none.
    std::size_t free_bytes = 0, total = 0;
    runtime_->MemInfo(place.device(), &free_bytes, &total);
    o.memory_limit = flags_.gpu_memory_limit_mb != 0 ? flags_.gpu_memory_limit_mb * kMiB : total;
  }
  return o;
}

AllocationPtr AllocatorFacade::Alloc(const Place& place, std::size_t size) {
  PlaceState& state = StateOf(place);
  if (size == 0) return state.zero_size->Allocate(0);
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
  // The default stream's chain (and the only chain without per-stream chains) needs no lock.
  Chain* chain = state.default_chain.load(std::memory_order_acquire);
  if (chain != nullptr && (chain->stream == stream || !per_stream_)) {
    return AllocOn(state, *chain, size);
  }
  return AllocOn(state, ChainFor(state, stream), size);
}

AllocationPtr AllocatorFacade::AllocOn(PlaceState& state, Chain& chain, std::size_t size) {
  AllocationPtr result;
  try {
    result = chain.Top().Allocate(size);
  } catch (const BadAlloc& first) {
    if (!state.place.is_cuda()) throw;
    // The stream's own retry gave up: every other stream's cache on this device may hold the
    // memory we need.
    const std::uint64_t released = ReleaseAll(state);
    VLOG(1) << "strata: OOM on " << state.place << " for " << size << " bytes; released "
            << released << " bytes from every stream's cache, trying once more";
    if (released == 0) {
      state.facade_ooms.fetch_add(1, std::memory_order_relaxed);
      throw;
    }
    try {
      result = chain.Top().Allocate(size);
    } catch (const BadAlloc&) {
      state.facade_ooms.fetch_add(1, std::memory_order_relaxed);
      throw;
    }
  }
  if (flags_.init_allocated_mem && result->ptr() != nullptr) {
    // Paddle's debugging aid: fill new memory with a recognisable garbage pattern.
    if (state.place.is_cuda()) {
      runtime_->MemsetAsync(result->ptr(), 0xEF, result->size(), chain.stream);
    } else {
      std::memset(result->ptr(), 0xEF, result->size());
    }
  }
  return result;
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
  std::uint64_t bytes = 0;
  ForEachChain(state, [&](Chain& c) { bytes += c.Top().Release(state.place); });
  return bytes;
}

std::uint64_t AllocatorFacade::Release(const Place& place) {
  PlaceState& state = StateOf(place);
  const std::uint64_t bytes = ReleaseAll(state);
  VLOG(1) << "strata: released " << bytes << " bytes on " << place;
  return bytes;
}

std::uint64_t AllocatorFacade::Release(const Place& place, Stream stream) {
  PlaceState& state = StateOf(place);
  return ChainFor(state, stream).Top().Release(place);
}

bool AllocatorFacade::RecordStream(const Allocation& allocation, Stream stream) {
  auto* s =
      dynamic_cast<allocation::StreamSafeCUDAAllocation*>(const_cast<Allocation*>(&allocation));
  if (s == nullptr || s->ptr() == nullptr || s->owning_stream() == stream) return false;
  s->RecordStream(stream);
  return true;
}

Stream AllocatorFacade::GetStream(const Allocation& allocation) const {
  const auto* s = dynamic_cast<const allocation::StreamSafeCUDAAllocation*>(&allocation);
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
  PlaceState& state = StateOf(place);
  allocation::MemoryStats stats;
  // Chains reach the shared raw layer themselves when no pool stands between (system
  // allocator); pools report their own segments and do not forward to the raw layer, so a
  // segment is never counted twice.
  ForEachChain(state, [&](Chain& c) { c.Top().CollectStats(&stats); });
  stats.num_ooms += state.facade_ooms.load(std::memory_order_relaxed);
  stats.max_split_size = static_cast<std::int64_t>(flags_.max_split_size_mb * kMiB);
  return stats;
}

std::string AllocatorFacade::MemorySummary(const Place& place, bool abbreviated) {
  return FormatMemorySummary(GetMemoryStats(place), place, abbreviated);
}

std::string AllocatorFacade::MemoryStatsJson(const Place& place) {
  return MemoryStatsToJson(GetMemoryStats(place));
}

void AllocatorFacade::ResetPeakStats(const Place& place) {
  PlaceState& state = StateOf(place);
  ForEachChain(state, [&](Chain& c) { c.Top().ResetPeakStats(); });
}

void AllocatorFacade::ResetAccumulatedStats(const Place& place) {
  PlaceState& state = StateOf(place);
  ForEachChain(state, [&](Chain& c) { c.Top().ResetAccumulatedStats(); });
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
  for (int i = 0; i < allocation.num_decorators(); ++i) {
    names.emplace_back(allocation.decorator(i)->Name());
  }
  return names;
}

}  // namespace strata::facade
