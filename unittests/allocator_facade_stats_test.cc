// The facade's statistics: the identities between its figures, the summary table and its JSON,
// peaks per device across the streams' chains, active bytes after completed cross-stream frees,
// oversize allocations, the figures an out-of-memory error names, and figures that stay consistent
// when device calls fail at random under several threads. Run over both device pools where the
// pool matters.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "allocation/bad_alloc.h"
#include "facade/allocator_facade.h"
#include "glog/logging.h"
#include "platform/emulated_runtime.h"
#include "platform/fault_injection_runtime.h"
#include "support/facade_fixture.h"
#include "support/threads.h"

namespace strata::facade::test_facade {
namespace {

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

INSTANTIATE_TEST_SUITE_P(Pools, AllocatorFacadePoolTest, ::testing::Bool(), test_facade::PoolName);

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

}  // namespace
}  // namespace strata::facade::test_facade
