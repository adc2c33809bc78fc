#include "facade/allocator_facade.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "allocation/bad_alloc.h"
#include "facade/cache_scope.h"
#include "facade/named_cache.h"
#include "glog/logging.h"
#include "platform/emulated_runtime.h"
#include "platform/fault_injection_runtime.h"
#include "platform/forwarding_runtime.h"
#include "support/facade_fixture.h"
#include "support/runtimes.h"
#include "support/threads.h"

namespace strata::facade {
namespace {

using allocation::AllocationPtr;
using allocation::kAggregate;
using flags::AllocatorFlags;
using flags::AllocatorStrategy;
using platform::CPUPlace;
using platform::CUDAPlace;
using platform::Stream;
using test_facade::DestroyStreams;
using test_facade::Flags;
using test_facade::PoolFlags;
using test_facade::Small;

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// size 0 x use_system_allocator x use_stream_safe_cuda_allocator x strategy -> layers.
class PriorityTableTest
    : public ::testing::TestWithParam<std::tuple<bool, bool, bool, AllocatorStrategy>> {};

std::string PriorityName(
    const ::testing::TestParamInfo<std::tuple<bool, bool, bool, AllocatorStrategy>>& info) {
  return std::string(std::get<0>(info.param) ? "size0_" : "size1_") +
         (std::get<1>(info.param) ? "system_" : "") +
         (std::get<2>(info.param) ? "streamsafe_" : "") +
         std::string(flags::AllocatorStrategyName(std::get<3>(info.param)));
}

TEST_P(PriorityTableTest, ChainFollowsFlagPriority) {
  const auto [zero, system, stream_safe, strategy] = GetParam();
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, Flags(strategy, system, stream_safe));
  AllocationPtr a = facade.Alloc(CUDAPlace(0), zero ? 0 : 4096);
  const std::vector<std::string> chain = AllocatorFacade::ChainOf(*a);
  std::string joined;
  for (auto& n : chain) joined += n + " ";
  SCOPED_TRACE(joined);
  if (zero) {
    EXPECT_EQ(a->size(), 0u);
    EXPECT_TRUE(Contains(chain, "zero_size"));
    EXPECT_FALSE(Contains(chain, "device"));
    return;
  }
  ASSERT_FALSE(chain.empty());
  if (system) {
    EXPECT_EQ(chain.front(), "device");
    EXPECT_TRUE(Contains(chain, "stat"));
    for (const char* caching :
         {"auto_growth_best_fit", "naive_best_fit", "thread_local", "stream_safe_cuda", "retry"}) {
      EXPECT_FALSE(Contains(chain, caching)) << caching;
    }
    return;
  }
  // auto_growth's default is the virtual-memory pool (the emulated device has VMM).
  const char* expected_strategy = strategy == AllocatorStrategy::kAutoGrowth     ? "vmm_pool"
                                  : strategy == AllocatorStrategy::kNaiveBestFit ? "naive_best_fit"
                                                                                 : "thread_local";
  EXPECT_TRUE(Contains(chain, expected_strategy));
  EXPECT_EQ(Contains(chain, "stream_safe_cuda"),
            stream_safe && strategy == AllocatorStrategy::kAutoGrowth);
  EXPECT_EQ(Contains(chain, "thread_cache"),
            stream_safe && strategy == AllocatorStrategy::kAutoGrowth);
  EXPECT_TRUE(Contains(chain, "retry"));
  EXPECT_TRUE(Contains(chain, "stat"));
}

// The default pool is the virtual-memory pool where the device has VMM; a device without it, or
// use_virtual_memory_auto_growth=false, gets the chunk pool (one per stream) with its thread cache.
class NoVmmRuntime : public platform::ForwardingRuntime {
 public:
  explicit NoVmmRuntime(platform::DeviceRuntime* base) : ForwardingRuntime(base, "NoVmmRuntime") {}
  std::size_t VmmGranularity(int /*device*/) override { return 0; }
};

TEST(AllocatorFacadeTest, TheDefaultPoolIsTheVirtualMemoryPoolWhereTheDeviceHasVmm) {
  platform::EmulatedRuntime emulated(Small());
  NoVmmRuntime no_vmm(&emulated);
  struct Case {
    platform::DeviceRuntime* runtime;
    bool use_vmm;
    const char* pool;
  };
  for (const Case& c :
       {Case{&emulated, true, "vmm_pool"}, Case{&no_vmm, true, "auto_growth_best_fit"},
        Case{&emulated, false, "auto_growth_best_fit"}}) {
    AllocatorFlags f = Flags();
    EXPECT_TRUE(f.use_virtual_memory_auto_growth);  // the default
    f.use_virtual_memory_auto_growth = c.use_vmm;
    AllocatorFacade facade(c.runtime, f);
    AllocationPtr a = facade.Alloc(CUDAPlace(0), 4096);
    const std::vector<std::string> chain = AllocatorFacade::ChainOf(*a);
    std::string joined;
    for (auto& n : chain) joined += n + " ";
    SCOPED_TRACE(joined);
    EXPECT_EQ(chain.front(), c.pool);
    EXPECT_TRUE(Contains(chain, "stream_safe_cuda"));
    EXPECT_TRUE(Contains(chain, "thread_cache"));
  }
}

INSTANTIATE_TEST_SUITE_P(AllCombinations, PriorityTableTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(AllocatorStrategy::kNaiveBestFit,
                                                              AllocatorStrategy::kAutoGrowth,
                                                              AllocatorStrategy::kThreadLocal)),
                         PriorityName);

TEST(AllocatorFacadeTest, StatisticsIdentitiesAndEmptyCache) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, Flags());
  {
    std::vector<AllocationPtr> live;
    for (int i = 1; i < 200; ++i) live.push_back(facade.Alloc(CUDAPlace(0), i * 7919));
    auto s = facade.GetMemoryStats(CUDAPlace(0));
    EXPECT_LE(s.allocated_bytes[kAggregate].current, s.reserved_bytes[kAggregate].current);
    EXPECT_LE(s.requested_bytes[kAggregate].current, s.allocated_bytes[kAggregate].current);
    EXPECT_EQ(s.allocation[kAggregate].current, 199);
    for (int i = 0; i < 100; ++i) live.erase(live.begin() + i % live.size());
  }
  facade.EmptyCache(CUDAPlace(0));
  auto s = facade.GetMemoryStats(CUDAPlace(0));
  EXPECT_EQ(s.reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(s.allocated_bytes[kAggregate].current, 0);
  EXPECT_EQ(s.num_device_alloc, s.num_device_free);
  EXPECT_GT(s.num_device_alloc, 0);
  EXPECT_EQ(runtime.used_bytes(0), 0u);
}

TEST(AllocatorFacadeTest, OomReleasesEveryStreamsCacheThenRetries) {
  platform::EmulatedRuntime runtime(Small(std::size_t{64} << 20));
  AllocatorFacade facade(&runtime, Flags());
  Stream s1 = runtime.CreateStream(0), s2 = runtime.CreateStream(0);
  // Stream 1 caches 40 MiB after its free; stream 2 then needs 40 MiB of the 64.
  facade.Alloc(CUDAPlace(0), std::size_t{40} << 20, s1).reset();
  EXPECT_GE(runtime.used_bytes(0), std::size_t{40} << 20);
  AllocationPtr b = facade.Alloc(CUDAPlace(0), std::size_t{40} << 20, s2);
  EXPECT_NE(b->ptr(), nullptr);
  b.reset();
  facade.EmptyCache(CUDAPlace(0));
  EXPECT_EQ(runtime.used_bytes(0), 0u);
  runtime.DestroyStream(s1);
  runtime.DestroyStream(s2);
}

TEST(AllocatorFacadeTest, OomMessageWhenNothingHelps) {
  platform::EmulatedRuntime runtime(Small(std::size_t{64} << 20));
  AllocatorFacade facade(&runtime, Flags());
  AllocationPtr a = facade.Alloc(CUDAPlace(0), std::size_t{40} << 20);
  try {
    facade.Alloc(CUDAPlace(0), std::size_t{40} << 20);
    FAIL();
  } catch (const allocation::BadAlloc& e) {
    EXPECT_NE(std::string(e.what()).find("Tried to allocate 40.00 MiB"), std::string::npos)
        << e.what();
  }
  // One OOM surfaced: counted once (by the statistics layer), after one recovery attempt.
  const allocation::MemoryStats s = facade.GetMemoryStats(CUDAPlace(0));
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_GE(s.num_alloc_retries, 1);
}

// The process-wide facade reads FLAGS_<name> and STRATA_ALLOC_CONF even when the program never
// parsed a command line. Run in a child process: Instance() is built once per process.
TEST(AllocatorFacadeTest, InstanceReadsTheEnvironment) {
  EXPECT_EXIT(
      {
        setenv("FLAGS_gpu_memory_limit_mb", "123", 1);
        setenv("STRATA_ALLOC_CONF", "max_split_size_mb:64", 1);
        const flags::AllocatorFlags& f = AllocatorFacade::Instance().flags();
        std::exit(f.gpu_memory_limit_mb == 123 && f.max_split_size_mb == 64 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(AllocatorFacadeTest, MemoryLimitIsEnforcedBeforeTheDevice) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFlags f = Flags();
  f.gpu_memory_limit_mb = 16;
  AllocatorFacade facade(&runtime, f);
  AllocationPtr a = facade.Alloc(CUDAPlace(0), std::size_t{10} << 20);
  const auto mallocs = runtime.malloc_count();
  try {
    facade.Alloc(CUDAPlace(0), std::size_t{10} << 20);
    FAIL();
  } catch (const allocation::BadAlloc& e) {
    EXPECT_NE(std::string(e.what()).find("gpu_memory_limit_mb"), std::string::npos) << e.what();
  }
  EXPECT_EQ(runtime.malloc_count(), mallocs);
}

// set_per_process_memory_fraction: a cap on the device, lowered and raised at run time, under
// both device pools; the flag's lower limit still holds.
TEST(AllocatorFacadeTest, MemoryFractionCapsTheDeviceAndCanChange) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  for (bool vmm : {false, true}) {
    SCOPED_TRACE(vmm ? "virtual memory pool" : "per-stream pools");
    platform::EmulatedRuntime runtime(Small());  // 1 GiB
    AllocatorFlags f = Flags();
    f.use_virtual_memory_auto_growth = vmm;
    f.gpu_allocator_retry_time = 0;
    AllocatorFacade facade(&runtime, f);
    const platform::Place gpu = CUDAPlace(0);
    facade.SetMemoryFraction(gpu, 0.25);
    AllocationPtr a = facade.Alloc(gpu, 200 * kMiB);
    try {
      facade.Alloc(gpu, 100 * kMiB);
      FAIL() << "300 MiB fit under a quarter of 1 GiB";
    } catch (const allocation::BadAlloc& e) {
      EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
    }
    facade.SetMemoryFraction(gpu, 0.5);
    AllocationPtr b = facade.Alloc(gpu, 100 * kMiB);
    facade.SetMemoryFraction(gpu, 0.0);
    EXPECT_THROW(facade.Alloc(gpu, 64 * kMiB), allocation::BadAlloc) << "fraction 0: nothing";
    a.reset();
    b.reset();
    facade.SetMemoryFraction(gpu, 1.0);
    AllocationPtr c = facade.Alloc(gpu, 600 * kMiB);
    c.reset();
    EXPECT_THROW(facade.SetMemoryFraction(gpu, -0.1), std::invalid_argument);
    EXPECT_THROW(facade.SetMemoryFraction(gpu, 1.5), std::invalid_argument);
    EXPECT_THROW(facade.SetMemoryFraction(gpu, std::nan("")), std::invalid_argument);
    EXPECT_THROW(facade.SetMemoryFraction(CPUPlace(), 0.5), std::invalid_argument);
    facade.EmptyCache(gpu);
  }
  // The flag's limit is lower than the fraction's: the flag's holds.
  platform::EmulatedRuntime runtime(Small());
  AllocatorFlags f = Flags();
  f.gpu_memory_limit_mb = 64;
  f.gpu_allocator_retry_time = 0;
  AllocatorFacade facade(&runtime, f);
  facade.SetMemoryFraction(CUDAPlace(0), 0.5);
  EXPECT_THROW(facade.Alloc(CUDAPlace(0), 100 * kMiB), allocation::BadAlloc);
}

TEST(AllocatorFacadeTest, SummaryLayout) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, Flags());
  AllocationPtr a = facade.Alloc(CUDAPlace(0), 3 << 20);
  AllocationPtr b = facade.Alloc(CUDAPlace(0), 1000);
  const std::string t = facade.MemorySummary(CUDAPlace(0));
  for (const char* row :
       {"Allocated memory", "Active memory", "Requested memory", "GPU reserved memory",
        "Non-releasable memory", "Allocations", "Active allocs", "GPU reserved segments",
        "Non-releasable allocs", "from large pool", "from small pool", "Cur Usage", "Peak Usage",
        "Tot Alloc", "Tot Freed", "OOMs", "alloc retries"}) {
    EXPECT_NE(t.find(row), std::string::npos) << row << "\n" << t;
  }
  // A table: every line as wide as the first.
  std::vector<std::string> lines = absl::StrSplit(t, '\n', absl::SkipEmpty());
  ASSERT_GT(lines.size(), 40u);
  for (const std::string& line : lines) EXPECT_EQ(line.size(), lines[0].size()) << line;
  const std::string json = facade.MemoryStatsJson(CUDAPlace(0));
  EXPECT_NE(json.find("\"allocation.all.current\": 2"), std::string::npos) << json;
  // Host waits are the runtime's count: none so far, one after an explicit synchronize.
  EXPECT_EQ(facade.GetMemoryStats(CUDAPlace(0)).num_host_waits, 0);
  runtime.SynchronizeDevice(0);
  EXPECT_EQ(facade.GetMemoryStats(CUDAPlace(0)).num_host_waits, 1);
  EXPECT_NE(facade.MemoryStatsJson(CUDAPlace(0)).find("\"num_host_waits\": 1"), std::string::npos);
}

TEST(AllocatorFacadeTest, ScopedCacheSecondIterationMakesNoDeviceMalloc) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, Flags());
  auto iteration = [&] {
    CacheScope scope(facade, CUDAPlace(0), "loop");
    std::vector<AllocationPtr> tensors;
    for (int i = 1; i <= 50; ++i) tensors.push_back(facade.Alloc(CUDAPlace(0), i * 100003));
  };
  iteration();
  const auto mallocs = runtime.malloc_count();
  NamedCache* cache = facade.GetNamedCache(CUDAPlace(0), "loop");
  EXPECT_EQ(cache->cached_blocks(), 50u);
  iteration();
  EXPECT_EQ(runtime.malloc_count(), mallocs);
  EXPECT_EQ(cache->hits(), 50u);
  EXPECT_GT(facade.InvalidateCache(CUDAPlace(0), "loop"), 0u);
  EXPECT_EQ(cache->cached_blocks(), 0u);
  facade.EmptyCache(CUDAPlace(0));
  EXPECT_EQ(runtime.used_bytes(0), 0u);
}

// A block allocated in a named scope but freed after the scope closed still returns to that
// cache (GPUArrays.jl's rule), until the cache is invalidated.
TEST(AllocatorFacadeTest, BlocksOutlivingTheirScopeReturnToItsCache) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, Flags());
  NamedCache* cache = facade.GetNamedCache(CUDAPlace(0), "outputs");
  AllocationPtr out;
  {
    CacheScope scope(facade, CUDAPlace(0), "outputs");
    out = facade.Alloc(CUDAPlace(0), 3 << 20);
  }
  void* const addr = out->ptr();
  out.reset();  // no scope active any more
  EXPECT_EQ(cache->cached_blocks(), 1u) << "the block left its cache";
  {
    CacheScope scope(facade, CUDAPlace(0), "outputs");
    out = facade.Alloc(CUDAPlace(0), 3 << 20);
    EXPECT_EQ(out->ptr(), addr);
    EXPECT_EQ(cache->hits(), 1u);
  }
  facade.InvalidateCache(CUDAPlace(0), "outputs");
  out.reset();  // allocated before the invalidation: freed down the chain
  EXPECT_EQ(cache->cached_blocks(), 0u);
  facade.EmptyCache(CUDAPlace(0));
  EXPECT_EQ(runtime.used_bytes(0), 0u);
}

// Strategies without the stream-safe layer, and pinned memory, cannot honour RecordStream: an
// error naming why, not a silent false.
TEST(AllocatorFacadeTest, RecordStreamThatCannotBeHonouredIsRefused) {
  platform::EmulatedRuntime runtime(Small());
  for (auto strategy : {AllocatorStrategy::kNaiveBestFit, AllocatorStrategy::kThreadLocal}) {
    AllocatorFlags f = Flags(strategy);
    f.initial_gpu_memory_in_mb = 64;
    AllocatorFacade facade(&runtime, f);
    Stream s = runtime.CreateStream(0);
    AllocationPtr a = facade.Alloc(CUDAPlace(0), 1 << 20);
    try {
      facade.RecordStream(*a, s);
      ADD_FAILURE() << "RecordStream pretended to guard a block it cannot";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(flags::AllocatorStrategyName(strategy))),
                std::string::npos)
          << e.what();
    }
    a.reset();
    runtime.DestroyStream(s);
  }
  AllocatorFlags f = Flags();
  f.use_system_allocator = true;  // cudaFree waits: nothing to record, no error
  AllocatorFacade facade(&runtime, f);
  Stream s = runtime.CreateStream(0);
  AllocationPtr a = facade.Alloc(CUDAPlace(0), 1 << 20);
  EXPECT_FALSE(facade.RecordStream(*a, s));
  a.reset();
  runtime.DestroyStream(s);
}

// garbage_collection_threshold is per device, as in PyTorch: three streams each caching 300 MiB
// would hold 900 MiB against a 512 MiB target (0.5 of 1 GiB); growth past the device's target
// releases the other streams' idle memory.
TEST(AllocatorFacadeTest, GarbageCollectionThresholdIsPerDevice) {
  platform::EmulatedRuntime runtime(Small());  // 1 GiB
  AllocatorFlags f = Flags();
  f.garbage_collection_threshold = 0.5;
  AllocatorFacade facade(&runtime, f);
  std::vector<Stream> streams;
  for (int i = 0; i < 3; ++i) {
    streams.push_back(runtime.CreateStream(0));
    AllocationPtr a = facade.Alloc(CUDAPlace(0), std::size_t{300} << 20, streams.back());
  }
  const auto reserved = facade.GetMemoryStats(CUDAPlace(0)).reserved_bytes[kAggregate].current;
  EXPECT_LE(reserved, std::int64_t{512} << 20) << "the device's target was ignored";
  EXPECT_GE(reserved, std::int64_t{300} << 20);
  for (Stream s : streams) runtime.DestroyStream(s);
}

// A cross-stream free whose work is done is not active: the statistics reclaim it, rather than
// counting it until the next allocation.
TEST(AllocatorFacadeTest, ActiveBytesDropCompletedCrossStreamFrees) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, Flags());
  Stream s1 = runtime.CreateStream(0), s2 = runtime.CreateStream(0);
  AllocationPtr a = facade.Alloc(CUDAPlace(0), 8 << 20, s1);
  ASSERT_TRUE(facade.RecordStream(*a, s2));
  a.reset();                      // pending on s2's event
  runtime.SynchronizeStream(s2);  // s2 idle: the event is complete
  const allocation::MemoryStats s = facade.GetMemoryStats(CUDAPlace(0));
  EXPECT_EQ(s.active_bytes[kAggregate].current, 0);
  EXPECT_EQ(s.allocated_bytes[kAggregate].current, 0);
  runtime.DestroyStream(s1);
  runtime.DestroyStream(s2);
}

// PyTorch's oversize_allocations: requests of at least max_split_size, counted live and in total.
TEST(AllocatorFacadeTest, OversizeAllocationsAreCounted) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFlags f = test_facade::ChunkPoolFlags();  // max_split_size is the chunk pool's
  f.max_split_size_mb = 32;
  AllocatorFacade facade(&runtime, f);
  AllocationPtr big = facade.Alloc(CUDAPlace(0), std::size_t{64} << 20);
  AllocationPtr small = facade.Alloc(CUDAPlace(0), std::size_t{1} << 20);
  allocation::MemoryStats s = facade.GetMemoryStats(CUDAPlace(0));
  EXPECT_EQ(s.oversize_allocations.current, 1);
  EXPECT_EQ(s.oversize_allocations.allocated, 1);
  EXPECT_EQ(s.oversize_segments.current, 1);
  big.reset();
  s = facade.GetMemoryStats(CUDAPlace(0));
  EXPECT_EQ(s.oversize_allocations.current, 0);
  EXPECT_EQ(s.oversize_allocations.peak, 1);
  EXPECT_EQ(s.oversize_allocations.freed, 1);
  EXPECT_NE(facade.MemorySummary(CUDAPlace(0)).find("Oversize allocations"), std::string::npos);
}

// PyTorch's test_caching_pinned_memory: a long kernel, an async copy out of a pinned buffer, free,
// allocate again: the new block must not be the one the copy still reads. Pinned memory belongs
// to no stream, so a copy on the default stream holds it too.
TEST(AllocatorFacadeTest, PinnedBlocksWaitForTheStreamsThatUseThem) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, Flags());
  const platform::Place pinned = platform::CUDAPinnedPlace();
  for (Stream s : {runtime.CreateStream(0), Stream{}}) {
    absl::Notification kernel_done;
    AllocationPtr device = facade.Alloc(CUDAPlace(0), 1 << 20, s);
    AllocationPtr host = facade.Alloc(pinned, 1 << 20);
    void* const first = host->ptr();
    runtime.LaunchHostTask(s, [&] { kernel_done.WaitForNotification(); });  // the long kernel
    runtime.MemcpyAsync(device->ptr(), host->ptr(), 1 << 20, s);
    EXPECT_TRUE(facade.RecordStream(*host, s));
    host.reset();
    AllocationPtr again = facade.Alloc(pinned, 1 << 20);
    EXPECT_NE(again->ptr(), first) << "a pinned block was handed out while a copy reads it";
    kernel_done.Notify();
    runtime.SynchronizeStream(s);
    again.reset();
    device.reset();
    if (!s.is_default()) runtime.DestroyStream(s);
  }
  // With the stream-safe layer off, RecordStream on pinned memory says it cannot be honoured.
  AllocatorFlags off = Flags();
  off.use_stream_safe_cuda_allocator = false;
  AllocatorFacade plain(&runtime, off);
  AllocationPtr host = plain.Alloc(pinned, 4096);
  EXPECT_THROW(plain.RecordStream(*host, Stream{}), std::invalid_argument);
}

// PyTorch's record_stream OOM scenario: the memory a request needs is a block freed on stream A
// while stream B still uses it. Once B's work ends, the deferred free is reclaimed below the
// retry layer, which notices within milliseconds, not at the end of its retry time.
TEST(AllocatorFacadeTest, RetryFindsADeferredFreeOnceItsStreamIsDone) {
  platform::EmulatedRuntime runtime(Small(std::size_t{64} << 20));
  AllocatorFlags f = Flags();
  f.gpu_allocator_retry_time = 20'000;
  AllocatorFacade facade(&runtime, f);
  Stream a = runtime.CreateStream(0), b = runtime.CreateStream(0);
  absl::Notification b_may_finish;
  AllocationPtr big = facade.Alloc(CUDAPlace(0), 48 << 20, a);
  runtime.LaunchHostTask(b, [&] { b_may_finish.WaitForNotification(); });
  facade.RecordStream(*big, b);
  big.reset();  // deferred: b's work may still use it
  absl::Notification got;
  std::thread t([&] {
    AllocationPtr again = facade.Alloc(CUDAPlace(0), 48 << 20, a);
    got.Notify();
  });
  while (facade.GetMemoryStats(CUDAPlace(0)).num_alloc_retries == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  b_may_finish.Notify();
  EXPECT_TRUE(got.WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "the retry layer slept through the reclaimed memory";
  t.join();
  DestroyStreams(runtime, facade, {a, b});
}

TEST(AllocatorFacadeTest, RecordStreamAndStreams) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, Flags());
  Stream s1 = runtime.CreateStream(0), s2 = runtime.CreateStream(0);
  AllocationPtr a = facade.Alloc(CUDAPlace(0), 1 << 20, s1);
  EXPECT_EQ(facade.GetStream(*a), s1);
  EXPECT_TRUE(facade.InSameStream(*a, s1));
  EXPECT_FALSE(facade.InSameStream(*a, s2));
  EXPECT_TRUE(facade.RecordStream(*a, s2));
  AllocationPtr z = facade.Alloc(CUDAPlace(0), 0, s1);
  EXPECT_FALSE(facade.RecordStream(*z, s2));  // safe on zero-size
  AllocationPtr h = facade.Alloc(CPUPlace(), 100);
  EXPECT_FALSE(facade.RecordStream(*h, s2));
  facade.SetDefaultStream(CUDAPlace(0), s2);
  AllocationPtr d = facade.Alloc(CUDAPlace(0), 1000);
  EXPECT_EQ(facade.GetStream(*d), s2);
  a.reset();
  d.reset();
  DestroyStreams(runtime, facade, {s1, s2});
}

// Tests of both device pools: the chunk pool (false) and the virtual-memory pool (true).
class AllocatorFacadePoolTest : public ::testing::TestWithParam<bool> {};

INSTANTIATE_TEST_SUITE_P(Pools, AllocatorFacadePoolTest, ::testing::Bool(), test_facade::PoolName);

// Chains are found without a lock for a device's first streams and under it beyond them; either
// way each stream gets its own chain, also when threads ask for new streams at once.
TEST_P(AllocatorFacadePoolTest, ManyStreamsFromManyThreadsKeepTheirOwnChains) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, PoolFlags(GetParam()));
  std::vector<Stream> streams(40);
  for (Stream& s : streams) s = runtime.CreateStream(0);
  std::atomic<int> wrong{0};
  testing::RunThreads(4, [&](int t) {
    for (int round = 0; round < 20; ++round) {
      for (std::size_t i = 0; i < streams.size(); ++i) {
        const Stream s = streams[(i * 7 + t * 5 + round) % streams.size()];
        AllocationPtr a = facade.Alloc(CUDAPlace(0), 4096, s);
        if (facade.GetStream(*a) != s) wrong.fetch_add(1);
      }
    }
  });
  EXPECT_EQ(wrong.load(), 0);
  runtime.SynchronizeDevice(0);
  facade.EmptyCache(CUDAPlace(0));
  EXPECT_EQ(facade.GetMemoryStats(CUDAPlace(0)).reserved_bytes[kAggregate].current, 0);
  for (Stream s : streams) runtime.DestroyStream(s);
}

// Per-stream chains count into one set of figures per device: a peak is the device's, not the
// sum of each stream's peak.
TEST_P(AllocatorFacadePoolTest, PeaksArePerDeviceAcrossStreams) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, PoolFlags(GetParam()));
  Stream s1 = runtime.CreateStream(0), s2 = runtime.CreateStream(0);
  constexpr std::size_t kBytes = 3 << 20;
  facade.Alloc(CUDAPlace(0), kBytes, s1).reset();
  facade.Alloc(CUDAPlace(0), kBytes, s2).reset();
  allocation::MemoryStats st = facade.GetMemoryStats(CUDAPlace(0));
  EXPECT_EQ(st.allocated_bytes[allocation::kAggregate].peak, static_cast<std::int64_t>(kBytes));
  EXPECT_EQ(st.requested_bytes[allocation::kAggregate].peak, static_cast<std::int64_t>(kBytes));
  EXPECT_EQ(st.allocation[allocation::kAggregate].peak, 1);
  EXPECT_EQ(st.allocation[allocation::kAggregate].allocated, 2);
  {
    AllocationPtr a = facade.Alloc(CUDAPlace(0), kBytes, s1);
    AllocationPtr b = facade.Alloc(CUDAPlace(0), kBytes, s2);
    st = facade.GetMemoryStats(CUDAPlace(0));
    EXPECT_EQ(st.allocated_bytes[allocation::kAggregate].current,
              static_cast<std::int64_t>(2 * kBytes));
    EXPECT_EQ(st.allocated_bytes[allocation::kAggregate].peak,
              static_cast<std::int64_t>(2 * kBytes));
  }
  facade.ResetPeakStats(CUDAPlace(0));
  st = facade.GetMemoryStats(CUDAPlace(0));
  EXPECT_EQ(st.allocated_bytes[allocation::kAggregate].peak, 0);
  DestroyStreams(runtime, facade, {s1, s2});
}

// An out-of-memory error names what the whole device holds, not only the failing stream's pool.
TEST_P(AllocatorFacadePoolTest, OutOfMemoryNamesTheDevicesFigures) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFlags flags = PoolFlags(GetParam());
  flags.gpu_allocator_retry_time = 0;
  AllocatorFacade facade(&runtime, flags);
  Stream s1 = runtime.CreateStream(0), s2 = runtime.CreateStream(0);
  AllocationPtr held = facade.Alloc(CUDAPlace(0), 40 << 20, s1);
  const allocation::MemoryStats before = facade.GetMemoryStats(CUDAPlace(0));
  try {
    facade.Alloc(CUDAPlace(0), std::size_t{2} << 30, s2);
    FAIL() << "2 GiB fit in 1 GiB";
  } catch (const allocation::BadAlloc& e) {
    EXPECT_EQ(e.allocated_bytes(),
              static_cast<std::uint64_t>(before.allocated_bytes[allocation::kAggregate].current));
    EXPECT_EQ(e.allocated_bytes(), std::uint64_t{40} << 20);
    EXPECT_GE(e.reserved_bytes().value_or(0), std::uint64_t{40} << 20);
    EXPECT_NE(std::string(e.what()).find("40.00 MiB is allocated by strata"), std::string::npos)
        << e.what();
  }
  held.reset();
  DestroyStreams(runtime, facade, {s1, s2});
}

TEST(AllocatorFacadeTest, BadPlacesAreRejected) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, Flags());
  EXPECT_THROW(facade.Alloc(CUDAPlace(2), 10), std::invalid_argument);
  EXPECT_THROW(facade.Alloc(CUDAPlace(-1), 10), std::invalid_argument);
  AllocatorFacade host_only(nullptr, Flags());
  EXPECT_THROW(host_only.Alloc(CUDAPlace(0), 10), std::invalid_argument);
  EXPECT_NE(host_only.Alloc(CPUPlace(), 10)->ptr(), nullptr);
}

TEST(AllocatorFacadeTest, EveryDeviceHasItsOwnChains) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, Flags());
  AllocationPtr a = facade.Alloc(CUDAPlace(0), 5 << 20);
  AllocationPtr b = facade.Alloc(CUDAPlace(1), 7 << 20);
  EXPECT_EQ(a->place(), CUDAPlace(0));
  EXPECT_EQ(b->place(), CUDAPlace(1));
  EXPECT_EQ(facade.GetMemoryStats(CUDAPlace(0)).allocation[kAggregate].current, 1);
  EXPECT_GT(runtime.used_bytes(1), 0u);
  EXPECT_GT(runtime.used_bytes(0), 0u);
}

TEST(AllocatorFacadeTest, HostPlaces) {
  platform::EmulatedRuntime runtime(Small());
  for (auto strategy : {AllocatorStrategy::kNaiveBestFit, AllocatorStrategy::kAutoGrowth,
                        AllocatorStrategy::kThreadLocal}) {
    AllocatorFlags f = Flags(strategy);
    f.initial_cpu_memory_in_mb = 4;
    AllocatorFacade facade(&runtime, f);
    AllocationPtr c = facade.Alloc(CPUPlace(), 1000);
    AllocationPtr p = facade.Alloc(platform::CUDAPinnedPlace(), 1000);
    EXPECT_TRUE(c->place().is_cpu());
    EXPECT_TRUE(p->place().is_cuda_pinned());
  }
}

// Host pools refill modestly and hold at most their fraction of the host's memory: one small
// pinned allocation does not page-lock half the machine.
TEST(AllocatorFacadeTest, HostPoolsRefillModestlyUnderTheirFraction) {
  const std::size_t host = static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) *
                           static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  platform::EmulatedRuntime runtime(Small());
  AllocatorFlags f = Flags(AllocatorStrategy::kAutoGrowth);
  f.gpu_allocator_retry_time = 0;
  {
    AllocatorFacade facade(&runtime, f);
    AllocationPtr p = facade.Alloc(platform::CUDAPinnedPlace(), 1000);
    AllocationPtr c = facade.Alloc(CPUPlace(), 1000);
    const auto pinned =
        facade.GetMemoryStats(platform::CUDAPinnedPlace()).reserved_bytes[kAggregate].current;
    const auto cpu = facade.GetMemoryStats(CPUPlace()).reserved_bytes[kAggregate].current;
    EXPECT_LE(static_cast<double>(pinned), 0.5 * static_cast<double>(host) / 256 + 4096);
    EXPECT_LE(static_cast<std::size_t>(cpu), std::size_t{500} << 20);
    EXPECT_GT(pinned, 0);
    EXPECT_GT(cpu, 0);
  }
  // The fraction is a cap on what the pool holds.
  f.fraction_of_cuda_pinned_memory_to_use = 64.0 * (1 << 20) / static_cast<double>(host);
  AllocatorFacade facade(&runtime, f);
  AllocationPtr a = facade.Alloc(platform::CUDAPinnedPlace(), 40 << 20);
  try {
    facade.Alloc(platform::CUDAPinnedPlace(), 40 << 20);
    FAIL() << "80 MiB pinned under a 64 MiB cap";
  } catch (const allocation::BadAlloc& e) {
    EXPECT_NE(std::string(e.what()).find("fraction_of_cuda_pinned_memory_to_use"),
              std::string::npos)
        << e.what();
  }
}

// 1 % of device mallocs (creates and maps for the virtual-memory pool) fail: every failure is
// recovered or surfaces as BadAlloc, nothing leaks, and the statistics stay consistent.
TEST_P(AllocatorFacadePoolTest, FaultInjectionThroughTheWholeChain) {
  platform::EmulatedRuntime base(Small(std::size_t{2} << 30));
  platform::FaultInjectionRuntime runtime(&base);
  runtime.FailWithProbability(0.01, 42);
  // The virtual-memory pool makes no device mallocs: about 1 % of its creates and maps fail.
  runtime.FailCreatePhysicalEveryNth(101);
  runtime.FailMapEveryNth(97);
  AllocatorFlags f = PoolFlags(GetParam());
  f.gpu_allocator_retry_time = 1;
  f.auto_growth_chunk_size_in_mb = 2;  // many small chunks: many device mallocs
  std::atomic<int> surfaced{0};
  {
    AllocatorFacade facade(&runtime, f);
    testing::RunThreads(4, [&](int t) {
      std::mt19937 rng(t);
      std::vector<AllocationPtr> live(8);
      for (int i = 0; i < 12000; ++i) {
        const std::size_t size = std::size_t{1} << (8 + rng() % 16);  // 256 B .. 8 MiB
        AllocationPtr& slot = live[rng() % live.size()];
        slot.reset();
        try {
          slot = facade.Alloc(CUDAPlace(0), size + rng() % 1000);
        } catch (const allocation::BadAlloc& e) {
          ++surfaced;
          EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos);
        }
        // Give memory back now and then, so that growth (and failures) keep happening.
        if (i % 10 == 9) facade.EmptyCache(CUDAPlace(0));
      }
    });
    facade.EmptyCache(CUDAPlace(0));
    const auto s = facade.GetMemoryStats(CUDAPlace(0));
    EXPECT_EQ(s.allocation[kAggregate].current, 0);
    EXPECT_EQ(s.allocated_bytes[kAggregate].current, 0);
    EXPECT_EQ(s.reserved_bytes[kAggregate].current, 0);
    EXPECT_EQ(s.num_device_alloc, s.num_device_free);
    EXPECT_EQ(s.allocation[kAggregate].allocated - s.allocation[kAggregate].freed, 0);
  }
  const std::uint64_t injected = runtime.injected_failures() +
                                 runtime.injected_physical_failures() +
                                 runtime.injected_map_failures();
  EXPECT_GT(injected, 0u) << runtime.malloc_calls() << " mallocs, "
                          << runtime.create_physical_calls() << " creates, " << runtime.map_calls()
                          << " maps";
  LOG(INFO) << injected << " injected failures in " << runtime.malloc_calls() << " device mallocs, "
            << runtime.create_physical_calls() << " creates and " << runtime.map_calls()
            << " maps; " << surfaced << " surfaced as BadAlloc";
  EXPECT_EQ(base.used_bytes(0), 0u);
}

class CUDAAllocatorFacadeTest : public testing::CUDAFixture {};

TEST_F(CUDAAllocatorFacadeTest, AllocFreeOnEveryDevice) {
  AllocatorFacade facade(runtime_, Flags());
  const int n = runtime_->DeviceCount();
  std::vector<AllocationPtr> live;
  for (int d = 0; d < n; ++d) {
    live.push_back(facade.Alloc(CUDAPlace(d), (d + 1) << 20));
    ASSERT_EQ(live.back()->place(), CUDAPlace(d));
    runtime_->SetDevice(d);
    runtime_->MemsetAsync(live.back()->ptr(), 0x40 + d, (d + 1) << 20, Stream{});
  }
  for (int d = 0; d < n; ++d) {
    runtime_->SetDevice(d);
    unsigned char byte = 0;
    runtime_->MemcpyAsync(&byte, static_cast<char*>(live[d]->ptr()) + (d << 20), 1, Stream{});
    runtime_->SynchronizeDevice(d);
    EXPECT_EQ(byte, 0x40 + d);
    // Each device has its own chains and statistics.
    const auto s = facade.GetMemoryStats(CUDAPlace(d));
    EXPECT_EQ(s.allocation[kAggregate].current, 1);
    EXPECT_EQ(s.allocated_bytes[kAggregate].current, static_cast<std::int64_t>(live[d]->size()));
  }
  runtime_->SetDevice(0);
  live.clear();
  for (int d = 0; d < n; ++d) {
    facade.EmptyCache(CUDAPlace(d));
    EXPECT_EQ(facade.GetMemoryStats(CUDAPlace(d)).reserved_bytes[kAggregate].current, 0);
  }
  EXPECT_THROW(facade.Alloc(CUDAPlace(n), 10), std::invalid_argument);
  RecordProperty("devices", n);
}

}  // namespace
}  // namespace strata::facade

namespace strata::facade {
namespace {

// A stream handle the runtime does not know, on first use: refused, nothing allocated.
TEST(AllocatorFacadeTest, UnknownOrDestroyedStreamHandlesAreRefused) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, Flags());
  int not_a_stream = 0;
  try {
    facade.Alloc(CUDAPlace(0), 4096, Stream{&not_a_stream});
    ADD_FAILURE() << "a garbage stream handle was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("is not a stream of cuda:0"), std::string::npos)
        << e.what();
  }
  const Stream gone = runtime.CreateStream(0);
  runtime.DestroyStream(gone);
  EXPECT_THROW(facade.Alloc(CUDAPlace(0), 4096, gone), std::invalid_argument);
  EXPECT_EQ(facade.GetMemoryStats(CUDAPlace(0)).allocation[allocation::kAggregate].current, 0);
  // A live stream works, and keeps working.
  const Stream live = runtime.CreateStream(0);
  EXPECT_NE(facade.Alloc(CUDAPlace(0), 4096, live), nullptr);
  runtime.DestroyStream(live);
}

// A stream destroyed after its first use (its chain exists) is refused as at first use, on both
// pools; the other streams keep working.
TEST(AllocatorFacadeTest, AStreamDestroyedAfterItsFirstUseIsRefused) {
  for (const bool vmm : {false, true}) {
    SCOPED_TRACE(vmm ? "virtual-memory pool" : "chunk pool");
    platform::EmulatedRuntime runtime(Small());
    AllocatorFlags f = Flags();
    f.use_virtual_memory_auto_growth = vmm;
    AllocatorFacade facade(&runtime, f);
    const platform::Place gpu = CUDAPlace(0);
    const Stream gone = runtime.CreateStream(0);
    const Stream other = runtime.CreateStream(0);
    {
      AllocationPtr a = facade.Alloc(gpu, 4096, gone);
      EXPECT_TRUE(
          Contains(AllocatorFacade::ChainOf(*a), vmm ? "vmm_pool" : "auto_growth_best_fit"));
    }
    AllocationPtr kept = facade.Alloc(gpu, 4096, other);
    runtime.DestroyStream(gone);
    const std::int64_t before = facade.GetMemoryStats(gpu).allocation[kAggregate].current;
    for (int attempt = 0; attempt < 2; ++attempt) {  // refused every time, not only once
      try {
        facade.Alloc(gpu, 4096, gone);
        ADD_FAILURE() << "an allocation on a destroyed stream was accepted";
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("is not a stream of cuda:0"), std::string::npos)
            << e.what();
      }
    }
    EXPECT_EQ(facade.GetMemoryStats(gpu).allocation[kAggregate].current, before);
    // The default stream of a device: a destroyed stream made the default is refused too.
    const Stream made_default = runtime.CreateStream(0);
    facade.SetDefaultStream(gpu, made_default);
    EXPECT_NE(facade.Alloc(gpu, 4096), nullptr);
    runtime.DestroyStream(made_default);
    EXPECT_THROW(facade.Alloc(gpu, 4096), std::invalid_argument);
    facade.SetDefaultStream(gpu, Stream{});
    // Live streams are unaffected by the others' destruction.
    EXPECT_NE(facade.Alloc(gpu, 4096, other), nullptr);
    EXPECT_NE(facade.Alloc(gpu, 4096), nullptr);
    kept.reset();
    runtime.DestroyStream(other);
  }
}

}  // namespace
}  // namespace strata::facade
