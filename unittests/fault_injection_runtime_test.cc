#include "platform/fault_injection_runtime.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "platform/emulated_runtime.h"
#include "platform/physical_memory.h"
#include "support/threads.h"

namespace strata::platform {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Runs `n` Malloc calls and returns which failed (freeing the successes).
std::vector<bool> Pattern(FaultInjectionRuntime& rt, int n) {
  std::vector<bool> failed;
  for (int i = 0; i < n; ++i) {
    void* p = rt.Malloc(0, 4096);
    failed.push_back(p == nullptr);
    if (p != nullptr) rt.Free(0, p);
  }
  return failed;
}

class FaultInjectionRuntimeTest : public ::testing::Test {
 protected:
  EmulatedRuntime base_;
  FaultInjectionRuntime rt_{&base_};
};

TEST_F(FaultInjectionRuntimeTest, ForwardsWhenNothingIsConfigured) {
  EXPECT_STREQ(rt_.Name(), "fault_injection");
  EXPECT_EQ(rt_.DeviceCount(), base_.DeviceCount());
  for (bool failed : Pattern(rt_, 10)) EXPECT_FALSE(failed);
  EXPECT_EQ(rt_.malloc_calls(), 10u);
  EXPECT_EQ(rt_.injected_failures(), 0u);
  EXPECT_EQ(base_.malloc_count(), 10u);
  EXPECT_EQ(base_.used_bytes(0), 0u);
}

TEST_F(FaultInjectionRuntimeTest, FailEveryNthFailsExactlyThoseCalls) {
  rt_.FailEveryNth(3);
  std::vector<bool> failed = Pattern(rt_, 12);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(failed[i], (i + 1) % 3 == 0) << "call " << i + 1;
  EXPECT_EQ(rt_.injected_failures(), 4u);
  EXPECT_EQ(rt_.malloc_calls(), 12u);
  EXPECT_EQ(base_.malloc_count(), 8u);  // injected failures never reach the base
  // Reconfiguring restarts the count.
  rt_.FailEveryNth(2);
  failed = Pattern(rt_, 4);
  EXPECT_EQ(failed, (std::vector<bool>{false, true, false, true}));
  rt_.FailEveryNth(0);
  for (bool f : Pattern(rt_, 5)) EXPECT_FALSE(f);
  rt_.FailEveryNth(1);
  for (bool f : Pattern(rt_, 5)) EXPECT_TRUE(f);
}

// The specification users and CI pass (STRATA_C_FAULTS, strata-replay --faults): the same
// policies; a bad entry names itself and changes nothing.
TEST_F(FaultInjectionRuntimeTest, ConfigureAppliesASpecificationOrNothing) {
  rt_.Configure("malloc_every:3");
  EXPECT_EQ(Pattern(rt_, 6), (std::vector<bool>{false, false, true, false, false, true}));
  rt_.Configure(" malloc_every : 0 , malloc_probability:1, seed:9");
  for (bool f : Pattern(rt_, 4)) EXPECT_TRUE(f);
  rt_.Clear();
  for (const char* bad : {"malloc_probability:1.5", "malloc_every:-2", "map_every:x", "oops:1",
                          "malloc_probability:nan"}) {
    SCOPED_TRACE(bad);
    try {
      rt_.Configure(std::string("malloc_every:1,") + bad);
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      const std::string key = std::string(bad).substr(0, std::string(bad).find(':'));
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
    for (bool f : Pattern(rt_, 3)) EXPECT_FALSE(f) << "a rejected specification applied part";
  }
  rt_.Configure("create_physical_every:1,map_every:2");
  EXPECT_FALSE(rt_.CreatePhysical(0, 2 * kMiB).valid());
}

TEST_F(FaultInjectionRuntimeTest, FailNextFailsTheNextK) {
  rt_.FailNext(3);
  EXPECT_EQ(Pattern(rt_, 6), (std::vector<bool>{true, true, true, false, false, false}));
  EXPECT_EQ(rt_.injected_failures(), 3u);
}

TEST_F(FaultInjectionRuntimeTest, ProbabilityIsDeterministicPerSeedAndRoughlyP) {
  constexpr int kCalls = 4000;
  rt_.FailWithProbability(0.25, 42);
  const std::vector<bool> first = Pattern(rt_, kCalls);
  rt_.FailWithProbability(0.25, 42);
  const std::vector<bool> second = Pattern(rt_, kCalls);
  EXPECT_EQ(first, second);
  int failures = 0;
  for (bool f : first) failures += f;
  // Binomial(4000, 0.25): mean 1000, sd ~27; a wide band that still rejects a wrong p.
  EXPECT_GT(failures, 850);
  EXPECT_LT(failures, 1150);

  rt_.FailWithProbability(0.25, 43);
  EXPECT_NE(Pattern(rt_, kCalls), first);  // another seed, another pattern

  rt_.FailWithProbability(0.0, 1);
  for (bool f : Pattern(rt_, 100)) EXPECT_FALSE(f);
  rt_.FailWithProbability(1.0, 1);
  for (bool f : Pattern(rt_, 100)) EXPECT_TRUE(f);
}

TEST_F(FaultInjectionRuntimeTest, RejectsBadProbabilities) {
  EXPECT_THROW(rt_.FailWithProbability(-0.1, 1), std::invalid_argument);
  EXPECT_THROW(rt_.FailWithProbability(1.5, 1), std::invalid_argument);
  EXPECT_THROW(rt_.FailWithProbability(std::numeric_limits<double>::quiet_NaN(), 1),
               std::invalid_argument);
  EXPECT_THROW(FaultInjectionRuntime(static_cast<DeviceRuntime*>(nullptr)), std::invalid_argument);
}

TEST_F(FaultInjectionRuntimeTest, PoliciesCombineAndClearTurnsThemOff) {
  rt_.FailNext(1);
  rt_.FailEveryNth(4);
  EXPECT_EQ(Pattern(rt_, 8),
            (std::vector<bool>{true, false, false, true, false, false, false, true}));
  rt_.HoldEvents(true);
  rt_.Clear();
  EXPECT_FALSE(rt_.events_held());
  for (bool f : Pattern(rt_, 10)) EXPECT_FALSE(f);
  EXPECT_EQ(rt_.injected_failures(), 3u);  // counters survive Clear
  rt_.ResetCounters();
  EXPECT_EQ(rt_.injected_failures(), 0u);
  EXPECT_EQ(rt_.malloc_calls(), 0u);
}

TEST_F(FaultInjectionRuntimeTest, BaseOutOfMemoryIsNotCountedAsInjected) {
  EmulatedRuntime::Options o;
  o.capacity_bytes = 4 * kMiB;
  auto small = std::make_shared<EmulatedRuntime>(o);
  FaultInjectionRuntime rt(small);  // owning
  EXPECT_EQ(rt.Malloc(0, 8 * kMiB), nullptr);
  EXPECT_EQ(rt.injected_failures(), 0u);
  EXPECT_EQ(rt.malloc_calls(), 1u);
}

TEST_F(FaultInjectionRuntimeTest, HeldEventsQueryFalseButSynchronizeStillWaits) {
  Stream s = rt_.CreateStream(0);
  Event e = rt_.CreateEvent(0);
  std::atomic<bool> ran{false};
  rt_.LaunchHostTask(s, [&] { ran = true; });
  rt_.RecordEvent(e, s);
  rt_.HoldEvents(true);
  rt_.SynchronizeEvent(e);  // waits for the real event, does not deadlock
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(base_.QueryEvent(e));
  EXPECT_FALSE(rt_.QueryEvent(e));
  Event never = rt_.CreateEvent(0);
  EXPECT_FALSE(rt_.QueryEvent(never));                  // even a never-recorded one
  EXPECT_THROW(rt_.QueryEvent(Event{}), RuntimeError);  // invalid handles still reach the base
  rt_.HoldEvents(false);
  EXPECT_TRUE(rt_.QueryEvent(e));
  EXPECT_TRUE(rt_.QueryEvent(never));
  rt_.DestroyEvent(e);
  rt_.DestroyEvent(never);
  rt_.DestroyStream(s);
}

TEST_F(FaultInjectionRuntimeTest, ForwardsSyncCountAndStreamWork) {
  const std::uint64_t start = rt_.SyncCount();
  Stream s = rt_.CreateStream(0);
  void* dev = rt_.Malloc(0, kMiB);
  void* host = rt_.HostMalloc(kMiB);
  ASSERT_TRUE(dev != nullptr && host != nullptr);
  rt_.MemsetAsync(dev, 9, kMiB, s);
  rt_.MemcpyAsync(host, dev, kMiB, s);
  rt_.SynchronizeStream(s);
  EXPECT_EQ(static_cast<unsigned char*>(host)[kMiB - 1], 9);
  EXPECT_TRUE(rt_.QueryStream(s));
  rt_.SynchronizeDevice(0);
  EXPECT_EQ(rt_.SyncCount(), start + 2);
  EXPECT_EQ(base_.SyncCount(), rt_.SyncCount());
  std::size_t free_b = 0, total_b = 0;
  rt_.MemInfo(0, &free_b, &total_b);
  EXPECT_EQ(total_b - free_b, 2 * kMiB);
  rt_.Free(0, dev);
  EXPECT_EQ(rt_.SyncCount(), start + 3);  // the free waited for the device
  rt_.HostFree(host);
  rt_.DestroyStream(s);
  EXPECT_EQ(base_.used_bytes(0), 0u);
}

TEST_F(FaultInjectionRuntimeTest, ConcurrentCallersSeeExactlyTheConfiguredFailures) {
  rt_.FailEveryNth(5);
  constexpr int kThreads = 4, kCalls = 500;
  std::atomic<int> failures{0};
  testing::RunThreads(kThreads, [&](int) {
    for (int i = 0; i < kCalls; ++i) {
      void* p = rt_.Malloc(0, 1);
      if (p == nullptr) {
        ++failures;
      } else {
        rt_.Free(0, p);
      }
    }
  });
  EXPECT_EQ(failures.load(), kThreads * kCalls / 5);
  EXPECT_EQ(rt_.injected_failures(), static_cast<std::uint64_t>(kThreads * kCalls / 5));
}

constexpr std::size_t kG = 2 * kMiB;  // the emulated granularity

// Runs `n` CreatePhysical calls and returns which failed (releasing the successes).
std::vector<bool> PhysicalPattern(FaultInjectionRuntime& rt, int n) {
  std::vector<bool> failed;
  for (int i = 0; i < n; ++i) {
    const PhysicalMemory m = rt.CreatePhysical(0, kG);
    failed.push_back(!m.valid());
    if (m.valid()) rt.ReleasePhysical(m);
  }
  return failed;
}

TEST_F(FaultInjectionRuntimeTest, CreatePhysicalFailsAsOutOfMemoryOnDemand) {
  rt_.FailNextCreatePhysical(2);
  EXPECT_EQ(PhysicalPattern(rt_, 4), (std::vector<bool>{true, true, false, false}));
  rt_.FailCreatePhysicalEveryNth(3);
  EXPECT_EQ(PhysicalPattern(rt_, 6), (std::vector<bool>{false, false, true, false, false, true}));
  EXPECT_EQ(rt_.create_physical_calls(), 10u);
  EXPECT_EQ(rt_.injected_physical_failures(), 4u);
  EXPECT_EQ(base_.live_physical(), 0u);
  EXPECT_EQ(base_.used_bytes(0), 0u);
  // Malloc is not affected by these, nor these by the Malloc policies.
  for (bool failed : Pattern(rt_, 3)) EXPECT_FALSE(failed);
  EXPECT_EQ(rt_.injected_failures(), 0u);
  rt_.FailNext(5);
  rt_.Clear();
  for (bool failed : PhysicalPattern(rt_, 6)) EXPECT_FALSE(failed);
  EXPECT_EQ(rt_.injected_physical_failures(), 4u);  // Clear keeps the counters
  rt_.ResetCounters();
  EXPECT_EQ(rt_.create_physical_calls(), 0u);
  EXPECT_EQ(rt_.injected_physical_failures(), 0u);
}

TEST_F(FaultInjectionRuntimeTest, MapThrowsOnDemandAndMapsNothing) {
  void* va = rt_.ReserveAddress(0, 2 * kG);
  const PhysicalMemory mem = rt_.CreatePhysical(0, kG);
  ASSERT_TRUE(mem.valid());
  rt_.FailNextMap(1);
  try {
    rt_.Map(va, kG, mem, 0, 0);
    FAIL() << "no exception";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("injected"), std::string::npos) << e.what();
  }
  EXPECT_EQ(base_.mapped_ranges(), 0u);
  rt_.Map(va, kG, mem, 0, 0);  // the next one goes through
  EXPECT_EQ(base_.mapped_ranges(), 1u);
  rt_.Unmap(va, kG);

  rt_.FailMapEveryNth(2);
  std::vector<bool> failed;
  for (int i = 0; i < 4; ++i) {
    try {
      rt_.Map(va, kG, mem, 0, 0);
      failed.push_back(false);
      rt_.Unmap(va, kG);
    } catch (const RuntimeError&) {
      failed.push_back(true);
    }
  }
  EXPECT_EQ(failed, (std::vector<bool>{false, true, false, true}));
  EXPECT_EQ(rt_.map_calls(), 6u);
  EXPECT_EQ(rt_.injected_map_failures(), 3u);
  EXPECT_EQ(base_.mapped_ranges(), 0u);
  rt_.Clear();
  rt_.Map(va, kG, mem, 0, 0);
  rt_.Unmap(va, kG);
  rt_.ReleasePhysical(mem);
  rt_.FreeAddress(va, 2 * kG);
  EXPECT_EQ(base_.used_bytes(0), 0u);
}

TEST_F(FaultInjectionRuntimeTest, ForwardsVirtualMemoryAndStreamWaits) {
  EXPECT_EQ(rt_.VmmGranularity(0), base_.VmmGranularity(0));
  auto* va = static_cast<unsigned char*>(rt_.ReserveAddress(0, kG));
  const PhysicalMemory mem = rt_.CreatePhysical(0, kG);
  ASSERT_TRUE(mem.valid());
  EXPECT_EQ(base_.used_bytes(0), kG);
  rt_.Map(va, kG, mem, 0, 0);
  EXPECT_EQ(base_.mapped_ranges(), 1u);

  Stream a = rt_.CreateStream(0), b = rt_.CreateStream(0);
  Event e = rt_.CreateEvent(0);
  std::atomic<bool> a_done{false}, b_saw{false};
  rt_.MemsetAsync(va, 7, kG, a);
  rt_.LaunchHostTask(a, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    a_done = true;
  });
  rt_.RecordEvent(e, a);
  rt_.StreamWaitEvent(b, e);
  rt_.LaunchHostTask(b, [&] { b_saw = a_done.load(); });
  rt_.SynchronizeStream(b);
  EXPECT_TRUE(b_saw.load());
  EXPECT_EQ(va[kG - 1], 7);

  rt_.Unmap(va, kG);
  rt_.ReleasePhysical(mem);
  rt_.FreeAddress(va, kG);
  EXPECT_EQ(base_.used_bytes(0), 0u);
  EXPECT_EQ(base_.live_physical(), 0u);
  rt_.DestroyEvent(e);
  rt_.DestroyStream(a);
  rt_.DestroyStream(b);
}

}  // namespace
}  // namespace strata::platform
