#include "support/allocator_factories.h"

#include <cstdint>
#include <utility>

#include "facade/allocator_facade.h"
#include "flags/allocator_flags.h"
#include "flags/roundup_power2_divisions.h"
#include "layers/memory_limit_allocator.h"
#include "raw/device_allocator.h"
#include "strategies/auto_growth_best_fit_allocator.h"
#include "strategies/buddy_allocator.h"
#include "strategies/naive_best_fit_allocator.h"
#include "strategies/thread_local_allocator.h"
#include "strategies/vmm_pool.h"

namespace strata::testing {
namespace {

using allocation::Allocator;
using AutoGrowth = strategies::AutoGrowthBestFitAllocator;
using Factory = AllocatorFactory;

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr platform::CUDAPlace kPlace{0};
// Beyond this, rounding a request to the device's 2 MiB granularity overflows
// (device_allocator.h); the buddy pools' own rounding overflows later still.
constexpr std::size_t kDeviceMaxRequest = SIZE_MAX - raw::DeviceAllocator::kGranularity;

// A pooling strategy (or any layer) used directly.
class LayerUnderTest : public AllocatorUnderTest {
 public:
  LayerUnderTest(std::shared_ptr<Allocator> top, std::function<std::int64_t()> allocated_bytes)
      : top_(std::move(top)), allocated_bytes_(std::move(allocated_bytes)) {}

  allocation::AllocationPtr Allocate(std::size_t size, platform::Stream) override {
    return top_->Allocate(size);
  }
  std::uint64_t Release() override { return top_->Release(kPlace); }
  allocation::MemoryStats Stats() override {
    allocation::MemoryStats stats;
    top_->CollectStats(&stats);
    return stats;
  }
  std::int64_t AllocatedBytes() override { return allocated_bytes_(); }
  bool RecordStream(const allocation::Allocation&, platform::Stream) override { return false; }

 private:
  std::shared_ptr<Allocator> top_;
  std::function<std::int64_t()> allocated_bytes_;
};

// A whole facade, used through its public API on one place.
class FacadeUnderTest : public AllocatorUnderTest {
 public:
  FacadeUnderTest(platform::DeviceRuntime* runtime, const flags::AllocatorFlags& flags)
      : facade_(runtime, flags) {}

  allocation::AllocationPtr Allocate(std::size_t size, platform::Stream stream) override {
    return facade_.Alloc(kPlace, size, stream);
  }
  std::uint64_t Release() override { return facade_.EmptyCache(kPlace); }
  allocation::MemoryStats Stats() override { return facade_.GetMemoryStats(kPlace); }
  std::int64_t AllocatedBytes() override {
    return Stats().allocated_bytes[allocation::kAggregate].current;
  }
  bool RecordStream(const allocation::Allocation& allocation, platform::Stream stream) override {
    return facade_.RecordStream(allocation, stream);
  }

 private:
  facade::AllocatorFacade facade_;
};

std::shared_ptr<Allocator> Below(platform::DeviceRuntime* runtime, std::size_t limit_bytes) {
  std::shared_ptr<Allocator> device = std::make_shared<raw::DeviceAllocator>(runtime, 0);
  if (limit_bytes == 0) return device;
  return std::make_shared<layers::MemoryLimitAllocator>(std::move(device), kPlace, limit_bytes);
}

Factory AutoGrowthFactory(std::string name, AutoGrowth::Options options,
                          std::size_t limit_bytes = 0) {
  Factory f;
  f.name = std::move(name);
  f.alignment = options.alignment;
  f.zero_size = Factory::ZeroSize::kMinimalBlock;  // "size 0 gives the minimal block"
  f.max_request = AutoGrowth::kMaxRequestBytes;
  f.make = [options = std::move(options), limit_bytes](platform::DeviceRuntime* runtime) {
    auto pool = std::make_shared<AutoGrowth>(Below(runtime, limit_bytes), kPlace, options);
    return std::make_unique<LayerUnderTest>(
        pool, [pool] { return static_cast<std::int64_t>(pool->allocated_bytes()); });
  };
  return f;
}

// Refills of a fixed size, or (refill 0) Paddle's fraction of the device's free memory.
strategies::BuddyAllocator::Options BuddyOptions(platform::DeviceRuntime* runtime,
                                                 std::size_t refill_bytes) {
  strategies::BuddyAllocator::Options o;
  o.initial_bytes = refill_bytes;
  o.reallocate_bytes = refill_bytes;
  o.available_bytes = [runtime] {
    std::size_t free_bytes = 0, total_bytes = 0;
    runtime->MemInfo(0, &free_bytes, &total_bytes);
    return free_bytes;
  };
  return o;
}

template <typename Strategy>
Factory BuddyFactory(std::string name, std::size_t refill_bytes, std::size_t limit_bytes,
                     const char* header) {
  Factory f;
  f.name = std::move(name);
  f.alignment = 256;                               // BuddyAllocator::Options::min_block_bytes
  f.zero_size = Factory::ZeroSize::kMinimalBlock;  // buddy_allocator.h: "a minimum block"
  f.max_request = kDeviceMaxRequest;
  f.no_bad_free_detection = std::string(header) +
                            " does not promise it (its BuddyAllocator detects an unknown pointer, "
                            "but the layer recycles the Allocation object at the first free)";
  f.make = [refill_bytes, limit_bytes](platform::DeviceRuntime* runtime) {
    auto pool = std::make_shared<Strategy>(Below(runtime, limit_bytes), kPlace,
                                           BuddyOptions(runtime, refill_bytes));
    return std::make_unique<LayerUnderTest>(
        pool, [pool] { return static_cast<std::int64_t>(pool->allocated_bytes()); });
  };
  return f;
}

// Seen by the suite where a request exceeds the buddy pool's largest chunk.
constexpr const char* kBuddyBypassReservedBug =
    "known bug: BuddyAllocator counts a request above max_chunk_bytes (which bypasses the pool) in "
    "reserved_bytes() / reserved_bytes at its size rounded to min_block_bytes (256 B), but the "
    "device "
    "allocation below is rounded to 2 MiB (refills are rounded to chunk_granularity, bypasses are "
    "not): reserved_bytes under-reports what the device holds by up to 2 MiB - 256 B per such "
    "block, e.g. 5 MiB + 1 B counts 5 MiB + 256 B while the device holds 6 MiB";

flags::AllocatorFlags FacadeFlags() {
  flags::AllocatorFlags flags = flags::AllocatorFlags::Defaults();
  // The default (10 s) would make every out-of-memory check wait that long for frees that
  // cannot come; 20 ms keeps the retry layer in the chain.
  flags.gpu_allocator_retry_time = 20;
  return flags;
}

Factory FacadeFactory(std::string name, flags::AllocatorFlags flags) {
  flags.Validate();
  Factory f;
  f.name = std::move(name);
  const bool auto_growth = !flags.use_system_allocator &&
                           flags.allocator_strategy == flags::AllocatorStrategy::kAutoGrowth;
  f.alignment = auto_growth ? AutoGrowth::Options().alignment : 256;
  f.zero_size = Factory::ZeroSize::kEmpty;  // the facade's zero-size allocator
  f.max_request = !auto_growth ? kDeviceMaxRequest
                  : flags.use_virtual_memory_auto_growth
                      ? strategies::VirtualMemoryPool::kMaxRequestBytes
                      : AutoGrowth::kMaxRequestBytes;
  f.no_bad_free_detection =
      "allocator_facade.h does not promise it (the statistics layer on top counts a free before "
      "the layers below could refuse it)";
  f.stream_safe = auto_growth && flags.use_stream_safe_cuda_allocator;
  f.make = [flags](platform::DeviceRuntime* runtime) {
    return std::make_unique<FacadeUnderTest>(runtime, flags);
  };
  return f;
}

std::vector<AllocatorFactory> MakeFactories() {
  std::vector<AllocatorFactory> v;

  // ---- pooling strategies over the raw device allocator ----
  v.push_back(AutoGrowthFactory("auto_growth_default", AutoGrowth::Options()));
  {
    AutoGrowth::Options o;  // the facade's growth policy: one pool, 20 MiB chunks
    o.small_size = 0;
    o.chunk_size = 20 * kMiB;
    o.release_idle_before_new_peak = true;
    v.push_back(AutoGrowthFactory("auto_growth_no_small_pool", o));
  }
  {
    AutoGrowth::Options o;
    o.max_split_size = 32 * kMiB;
    o.roundup_power2_divisions = AutoGrowth::UniformRoundup(4);
    v.push_back(AutoGrowthFactory("auto_growth_max_split_roundup", o));
  }
  {
    AutoGrowth::Options o;
    o.free_idle_chunk = true;
    o.free_when_no_cache_hit = true;
    o.alignment = 256;
    v.push_back(AutoGrowthFactory("auto_growth_free_idle_chunk", o));
  }
  {
    AutoGrowth::Options o;
    o.memory_limit = 1024 * kMiB;
    o.garbage_collection_threshold = 0.5;
    v.push_back(AutoGrowthFactory("auto_growth_gc_memory_limit", o, 1024 * kMiB));
  }
  v.push_back(BuddyFactory<strategies::NaiveBestFitAllocator>("naive_best_fit_default",
                                                              /*refill_bytes=*/0, /*limit_bytes=*/0,
                                                              "naive_best_fit_allocator.h"));
  v.push_back(BuddyFactory<strategies::NaiveBestFitAllocator>(
      "naive_best_fit_small_chunks_memory_limit", 4 * kMiB, 1024 * kMiB,
      "naive_best_fit_allocator.h"));
  v.back().known_reserved_bug = kBuddyBypassReservedBug;
  v.push_back(BuddyFactory<strategies::ThreadLocalAllocator>(
      "thread_local_default", 32 * kMiB, /*limit_bytes=*/0, "thread_local_allocator.h"));
  v.back().known_reserved_bug = kBuddyBypassReservedBug;

  // ---- whole facade chains per flag set ----
  // The default: the virtual-memory pool, one per device, shared by every stream.
  v.push_back(FacadeFactory("facade_default", FacadeFlags()));
  {
    flags::AllocatorFlags f = FacadeFlags();
    f.gpu_memory_limit_mb = 1024;
    v.push_back(FacadeFactory("facade_vmm_memory_limit", f));
    f.gpu_memory_limit_mb = 0;
    f.use_stream_safe_cuda_allocator = false;
    v.push_back(FacadeFactory("facade_vmm_no_stream_safe", f));
    f.use_stream_safe_cuda_allocator = true;
    f.virtual_memory_page_mb = 8;  // pages of four times the granularity
    v.push_back(FacadeFactory("facade_vmm_8mb_pages", f));
  }
  // The chunk pool (one auto_growth pool per stream), selected by flag.
  {
    flags::AllocatorFlags f = FacadeFlags();
    f.use_virtual_memory_auto_growth = false;
    v.push_back(FacadeFactory("facade_chunk_pool", f));
    f.use_stream_safe_cuda_allocator = false;
    v.push_back(FacadeFactory("facade_chunk_pool_no_stream_safe", f));
  }
  {
    flags::AllocatorFlags f = FacadeFlags();  // PyTorch's knobs, which the chunk pool takes
    f.use_virtual_memory_auto_growth = false;
    f.max_split_size_mb = 64;
    f.roundup_power2_divisions = flags::RoundupPower2Divisions::Uniform(4);
    f.garbage_collection_threshold = 0.6;
    f.gpu_memory_limit_mb = 1024;
    v.push_back(FacadeFactory("facade_pytorch_knobs", f));
  }
  {
    flags::AllocatorFlags f = FacadeFlags();
    f.allocator_strategy = flags::AllocatorStrategy::kNaiveBestFit;
    v.push_back(FacadeFactory("facade_naive_best_fit", f));
  }
  {
    flags::AllocatorFlags f = FacadeFlags();
    f.allocator_strategy = flags::AllocatorStrategy::kThreadLocal;
    v.push_back(FacadeFactory("facade_thread_local", f));
    v.back().known_reserved_bug = kBuddyBypassReservedBug;  // 256 MiB refills per thread
  }
  {
    flags::AllocatorFlags f = FacadeFlags();
    f.use_system_allocator = true;
    v.push_back(FacadeFactory("facade_system_allocator", f));
  }
  return v;
}

}  // namespace

const std::vector<AllocatorFactory>& AllocatorFactories() {
  static const std::vector<AllocatorFactory>* factories =
      new std::vector<AllocatorFactory>(MakeFactories());
  return *factories;
}

}  // namespace strata::testing
