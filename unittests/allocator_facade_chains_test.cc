// The facade's chains and places: which layers a device's chain has for each combination of
// flags, the default pool (virtual memory where the device has it), one chain per device and per
// stream (also when many threads bring new streams at once), host and pinned places, places and
// stream handles that are refused, and the streams an allocation belongs to.
// CUDAAllocatorFacadeTest allocates on every device of a real GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "facade/allocator_facade.h"
#include "platform/emulated_runtime.h"
#include "platform/forwarding_runtime.h"
#include "support/facade_fixture.h"
#include "support/runtimes.h"
#include "support/threads.h"

namespace strata::facade::test_facade {
namespace {

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

INSTANTIATE_TEST_SUITE_P(AllCombinations, PriorityTableTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(AllocatorStrategy::kNaiveBestFit,
                                                              AllocatorStrategy::kAutoGrowth,
                                                              AllocatorStrategy::kThreadLocal)),
                         PriorityName);

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

TEST(AllocatorFacadeTest, BadPlacesAreRejected) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, Flags());
  EXPECT_THROW(facade.Alloc(CUDAPlace(2), 10), std::invalid_argument);
  EXPECT_THROW(facade.Alloc(CUDAPlace(-1), 10), std::invalid_argument);
  AllocatorFacade host_only(nullptr, Flags());
  EXPECT_THROW(host_only.Alloc(CUDAPlace(0), 10), std::invalid_argument);
  EXPECT_NE(host_only.Alloc(CPUPlace(), 10)->ptr(), nullptr);
}

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

// A stream of another device is refused for allocations and as a default stream (the device's
// pool could not fence it); pinned memory takes any device's stream.
TEST(AllocatorFacadeTest, AStreamOfAnotherDeviceIsRefused) {
  platform::EmulatedRuntime runtime(Small());  // two devices
  AllocatorFacade facade(&runtime, Flags());
  const Stream on1 = runtime.CreateStream(1);
  try {
    facade.Alloc(CUDAPlace(0), 4096, on1);
    ADD_FAILURE() << "cuda:1's stream was accepted for cuda:0";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("belongs to cuda:1, not cuda:0"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(facade.SetDefaultStream(CUDAPlace(0), on1), std::invalid_argument);
  EXPECT_NE(facade.Alloc(CUDAPlace(1), 4096, on1), nullptr);
  EXPECT_NE(facade.Alloc(platform::CUDAPinnedPlace(), 4096, on1), nullptr);
  EXPECT_EQ(facade.GetMemoryStats(CUDAPlace(0)).allocation[kAggregate].current, 0);
  runtime.DestroyStream(on1);
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

class CUDAAllocatorFacadeTest : public testing::CUDAFixture {};

// A capture strata was not told of: CUDA refuses the device free of a block freed meanwhile;
// it waits (no exception from the free), and the next EmptyCache after the capture gives the
// memory back.
TEST_F(CUDAAllocatorFacadeTest, DeviceFreesDuringAnUnannouncedCaptureWaitForItsEnd) {
  for (const bool system : {false, true}) {
    SCOPED_TRACE(system ? "system allocator" : "chunk pool, free_idle_chunk");
    AllocatorFlags f =
        system ? Flags(AllocatorStrategy::kAutoGrowth, /*system=*/true) : ChunkPoolFlags();
    f.free_idle_chunk = true;
    AllocatorFacade facade(runtime_, f);
    const Stream s = runtime_->CreateStream(0);
    AllocationPtr a = facade.Alloc(CUDAPlace(0), 64 << 20);
    std::size_t free_before = 0, total = 0;
    runtime_->MemInfo(0, &free_before, &total);
    runtime_->BeginCapture(s);
    EXPECT_NO_THROW(a.reset());
    try {
      runtime_->EndCapture(s);  // the refused free may have invalidated the capture
    } catch (const platform::RuntimeError&) {
    }
    facade.EmptyCache(CUDAPlace(0));
    std::size_t free_after = 0;
    runtime_->MemInfo(0, &free_after, &total);
    EXPECT_GE(free_after, free_before + (std::size_t{60} << 20))
        << "the deferred free went through";
    runtime_->DestroyStream(s);
  }
}

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
}  // namespace strata::facade::test_facade
