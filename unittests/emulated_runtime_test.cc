// What only the emulated runtime promises (the shared contract is in the
// runtime_conformance_*_test.cc files): capacity and granularity, strict handle checking, several
// devices, and clean shutdown. Its device lag: emulated_runtime_lag_test.cc.
#include "platform/emulated_runtime.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "platform/physical_memory.h"
#include "support/error_of.h"

namespace strata::platform {
namespace {

using testing::ErrorOf;

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
  o = EmulatedRuntime::Options{};
  o.device_count = EmulatedRuntime::kMaxDevices + 1;  // would be a thread and a map per device
  EXPECT_THROW(EmulatedRuntime{o}, std::invalid_argument);
  o = EmulatedRuntime::Options{};
  o.capacity_bytes = 0;
  EXPECT_THROW(EmulatedRuntime{o}, std::invalid_argument);
  o.capacity_bytes = EmulatedRuntime::kMaxCapacityBytes + 1;
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

// --- virtual memory ---------------------------------------------------------------------------

constexpr std::size_t kG = 2 * kMiB;  // the default granularity

TEST(EmulatedRuntimeTest, VmmGranularityIsTheMallocGranularity) {
  EmulatedRuntime rt;
  EXPECT_EQ(rt.VmmGranularity(0), kG);
  EmulatedRuntime::Options o;
  o.granularity = 64 * 1024;
  EmulatedRuntime small_pages(o);
  EXPECT_EQ(small_pages.VmmGranularity(0), 64u * 1024);
  EXPECT_THROW(rt.VmmGranularity(-1), RuntimeError);
}

// Physical bytes and Malloc'd bytes share the capacity; MemInfo shows both.
TEST(EmulatedRuntimeTest, PhysicalMemoryCountsAgainstTheCapacity) {
  EmulatedRuntime rt(Small(1, 8 * kMiB));
  void* p = rt.Malloc(0, kMiB);  // rounded to one 2 MiB granule
  ASSERT_NE(p, nullptr);
  std::vector<PhysicalMemory> pages;
  for (int i = 0; i < 3; ++i) {
    pages.push_back(rt.CreatePhysical(0, kG));
    ASSERT_TRUE(pages.back().valid()) << i;
  }
  EXPECT_EQ(rt.used_bytes(0), 8 * kMiB);
  EXPECT_FALSE(rt.CreatePhysical(0, kG).valid());
  EXPECT_EQ(rt.Malloc(0, kMiB), nullptr);
  std::size_t free_b = 1, total_b = 0;
  rt.MemInfo(0, &free_b, &total_b);
  EXPECT_EQ(free_b, 0u);
  EXPECT_EQ(total_b, 8 * kMiB);

  rt.ReleasePhysical(pages.back());
  pages.pop_back();
  rt.MemInfo(0, &free_b, nullptr);
  EXPECT_EQ(free_b, kG);
  EXPECT_FALSE(rt.CreatePhysical(0, 2 * kG).valid());
  const PhysicalMemory again = rt.CreatePhysical(0, kG);
  EXPECT_TRUE(again.valid());
  EXPECT_NE(again, pages[0]);
  EXPECT_NE(again, pages[1]);
  rt.ReleasePhysical(again);
  for (PhysicalMemory m : pages) rt.ReleasePhysical(m);
  rt.Free(0, p);
  EXPECT_EQ(rt.used_bytes(0), 0u);
  EXPECT_EQ(rt.live_physical(), 0u);
}

// A released handle's pages stay (and stay counted) until their last mapping is gone.
TEST(EmulatedRuntimeTest, ReleasedPhysicalMemoryLivesUntilUnmapped) {
  EmulatedRuntime rt(Small(1, 8 * kMiB));
  auto* va = static_cast<unsigned char*>(rt.ReserveAddress(0, 2 * kG));
  const PhysicalMemory mem = rt.CreatePhysical(0, kG);
  ASSERT_TRUE(mem.valid());
  rt.Map(va, kG, mem, 0, 0);
  rt.Map(va + kG, kG, mem, 0, 0);
  va[5] = 42;  // the emulated device's memory is host memory
  rt.ReleasePhysical(mem);
  EXPECT_EQ(rt.live_physical(), 1u);
  EXPECT_EQ(rt.used_bytes(0), kG);
  EXPECT_EQ(va[kG + 5], 42);
  EXPECT_THROW(rt.Map(va, kG, mem, 0, 0), RuntimeError);  // the handle is gone
  EXPECT_THROW(rt.ReleasePhysical(mem), RuntimeError);    // released twice
  rt.Unmap(va, kG);
  EXPECT_EQ(rt.used_bytes(0), kG);
  EXPECT_EQ(va[kG + 5], 42);
  rt.Unmap(va + kG, kG);
  EXPECT_EQ(rt.used_bytes(0), 0u);
  EXPECT_EQ(rt.live_physical(), 0u);
  EXPECT_EQ(rt.mapped_ranges(), 0u);
  rt.FreeAddress(va, 2 * kG);
}

// Unmapped ranges go back to inaccessible reservations; a page mapped again shows its bytes.
TEST(EmulatedRuntimeTest, RemappingKeepsThePhysicalBytes) {
  EmulatedRuntime rt;
  auto* va = static_cast<unsigned char*>(rt.ReserveAddress(0, 4 * kG));
  const PhysicalMemory mem = rt.CreatePhysical(0, kG);
  rt.Map(va, kG, mem, 0, 0);
  std::memset(va, 0x5D, kG);
  rt.Unmap(va, kG);
  EXPECT_EQ(rt.mapped_ranges(), 0u);
  rt.Map(va + 3 * kG, kG, mem, 0, 0);
  EXPECT_EQ(va[3 * kG], 0x5D);
  EXPECT_EQ(va[4 * kG - 1], 0x5D);
  rt.Unmap(va + 3 * kG, kG);
  rt.ReleasePhysical(mem);
  rt.FreeAddress(va, 4 * kG);
}

TEST(EmulatedRuntimeTest, VmmErrorsCarryTheNumbers) {
  EmulatedRuntime rt(Small(2, 64 * kMiB));
  auto* va = static_cast<unsigned char*>(rt.ReserveAddress(0, 4 * kG));
  const PhysicalMemory mem = rt.CreatePhysical(0, 2 * kG);
  const PhysicalMemory other_device = rt.CreatePhysical(1, kG);
  ASSERT_TRUE(mem.valid() && other_device.valid());

  std::string m = ErrorOf<RuntimeError>([&] { rt.CreatePhysical(0, kMiB); });
  EXPECT_NE(m.find("CreatePhysical: size 1048576 is not a non-zero multiple of the granularity "
                   "2097152"),
            std::string::npos)
      << m;
  m = ErrorOf<RuntimeError>([&] { rt.Map(va, kG, mem, kMiB, 0); });
  EXPECT_NE(m.find("offset 1048576"), std::string::npos) << m;
  m = ErrorOf<RuntimeError>([&] { rt.Map(va, kG, PhysicalMemory{12345}, 0, 0); });
  EXPECT_NE(m.find("handle 12345"), std::string::npos) << m;
  EXPECT_NE(m.find("unknown physical handle"), std::string::npos) << m;
  m = ErrorOf<RuntimeError>([&] { rt.Map(va, 2 * kG, mem, kG, 0); });
  EXPECT_NE(m.find("the offset must be 0"), std::string::npos) << m;
  m = ErrorOf<RuntimeError>([&] { rt.Map(va, 4 * kG, mem, 0, 0); });
  EXPECT_NE(m.find("has 4194304 bytes"), std::string::npos) << m;
  m = ErrorOf<RuntimeError>(
      [&] { rt.Map(va + 3 * kG, 2 * kG, mem, 0, 0); });  // runs past the reservation
  EXPECT_NE(m.find("not inside a reserved range"), std::string::npos) << m;
  m = ErrorOf<RuntimeError>([&] { rt.Map(va, kG, other_device, 0, 0); });
  EXPECT_NE(m.find("belongs to device 1"), std::string::npos) << m;
  int local = 0;
  m = ErrorOf<RuntimeError>([&] { rt.Map(&local, kG, mem, 0, 0); });  // not even aligned
  EXPECT_NE(m.find("not a multiple of the granularity"), std::string::npos) << m;

  rt.Map(va + kG, 2 * kG, mem, 0, 0);
  m = ErrorOf<RuntimeError>([&] { rt.Map(va, 2 * kG, mem, 0, 0); });
  EXPECT_NE(m.find("overlaps the mapped range"), std::string::npos) << m;
  m = ErrorOf<RuntimeError>([&] { rt.Unmap(va + kG, kG); });  // part of a mapping
  EXPECT_NE(m.find("Unmap"), std::string::npos) << m;
  EXPECT_NE(m.find("2097152): not a mapped range"), std::string::npos) << m;
  EXPECT_THROW(rt.Unmap(va + 2 * kG, kG), RuntimeError);  // inside, not at the start
  m = ErrorOf<RuntimeError>([&] { rt.FreeAddress(va, 4 * kG); });
  EXPECT_NE(m.find("1 range(s) still mapped"), std::string::npos) << m;
  m = ErrorOf<RuntimeError>([&] { rt.FreeAddress(va, 2 * kG); });  // wrong size
  EXPECT_NE(m.find("not a reserved range"), std::string::npos) << m;
  EXPECT_THROW(rt.FreeAddress(va + kG, 3 * kG), RuntimeError);
  EXPECT_THROW(rt.ReleasePhysical(PhysicalMemory{}), RuntimeError);

  // Nothing above changed the state: the one good mapping works and everything unwinds.
  EXPECT_EQ(rt.mapped_ranges(), 1u);
  va[kG] = 1;
  rt.Unmap(va + kG, 2 * kG);
  rt.FreeAddress(va, 4 * kG);
  rt.ReleasePhysical(mem);
  rt.ReleasePhysical(other_device);
  EXPECT_EQ(rt.used_bytes(0), 0u);
  EXPECT_EQ(rt.used_bytes(1), 0u);
}

TEST(EmulatedRuntimeTest, DestructionReleasesVirtualMemory) {
  EmulatedRuntime rt(Small(1, 8 * kMiB));
  void* va = rt.ReserveAddress(0, 2 * kG);
  const PhysicalMemory mapped = rt.CreatePhysical(0, kG);
  const PhysicalMemory unmapped = rt.CreatePhysical(0, kG);
  ASSERT_TRUE(mapped.valid() && unmapped.valid());
  rt.Map(va, kG, mapped, 0, 0);
  // Left for the destructor, which must unwind the reservation, the mapping and both handles.
}

// The waiting happens on the stream's worker: StreamWaitEvent returns while the event's work
// is blocked, and a wait on the stream's own event never deadlocks.
TEST(EmulatedRuntimeTest, StreamWaitEventOnItsOwnStreamDoesNotDeadlock) {
  EmulatedRuntime rt;
  Stream s = rt.CreateStream(0);
  Event e = rt.CreateEvent(0);
  std::atomic<int> order{0};
  int first = -1, second = -1;
  absl::Notification gate;
  rt.LaunchHostTask(s, [&] { gate.WaitForNotification(); });
  rt.LaunchHostTask(s, [&] { first = order++; });
  rt.RecordEvent(e, s);
  rt.StreamWaitEvent(s, e);
  rt.LaunchHostTask(s, [&] { second = order++; });
  gate.Notify();
  rt.SynchronizeStream(s);
  EXPECT_EQ(first, 0);
  EXPECT_EQ(second, 1);
  rt.DestroyEvent(e);
  rt.DestroyStream(s);
}

// Free counts as a host wait (cudaFree synchronizes the device); a free of nullptr does not.
TEST(EmulatedRuntimeTest, FreeCountsAsAHostWait) {
  EmulatedRuntime rt;
  void* p = rt.Malloc(0, kMiB);
  ASSERT_NE(p, nullptr);
  const std::uint64_t start = rt.SyncCount();
  rt.Free(0, nullptr);
  EXPECT_EQ(rt.SyncCount(), start);
  rt.Free(0, p);
  EXPECT_EQ(rt.SyncCount(), start + 1);
  int local = 0;
  EXPECT_THROW(rt.Free(0, &local), RuntimeError);  // not a free: nothing counted
  EXPECT_EQ(rt.SyncCount(), start + 1);
}

// A Free waits, as cudaFree does, for the work enqueued so far on the device's streams: work
// still writing the memory runs before it is unmapped.
TEST(EmulatedRuntimeTest, FreeWaitsForWorkStillUsingTheMemory) {
  EmulatedRuntime rt;
  Stream s = rt.CreateStream(0);
  void* p = rt.Malloc(0, kMiB);
  ASSERT_NE(p, nullptr);
  std::atomic<bool> wrote{false};
  rt.LaunchHostTask(s, [&] {
    absl::SleepFor(absl::Milliseconds(50));  // a long kernel
    std::memset(p, 1, kMiB);                 // still writing when the host frees
    wrote = true;
  });
  rt.MemsetAsync(p, 0xEF, kMiB, s);  // what init_allocated_mem enqueues
  const std::uint64_t start = rt.SyncCount();
  rt.Free(0, p);
  EXPECT_TRUE(wrote.load());
  EXPECT_EQ(rt.SyncCount(), start + 1);
  rt.DestroyStream(s);
}

}  // namespace
}  // namespace strata::platform
