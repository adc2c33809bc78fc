// What only the emulated runtime promises (the shared contract is in
// runtime_conformance_test.cc): capacity and granularity, strict handle checking, several
// devices, and clean shutdown.
#include "platform/emulated_runtime.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"

namespace strata::platform {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

EmulatedRuntime::Options Small(int devices = 1, std::size_t capacity = 10 * kMiB) {
  EmulatedRuntime::Options o;
  o.device_count = devices;
  o.capacity_bytes = capacity;
  return o;
}

TEST(EmulatedRuntimeTest, RejectsBadOptions) {
  EmulatedRuntime::Options o;
  o.device_count = 0;
  EXPECT_THROW(EmulatedRuntime{o}, std::invalid_argument);
  o = EmulatedRuntime::Options{};
  o.granularity = 3 * kMiB;
  EXPECT_THROW(EmulatedRuntime{o}, std::invalid_argument);
  o.granularity = 0;
  EXPECT_THROW(EmulatedRuntime{o}, std::invalid_argument);
}

TEST(EmulatedRuntimeTest, CapacityLimitReturnsNull) {
  EmulatedRuntime rt(Small(1, 10 * kMiB));
  std::vector<void*> blocks;
  for (int i = 0; i < 5; ++i) {
    void* p = rt.Malloc(0, 1);  // each takes a 2 MiB granule
    ASSERT_NE(p, nullptr) << i;
    blocks.push_back(p);
  }
  EXPECT_EQ(rt.Malloc(0, 1), nullptr);
  EXPECT_EQ(rt.used_bytes(0), 10 * kMiB);
  rt.Free(0, blocks.back());
  blocks.pop_back();
  EXPECT_EQ(rt.Malloc(0, 2 * kMiB + 1), nullptr);  // needs two granules, one is free
  void* p = rt.Malloc(0, 2 * kMiB);
  ASSERT_NE(p, nullptr);
  blocks.push_back(p);
  EXPECT_EQ(rt.Malloc(0, 11 * kMiB), nullptr);                   // over capacity outright
  EXPECT_EQ(rt.Malloc(0, ~std::size_t{0}), nullptr);             // absurd: no overflow
  EXPECT_EQ(rt.Malloc(0, ~std::size_t{0} - kMiB + 2), nullptr);  // rounding would overflow
  for (void* b : blocks) rt.Free(0, b);
}

TEST(EmulatedRuntimeTest, GranularityIsVisibleInMemInfo) {
  EmulatedRuntime rt(Small(1, 64 * kMiB));
  std::size_t free_b = 0, total_b = 0;
  rt.MemInfo(0, &free_b, &total_b);
  EXPECT_EQ(total_b, 64 * kMiB);
  EXPECT_EQ(free_b, 64 * kMiB);
  void* a = rt.Malloc(0, 1);
  void* b = rt.Malloc(0, 2 * kMiB + 1);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  rt.MemInfo(0, &free_b, &total_b);
  EXPECT_EQ(free_b, 64 * kMiB - 2 * kMiB - 4 * kMiB);
  EXPECT_EQ(total_b, 64 * kMiB);
  EXPECT_EQ(rt.used_bytes(0), 6 * kMiB);
  rt.Free(0, a);
  rt.Free(0, b);
  rt.MemInfo(0, &free_b, nullptr);
  EXPECT_EQ(free_b, 64 * kMiB);
}

TEST(EmulatedRuntimeTest, CustomGranularity) {
  EmulatedRuntime::Options o = Small(1, 16 * kMiB);
  o.granularity = 4096;
  EmulatedRuntime rt(o);
  void* p = rt.Malloc(0, 5000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(rt.used_bytes(0), 8192u);
  rt.Free(0, p);
}

TEST(EmulatedRuntimeTest, MemoryReturnsToZero) {
  EmulatedRuntime rt(Small(1, 256 * kMiB));
  std::vector<void*> blocks;
  for (std::size_t size : {1ul, 3 * kMiB, 17 * kMiB, 4096ul, 64 * kMiB}) {
    blocks.push_back(rt.Malloc(0, size));
    ASSERT_NE(blocks.back(), nullptr);
  }
  EXPECT_GT(rt.used_bytes(0), 0u);
  for (void* p : blocks) rt.Free(0, p);
  EXPECT_EQ(rt.used_bytes(0), 0u);
  EXPECT_EQ(rt.malloc_count(), 5u);
  EXPECT_EQ(rt.free_count(), 5u);
}

TEST(EmulatedRuntimeTest, DeviceMemoryIsWritableFromStreams) {
  EmulatedRuntime rt(Small(1, 64 * kMiB));
  auto* p = static_cast<unsigned char*>(rt.Malloc(0, 8 * kMiB));
  ASSERT_NE(p, nullptr);
  rt.MemsetAsync(p, 0x7F, 8 * kMiB, Stream{});
  rt.SynchronizeStream(Stream{});
  EXPECT_EQ(p[0], 0x7F);  // emulated device memory is host memory
  EXPECT_EQ(p[8 * kMiB - 1], 0x7F);
  rt.Free(0, p);
}

TEST(EmulatedRuntimeTest, UnknownPointersThrow) {
  EmulatedRuntime rt(Small(2));
  int local = 0;
  EXPECT_THROW(rt.Free(0, &local), RuntimeError);
  void* p = rt.Malloc(0, kMiB);
  ASSERT_NE(p, nullptr);
  EXPECT_THROW(rt.Free(1, p), RuntimeError);                          // wrong device
  EXPECT_THROW(rt.Free(0, static_cast<char*>(p) + 1), RuntimeError);  // interior pointer
  rt.Free(0, p);
  EXPECT_THROW(rt.Free(0, p), RuntimeError);  // double free
  try {
    rt.Free(0, &local);
    FAIL() << "no exception";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown pointer"), std::string::npos) << e.what();
  }
  EXPECT_THROW(rt.HostFree(&local), RuntimeError);
  void* h = rt.HostMalloc(100);
  ASSERT_NE(h, nullptr);
  rt.HostFree(h);
  EXPECT_THROW(rt.HostFree(h), RuntimeError);
}

TEST(EmulatedRuntimeTest, UnknownStreamsAndEventsThrow) {
  EmulatedRuntime rt;
  int local = 0;
  Stream bogus{&local};
  EXPECT_THROW(rt.SynchronizeStream(bogus), RuntimeError);
  EXPECT_THROW(rt.QueryStream(bogus), RuntimeError);
  EXPECT_THROW(rt.LaunchHostTask(bogus, [] {}), RuntimeError);
  EXPECT_THROW(rt.DestroyStream(bogus), RuntimeError);
  Stream s = rt.CreateStream(0);
  rt.DestroyStream(s);
  EXPECT_THROW(rt.MemsetAsync(nullptr, 0, 0, s), RuntimeError);  // destroyed
  EXPECT_THROW(rt.DestroyStream(s), RuntimeError);
  EXPECT_THROW(rt.QueryEvent(Event{}), RuntimeError);
  std::uint32_t not_an_event[16] = {};
  EXPECT_THROW(rt.QueryEvent(Event{not_an_event}), RuntimeError);
}

TEST(EmulatedRuntimeTest, InvalidDeviceOrdinalsThrow) {
  EmulatedRuntime rt(Small(2));
  for (int bad : {-1, 2, 100}) {
    EXPECT_THROW(rt.SetDevice(bad), RuntimeError) << bad;
    EXPECT_THROW(rt.Malloc(bad, 1), RuntimeError) << bad;
    EXPECT_THROW(rt.Free(bad, nullptr), RuntimeError) << bad;
    EXPECT_THROW(rt.MemInfo(bad, nullptr, nullptr), RuntimeError) << bad;
    EXPECT_THROW(rt.CreateStream(bad), RuntimeError) << bad;
    EXPECT_THROW(rt.CreateEvent(bad), RuntimeError) << bad;
    EXPECT_THROW(rt.SynchronizeDevice(bad), RuntimeError) << bad;
  }
  try {
    rt.Malloc(7, 1);
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("invalid device ordinal 7"), std::string::npos)
        << e.what();
  }
}

TEST(EmulatedRuntimeTest, DevicesAreIndependent) {
  EmulatedRuntime rt(Small(2, 8 * kMiB));
  EXPECT_EQ(rt.DeviceCount(), 2);
  void* a = rt.Malloc(0, 8 * kMiB);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(rt.Malloc(0, 1), nullptr);  // device 0 full
  void* b = rt.Malloc(1, 8 * kMiB);     // device 1 untouched
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(rt.used_bytes(0), 8 * kMiB);
  EXPECT_EQ(rt.used_bytes(1), 8 * kMiB);
  rt.Free(0, a);
  EXPECT_EQ(rt.used_bytes(0), 0u);
  EXPECT_EQ(rt.used_bytes(1), 8 * kMiB);
  rt.Free(1, b);
}

TEST(EmulatedRuntimeTest, CurrentDeviceSelectsTheDefaultStream) {
  EmulatedRuntime rt(Small(2));
  rt.SetDevice(1);
  EXPECT_EQ(rt.GetDevice(), 1);
  // Block device 1's default stream; device 0's default stream still runs.
  absl::Notification gate;
  rt.LaunchHostTask(Stream{}, [&] { gate.WaitForNotification(); });
  EXPECT_FALSE(rt.QueryStream(Stream{}));
  rt.SetDevice(0);
  std::atomic<bool> ran{false};
  rt.LaunchHostTask(Stream{}, [&] { ran = true; });
  rt.SynchronizeStream(Stream{});
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(rt.QueryStream(Stream{}));
  // The current device is per thread.
  std::thread([&] { EXPECT_EQ(rt.GetDevice(), 0); }).join();
  gate.Notify();
  rt.SynchronizeDevice(1);
  rt.SetDevice(1);
  EXPECT_TRUE(rt.QueryStream(Stream{}));
  rt.SetDevice(0);
}

TEST(EmulatedRuntimeTest, EventsMustBeRecordedOnAStreamOfTheirDevice) {
  EmulatedRuntime rt(Small(2));
  Event e1 = rt.CreateEvent(1);
  Stream s0 = rt.CreateStream(0);
  Stream s1 = rt.CreateStream(1);
  EXPECT_THROW(rt.RecordEvent(e1, s0), RuntimeError);
  rt.RecordEvent(e1, s1);
  rt.SynchronizeEvent(e1);
  EXPECT_TRUE(rt.QueryEvent(e1));
  rt.DestroyEvent(e1);
  rt.DestroyStream(s0);
  rt.DestroyStream(s1);
}

TEST(EmulatedRuntimeTest, SynchronizeDeviceWaitsForWorkOnDestroyedStreams) {
  EmulatedRuntime rt;
  Stream s = rt.CreateStream(0);
  std::atomic<bool> ran{false};
  rt.LaunchHostTask(s, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ran = true;
  });
  rt.DestroyStream(s);
  EXPECT_EQ(rt.live_streams(), 0);
  rt.SynchronizeDevice(0);
  EXPECT_TRUE(ran.load());
}

TEST(EmulatedRuntimeTest, DestructionRunsPendingWork) {
  std::atomic<int> ran{0};
  {
    EmulatedRuntime rt;
    Stream kept = rt.CreateStream(0);
    Stream destroyed = rt.CreateStream(0);
    for (Stream s : {kept, destroyed, Stream{}}) {
      rt.LaunchHostTask(s, [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        ++ran;
      });
    }
    rt.DestroyStream(destroyed);
    void* p = rt.Malloc(0, kMiB);  // leaked on purpose: the runtime releases it
    ASSERT_NE(p, nullptr);
    ASSERT_NE(rt.HostMalloc(64), nullptr);
  }
  EXPECT_EQ(ran.load(), 3);
}

TEST(EmulatedRuntimeTest, ManyStreamsCreatedAndDestroyedAreReclaimed) {
  EmulatedRuntime rt;
  for (int i = 0; i < 200; ++i) {
    Stream s = rt.CreateStream(0);
    rt.LaunchHostTask(s, [] {});
    rt.DestroyStream(s);
  }
  EXPECT_EQ(rt.live_streams(), 0);
}

}  // namespace
}  // namespace strata::platform
