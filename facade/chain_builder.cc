#include "facade/chain_builder.h"

#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "facade/scoped_cache_allocator.h"
#include "glog/logging.h"
#include "layers/memory_limit_allocator.h"
#include "layers/retry_allocator.h"
#include "layers/stat_allocator.h"
#include "layers/stream_safe_cuda_allocator.h"
#include "layers/thread_cache_allocator.h"
#include "layers/zero_size_allocator.h"
#include "raw/cpu_allocator.h"
#include "raw/cuda_pinned_allocator.h"
#include "raw/device_allocator.h"
#include "strategies/auto_growth_best_fit_allocator.h"
#include "strategies/naive_best_fit_allocator.h"
#include "strategies/thread_local_allocator.h"
#include "strategies/vmm_pool.h"
#include "strategies/vmm_pool_allocator.h"

namespace strata::facade {

using allocation::Allocator;
using flags::AllocatorStrategy;
using platform::Place;
using platform::Stream;
using AllocatorPtr = std::shared_ptr<Allocator>;

namespace {
constexpr std::size_t kMiB = std::size_t{1} << 20;
// Every thread of thread_local refills its own pool: a fraction of the device per thread would
// leave the sixth thread nothing, so unset refill sizes mean this much per refill.
constexpr std::size_t kThreadLocalRefill = 256 * kMiB;

constexpr std::size_t kHostPage = 4096;

std::size_t PhysicalHostBytes() {
  return static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// The thread cache's test, on the allocations of a per-stream chain: a block recorded on other
// streams goes down to wait for their events. The recipe puts the cache right over the
// stream-safe layer, so they are that layer's allocations: a cast, not a FindLayer walk, on
// every free through the cache.
bool NotRecordedOnStreams(const allocation::Allocation& a) {
  return !static_cast<const layers::StreamSafeCUDAAllocation&>(a).has_recorded_streams();
}

bool NotRecordedElsewhere(const allocation::Allocation& a) {
  const auto* s = layers::StreamSafeCUDAAllocator::Find(a);
  return s == nullptr || s->num_recorded_streams() == 0;
}
}  // namespace

ChainBuilder::ChainBuilder(platform::DeviceRuntime* runtime, const flags::AllocatorFlags& flags)
    : runtime_(runtime),
      flags_(flags),
      per_stream_(!flags.use_system_allocator && flags.use_stream_safe_cuda_allocator &&
                  flags.allocator_strategy == AllocatorStrategy::kAutoGrowth),
      virtual_memory_(!flags.use_system_allocator &&
                      flags.allocator_strategy == AllocatorStrategy::kAutoGrowth &&
                      flags.use_virtual_memory_auto_growth) {
  flags_.Validate();
  if (virtual_memory_) {
    // The chunk pool's knobs mean nothing to the virtual-memory pool (it splits any block and
    // gives pages back by itself): say so rather than ignore them in silence.
    const bool chunk_knobs =
        flags_.max_split_size_mb != 0 || flags_.roundup_power2_divisions.enabled() ||
        flags_.garbage_collection_threshold > 0 || flags_.auto_growth_chunk_size_in_mb != 0 ||
        flags_.free_idle_chunk || flags_.free_when_no_cache_hit;
    LOG_IF(WARNING, chunk_knobs)
        << "strata: max_split_size_mb, roundup_power2_divisions, garbage_collection_threshold, "
        << "auto_growth_chunk_size_in_mb, free_idle_chunk and free_when_no_cache_hit apply to "
        << "the chunk pool; the default virtual-memory pool ignores them (set "
        << "use_virtual_memory_auto_growth=false, or expandable_segments:False, to use them)";
  }
}

std::size_t ChainBuilder::HostCap(const Place& place) const {
  const double fraction = place.is_cpu() ? flags_.fraction_of_cpu_memory_to_use
                                         : flags_.fraction_of_cuda_pinned_memory_to_use;
  // At least one byte: a cap of 0 means "no limit" to MemoryLimitAllocator, and a tiny fraction
  // must refuse, not lift, the cap.
  return std::max<std::size_t>(
      1, static_cast<std::size_t>(fraction * static_cast<double>(PhysicalHostBytes())));
}

AllocatorPtr ChainBuilder::RawLayer(const Place& place) const {
  if (place.is_cpu()) {
    // The host fractions cap what each host pool holds (not the size of each refill).
    return std::make_shared<layers::MemoryLimitAllocator>(std::make_shared<raw::CPUAllocator>(),
                                                          place, HostCap(place), kHostPage,
                                                          "fraction_of_cpu_memory_to_use");
  }
  if (runtime_ == nullptr) {
    throw std::invalid_argument(absl::StrCat("strata: cannot allocate on ", place.ToString(),
                                             ": no CUDA device runtime is available"));
  }
  if (place.is_cuda_pinned()) {
    return std::make_shared<layers::MemoryLimitAllocator>(
        std::make_shared<raw::CUDAPinnedAllocator>(runtime_), place, HostCap(place), kHostPage,
        "fraction_of_cuda_pinned_memory_to_use");
  }
  if (place.device() < 0 || place.device() >= runtime_->DeviceCount()) {
    throw std::invalid_argument(absl::StrCat("strata: invalid place ", place.ToString(), " (",
                                             runtime_->DeviceCount(), " device(s))"));
  }
  if (virtual_memory_) {
    if (const std::size_t granularity = runtime_->VmmGranularity(place.device());
        granularity != 0) {
      strategies::VirtualMemoryPool::Options o;
      o.memory_limit = flags_.gpu_memory_limit_mb * kMiB;
      o.page_bytes = flags_.virtual_memory_page_mb * kMiB;
      if (o.page_bytes != 0 && o.page_bytes < granularity) {
        throw std::invalid_argument(absl::StrCat(
            "strata: virtual_memory_page_mb=", flags_.virtual_memory_page_mb,
            " is smaller than the virtual-memory granularity of ", place.ToString(), " (",
            granularity / kMiB, " MB): must be 0 or a power-of-two multiple of it"));
      }
      o.stitch_slack_permille = flags_.virtual_memory_stitch_slack_permille;
      o.max_extent_pages = std::max<std::size_t>(
          1, flags_.virtual_memory_extent_mb * kMiB / std::max(granularity, o.page_bytes));
      auto pool = std::make_shared<strategies::VirtualMemoryPool>(runtime_, place, o);
      return std::make_shared<strategies::VmmPoolAllocator>(std::move(pool), Stream{},
                                                            /*reports_stats=*/true);
    }
    VLOG(1) << "strata: " << place << " has no virtual memory management; "
            << "use_virtual_memory_auto_growth falls back to the chunk pool (auto_growth)";
  }
  auto device = std::make_shared<raw::DeviceAllocator>(runtime_, place.device());
  return std::make_shared<layers::MemoryLimitAllocator>(std::move(device), place,
                                                        flags_.gpu_memory_limit_mb * kMiB);
}

bool ChainBuilder::ReportsDeviceFigures(const Allocator& raw) {
  return allocation::AsLayer<strategies::VmmPoolAllocator>(raw) != nullptr;
}

void ChainBuilder::WaitBeforeEmptyCache(Allocator& raw) {
  if (auto* vmm = allocation::AsLayer<strategies::VmmPoolAllocator>(raw)) {
    vmm->pool()->WaitForStreams();
  }
}

void ChainBuilder::EndStream(Allocator& raw, Stream stream) {
  if (auto* vmm = allocation::AsLayer<strategies::VmmPoolAllocator>(raw)) {
    vmm->pool()->EndStream(stream);
  }
}

void ChainBuilder::ExactReservedPeak(const Allocator& raw, allocation::MemoryStats* stats) {
  // The raw allocator's segment counter sees every device allocation of the place at once.
  allocation::MemoryStats device;
  raw.CollectStats(&device);
  const allocation::StatValue& exact = device.reserved_bytes[allocation::kAggregate];
  allocation::StatValue& all = stats->reserved_bytes[allocation::kAggregate];
  // Only where the chains count what it counts (segments of whole device pages): a pool that
  // counts its segments otherwise keeps its own figure, as does one taken while another thread
  // allocates.
  if (exact.current == all.current && exact.peak < all.peak) all.peak = exact.peak;
}

std::shared_ptr<layers::MemoryLimitAllocator::Budget> ChainBuilder::GraphBudget(
    Allocator& raw) const {
  auto* vmm = allocation::AsLayer<strategies::VmmPoolAllocator>(raw);
  if (vmm == nullptr) return nullptr;
  auto budget =
      std::make_shared<layers::MemoryLimitAllocator::Budget>(flags_.gpu_memory_limit_mb * kMiB);
  vmm->pool()->SetHeldElsewhere(&budget->reserved);
  return budget;
}

void ChainBuilder::SetMemoryLimit(const ChainContext& context, std::size_t bytes) const {
  Allocator& raw = *context.raw;
  const std::size_t flag = flags_.gpu_memory_limit_mb * kMiB;
  const std::size_t limit = flag != 0 && (bytes == 0 || flag < bytes) ? flag : bytes;
  if (auto* vmm = allocation::AsLayer<strategies::VmmPoolAllocator>(raw)) {
    vmm->pool()->SetMemoryLimit(limit);
    if (context.graph_budget != nullptr) {
      context.graph_budget->limit.store(limit, std::memory_order_relaxed);
    }
  } else if (auto* l = allocation::AsLayer<layers::MemoryLimitAllocator>(raw)) {
    l->SetLimit(limit);
  } else {
    throw std::invalid_argument(
        absl::StrCat("strata: the ", raw.Name(), " allocator takes no memory limit"));
  }
}

AllocatorPtr ChainBuilder::ZeroSizeLayer(const Place& place, AllocatorPtr raw) const {
  return std::make_shared<layers::ZeroSizeAllocator>(std::move(raw), place);
}

// A device chain's pool. Its thread cache gives blocks back to the pool before it grows: the
// chain's own chunk pool, or the device's shared virtual-memory pool (at most one is set).
struct ChainBuilder::DevicePool {
  AllocatorPtr allocator;
  strategies::AutoGrowthBestFitAllocator* chunk_pool = nullptr;  // lives as long as the chain
  std::shared_ptr<strategies::VirtualMemoryPool> shared_pool;    // outlives the chain
};

AllocatorPtr ChainBuilder::Chain(const ChainContext& context, Stream stream) const {
  AllocatorPtr below = flags_.use_system_allocator ? context.raw
                       : context.place.is_cuda()   ? DeviceChain(context, stream)
                                                   : HostChain(context);
  return StatLayer(context, stream, std::move(below));
}

AllocatorPtr ChainBuilder::DeviceChain(const ChainContext& context, Stream stream) const {
  const DevicePool pool = DevicePoolOf(context, stream);
  AllocatorPtr a = pool.allocator;
  if (per_stream_) a = StreamSafeLayer(context, stream, std::move(a));
  a = std::make_shared<layers::OomRecoveryAllocator>(std::move(a), context.recover);
  a = std::make_shared<layers::RetryAllocator>(std::move(a), flags_.gpu_allocator_retry_time,
                                               context.may_free, context.retry_waiters);
  // Above the recovery and the retry: a hit skips them, and their Release (out of memory)
  // flushes every thread's cache before any wait.
  if (per_stream_ && flags_.thread_cache_mb != 0) a = ThreadCacheLayer(std::move(a), pool);
  return a;
}

AllocatorPtr ChainBuilder::HostChain(const ChainContext& context) const {
  AllocatorPtr a = BuddyStrategy(context.place, context.raw);
  if (context.place.is_cuda_pinned() && flags_.use_stream_safe_cuda_allocator) {
    // A pinned block an async copy still reads must not be handed out again.
    a = StreamSafeLayer(context, layers::StreamSafeCUDAAllocator::HostOwner(), std::move(a));
  }
  return a;
}

ChainBuilder::DevicePool ChainBuilder::DevicePoolOf(const ChainContext& context,
                                                    Stream stream) const {
  DevicePool pool;
  if (const auto* vmm = allocation::AsLayer<strategies::VmmPoolAllocator>(*context.raw)) {
    // This stream's view of the device's shared pool.
    pool.shared_pool = vmm->pool();
    pool.allocator = std::make_shared<strategies::VmmPoolAllocator>(pool.shared_pool, stream,
                                                                    /*reports_stats=*/false);
  } else if (flags_.allocator_strategy == AllocatorStrategy::kAutoGrowth) {
    auto chunk_pool = AutoGrowth(context.place, context.raw, context.device_reserved);
    pool.chunk_pool = chunk_pool.get();
    pool.allocator = std::move(chunk_pool);
  } else {
    pool.allocator = BuddyStrategy(context.place, context.raw);
  }
  return pool;
}

AllocatorPtr ChainBuilder::StreamSafeLayer(const ChainContext& context, Stream stream,
                                           AllocatorPtr below) const {
  auto safe = std::make_shared<layers::StreamSafeCUDAAllocator>(std::move(below), runtime_,
                                                                context.place, stream);
  safe->RecordInto(context.history);
  safe->SetEndedStreams(context.ended_streams);
  return safe;
}

AllocatorPtr ChainBuilder::ThreadCacheLayer(AllocatorPtr below, const DevicePool& pool) const {
  layers::ThreadCacheAllocator::Options o;
  o.max_bytes = flags_.thread_cache_mb * kMiB;
  // The virtual-memory pool's own quick reuse hands a stream's last freed block of a size back
  // to its next request of that size, so parking a large block until the next call on this
  // chain (from any thread) hands out the same block without the pool's lock: a 16 MiB pair 57
  // -> 35 ns emulated. (Until the freeing thread's own next call, as first built, PyTorch's
  // autograd thread kept its last block from the main thread: gpt2_train end to end 1.004 ->
  // 1.028 of its peak.)
  // Of 39 replays (13 traces, three ways), 4 of multi-stream traces held less (up to 2.3 %),
  // one 0.3 % more. The pool sees fewer frees (its park list, fences and slack window count
  // only what reaches it): strata-bench's emulated mixed benchmark of trace sizes made 0.06 ->
  // 0.2 device calls per 1,000 operations, the same 0.37 on an H100; warm replays of
  // single-stream traces took 1-4 % longer (a large block that does not come back goes down one
  // call later). Over the chunk pool, whose best fit may place elsewhere, replays held up to 6 %
  // more: off there.
  o.large_until_next_call = pool.shared_pool != nullptr && flags_.max_split_size_mb == 0;
  // An oversize block (max_split_size) is counted as an allocation by the pool: never parked.
  if (flags_.max_split_size_mb != 0) {
    o.max_block_bytes = std::min(o.max_block_bytes, flags_.max_split_size_mb * kMiB - 1);
  }
  o.cacheable = &NotRecordedOnStreams;
  o.owner_plain_take = flags_.thread_cache_asymmetric_fence;
  auto cache = std::make_shared<layers::ThreadCacheAllocator>(std::move(below), o);
  // The pool asks every thread's cache for its blocks before it grows. The cache owns the
  // chain, and so the pool, which this chain alone holds: the pool never outlives it.
  if (pool.chunk_pool != nullptr) {
    pool.chunk_pool->SetBeforeGrowth(&layers::ThreadCacheAllocator::GiveBackForGrowth, cache.get());
  }
  // The device's virtual-memory pool serves every stream's chain and outlives each: it asks
  // every live chain's cache before it maps pages (without this, blocks parked per stream
  // raised its peaks on a multi-stream trace).
  if (pool.shared_pool != nullptr) {
    pool.shared_pool->AddBeforeGrowth(std::weak_ptr<void>(cache),
                                      &layers::ThreadCacheAllocator::GiveBackForGrowth);
  }
  return cache;
}

AllocatorPtr ChainBuilder::StatLayer(const ChainContext& context, Stream stream,
                                     AllocatorPtr below) {
  auto stat = std::make_shared<layers::StatAllocator>(std::move(below), context.stat_counters);
  stat->RecordInto(context.history, stream);
  return stat;
}

std::shared_ptr<strategies::AutoGrowthBestFitAllocator> ChainBuilder::AutoGrowth(
    const Place& place, AllocatorPtr below,
    std::shared_ptr<strategies::DeviceReserved> device_reserved) const {
  // The option defaults are the production growth policy (auto_growth_options.h); the flags
  // adjust it. auto_growth_chunk_size_in_mb = 0 keeps the default chunk size.
  strategies::AutoGrowthBestFitAllocator::Options o;
  if (flags_.auto_growth_chunk_size_in_mb != 0) {
    o.chunk_size = flags_.auto_growth_chunk_size_in_mb * kMiB;
  }
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
    // The threshold is PyTorch's, per device: the stream pools judge their total.
    o.device = std::move(device_reserved);
  }
  return std::make_shared<strategies::AutoGrowthBestFitAllocator>(std::move(below), place,
                                                                  std::move(o));
}

AllocatorPtr ChainBuilder::BuddyStrategy(const Place& place, AllocatorPtr below) const {
  strategies::BuddyAllocator::Options o;
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
    if (flags_.allocator_strategy == AllocatorStrategy::kThreadLocal) {
      if (o.initial_bytes == 0) o.initial_bytes = kThreadLocalRefill;
      if (o.reallocate_bytes == 0) o.reallocate_bytes = kThreadLocalRefill;
      return std::make_shared<strategies::ThreadLocalAllocator>(std::move(below), place, o);
    }
  } else {
    // Host places: Paddle's naive best-fit over host memory, in modest refills under the cap
    // of the host fraction (RawLayer): CPU refills of initial_cpu_memory_in_mb, at most 1/32 of
    // the cap; pinned refills of 1/256 of the cap (Paddle's CUDAPinnedMaxChunkSize), since
    // page-locking is costly and takes memory from the whole machine.
    const std::size_t cap = HostCap(place);
    const std::size_t refill =
        place.is_cpu() ? std::min(flags_.initial_cpu_memory_in_mb * kMiB, cap / 32) : cap / 256;
    o.initial_bytes = o.reallocate_bytes = std::max(refill, kHostPage);
    o.chunk_granularity = kHostPage;
  }
  return std::make_shared<strategies::NaiveBestFitAllocator>(std::move(below), place, o);
}

GraphPools::PoolChain ChainBuilder::GraphPoolChain(const ChainContext& context) const {
  const Place& place = context.place;
  AllocatorPtr raw = context.raw;
  if (auto* vmm = allocation::AsLayer<strategies::VmmPoolAllocator>(*raw)) {
    // Device memory of its own, under the limit the device pool has too (ChainContext).
    auto budget = context.graph_budget != nullptr
                      ? context.graph_budget
                      : std::make_shared<layers::MemoryLimitAllocator::Budget>(
                            flags_.gpu_memory_limit_mb * kMiB);
    raw = std::make_shared<layers::MemoryLimitAllocator>(
        std::make_shared<raw::DeviceAllocator>(runtime_, place.device()), place, std::move(budget),
        [pool = vmm->pool()] { return pool->physical_bytes(); });
  }
  strategies::AutoGrowthBestFitAllocator::Options o;
  // Memory a replay uses must stay: no idle-chunk frees (cudaFree is refused during a capture
  // anyway); Release gives it back once the pool is retired.
  o.free_idle_chunk = false;
  o.free_when_no_cache_hit = false;
  o.release_idle_before_new_peak = false;
  auto pool = std::make_shared<strategies::AutoGrowthBestFitAllocator>(std::move(raw), place, o);
  GraphPools::PoolChain chain;
  chain.allocated_bytes = [p = pool.get()] { return p->allocated_bytes(); };
  chain.top = StatLayer(context, Stream{}, std::move(pool));
  return chain;
}

AllocatorPtr ChainBuilder::ScopedCacheLayer(const Place& place, Stream stream,
                                            std::uint64_t facade_id, AllocatorPtr stat) const {
  return std::make_shared<ScopedCacheAllocator>(std::move(stat), place, stream, facade_id,
                                                &NotRecordedElsewhere);
}

}  // namespace strata::facade
