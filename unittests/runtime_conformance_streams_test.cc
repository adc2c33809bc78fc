// The DeviceRuntime contract for streams (fixture and runtimes:
// support/runtime_conformance_fixture.h): host tasks and memory operations run in stream order, the
// default stream, stream capture and what it refuses, destroying a stream with pending work,
// SynchronizeDevice, and SyncCount's count of host waits. Run against the emulated runtime and, as
// CUDA/..., the CUDA one.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "platform/device_runtime.h"
#include "platform/physical_memory.h"
#include "support/runtime_conformance_fixture.h"

namespace strata::platform::conformance_test {
namespace {

TEST_P(RuntimeConformanceTest, HostTasksRunInStreamOrder) {
  Stream s = NewStream();
  absl::Mutex mu;
  std::vector<int> order;
  constexpr int kTasks = 200;
  for (int i = 0; i < kTasks; ++i) {
    rt().LaunchHostTask(s, [&, i] {
      absl::MutexLock lock(&mu);
      order.push_back(i);
    });
  }
  rt().SynchronizeStream(s);
  EXPECT_TRUE(rt().QueryStream(s));
  absl::MutexLock lock(&mu);
  ASSERT_EQ(order.size(), static_cast<std::size_t>(kTasks));
  for (int i = 0; i < kTasks; ++i) ASSERT_EQ(order[i], i);
}

TEST_P(RuntimeConformanceTest, MemoryOperationsRunInStreamOrder) {
  constexpr std::size_t kBytes = 1 * kMiB;
  Stream s = NewStream();
  void* dev = NewDevice(kBytes);
  ASSERT_NE(dev, nullptr);
  unsigned char* host = NewHost(kBytes);
  ASSERT_NE(host, nullptr);
  std::memset(host, 0, kBytes);
  rt().MemsetAsync(dev, 1, kBytes, s);
  rt().MemsetAsync(dev, 2, kBytes, s);
  rt().MemcpyAsync(host, dev, kBytes, s);  // must see 2, not 3
  rt().MemsetAsync(dev, 3, kBytes, s);
  rt().SynchronizeStream(s);
  EXPECT_EQ(Mismatches(std::vector<unsigned char>(host, host + kBytes), 2), 0u);
  EXPECT_EQ(Mismatches(ReadBack(dev, kBytes, s), 3), 0u);
}

// A stream says which device it belongs to; the default stream belongs to every device.
TEST_P(RuntimeConformanceTest, AStreamKnowsItsDevice) {
  EXPECT_EQ(rt().StreamDevice(Stream{}), -1);
  for (int d = 0; d < rt().DeviceCount() && d < 2; ++d) {
    rt().SetDevice(d);
    const Stream s = rt().CreateStream(d);
    const int device = rt().StreamDevice(s);
    EXPECT_TRUE(device == d || device == -1) << device;  // -1: CUDA before 12.8
    rt().DestroyStream(s);
  }
  rt().SetDevice(0);
}

// Work enqueued on a capturing stream is recorded, not run; allocation stays allowed.
TEST_P(RuntimeConformanceTest, StreamCaptureRecordsWorkAndAllowsAllocation) {
  constexpr std::size_t kBytes = 64 * 1024;
  Stream s = NewStream(), other = NewStream();
  void* dev = NewDevice(kBytes);
  ASSERT_NE(dev, nullptr);
  rt().MemsetAsync(dev, 1, kBytes, s);
  rt().SynchronizeStream(s);
  EXPECT_FALSE(rt().IsCapturing(s));
  rt().BeginCapture(s);
  EXPECT_TRUE(rt().IsCapturing(s));
  EXPECT_FALSE(rt().IsCapturing(other));
  rt().MemsetAsync(dev, 2, kBytes, s);  // captured
  void* p = rt().Malloc(0, kMiB);       // allowed during a capture (relaxed mode)
  EXPECT_NE(p, nullptr);
  rt().EndCapture(s);
  EXPECT_FALSE(rt().IsCapturing(s));
  EXPECT_EQ(Mismatches(ReadBack(dev, kBytes, s), 1), 0u) << "captured work ran";
  rt().Free(0, p);
  EXPECT_THROW(rt().EndCapture(s), platform::RuntimeError) << "not capturing";
}

// What CUDA refuses while a capture is underway; each refusal ends that capture (as CUDA
// invalidates it), and the runtime stays usable.
TEST_P(RuntimeConformanceTest, StreamCaptureRefusesWhatCouldSynchronizeOrCrossIt) {
  Stream s = NewStream(), other = NewStream();
  Event outside = NewEvent(), inside = NewEvent();
  rt().RecordEvent(outside, other);
  void* dev = rt().Malloc(0, kMiB);
  ASSERT_NE(dev, nullptr);
  auto refused = [&](const char* what, const std::function<void()>& call) {
    SCOPED_TRACE(what);
    rt().BeginCapture(s);
    EXPECT_THROW(call(), platform::RuntimeError);
    try {
      rt().EndCapture(s);  // CUDA reports the capture invalidated
    } catch (const platform::RuntimeError&) {
    }
    EXPECT_FALSE(rt().IsCapturing(s));
  };
  refused("Free", [&] { rt().Free(0, dev); });
  refused("SynchronizeDevice", [&] { rt().SynchronizeDevice(0); });
  refused("QueryStream of the capturing stream", [&] { rt().QueryStream(s); });
  refused("a wait of the capturing stream on an event recorded outside",
          [&] { rt().StreamWaitEvent(s, outside); });
  refused("QueryEvent of an event recorded in the capture", [&] {
    rt().RecordEvent(inside, s);
    rt().QueryEvent(inside);
  });
  // A refused free says so by its type, so a caller can wait for the capture's end (the raw
  // device allocator defers it).
  rt().BeginCapture(s);
  EXPECT_THROW(rt().Free(0, dev), platform::CaptureRefusedError);
  try {
    rt().EndCapture(s);
  } catch (const platform::RuntimeError&) {
  }
  rt().RecordEvent(inside, other);  // recorded outside again: usable
  rt().SynchronizeEvent(inside);
  rt().Free(0, dev);
}

TEST_P(RuntimeConformanceTest, DefaultStreamRunsWork) {
  std::atomic<bool> ran{false};
  rt().LaunchHostTask(Stream{}, [&] { ran = true; });
  rt().SynchronizeStream(Stream{});
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(rt().QueryStream(Stream{}));
  EXPECT_THROW(rt().DestroyStream(Stream{}), RuntimeError);
}

TEST_P(RuntimeConformanceTest, DestroyingAStreamWithPendingWorkRunsTheWork) {
  Stream s = rt().CreateStream(0);
  GatedWork w(NewEvent());
  Enqueue(s, w);
  rt().DestroyStream(s);  // returns although the stream is blocked
  ExpectPending(w);
  ExpectRunsOnceOpened(w);
}

TEST_P(RuntimeConformanceTest, SynchronizeDeviceWaitsForEveryStream) {
  Stream s1 = NewStream();
  Stream s2 = NewStream();
  std::atomic<int> done{0};
  for (Stream s : {s1, s2}) {
    rt().LaunchHostTask(s, [] { std::this_thread::sleep_for(std::chrono::milliseconds(10)); });
    rt().LaunchHostTask(s, [&] { ++done; });
  }
  rt().SynchronizeDevice(0);
  EXPECT_EQ(done.load(), 2);
  EXPECT_TRUE(rt().QueryStream(s1));
  EXPECT_TRUE(rt().QueryStream(s2));
}

TEST_P(RuntimeConformanceTest, HostTaskCapturesAreReleasedByCompletion) {
  Stream s = NewStream();
  auto token = std::make_shared<int>(7);
  std::atomic<int> seen{0};
  Gate gate;
  rt().LaunchHostTask(s, gate.Wait());
  rt().LaunchHostTask(s, [token, &seen] { seen = *token; });
  EXPECT_EQ(token.use_count(), 2);  // held by the pending task
  gate.Open();
  rt().SynchronizeStream(s);
  EXPECT_EQ(seen.load(), 7);
  EXPECT_EQ(token.use_count(), 1);  // the runtime freed the task, not just ran it
}

TEST_P(RuntimeConformanceTest, AThrowingHostTaskDoesNotStopTheStream) {
  Stream s = NewStream();
  std::atomic<bool> ran{false};
  rt().LaunchHostTask(s, [] { throw std::runtime_error("task failure (expected by the test)"); });
  rt().LaunchHostTask(s, [&] { ran = true; });
  rt().SynchronizeStream(s);
  EXPECT_TRUE(ran.load());
}

// SyncCount counts every host wait: the synchronize calls and a device Free (cudaFree
// synchronizes the device); nothing else.
TEST_P(RuntimeConformanceTest, SyncCountCountsEveryHostWait) {
  Stream s = NewStream();
  Stream other = NewStream();
  Event e = NewEvent();
  void* dev = NewDevice(kMiB);
  ASSERT_NE(dev, nullptr);
  const std::size_t g = rt().VmmGranularity(0);
  const std::uint64_t start = rt().SyncCount();

  // None of these wait.
  void* p = rt().Malloc(0, kMiB);
  ASSERT_NE(p, nullptr);
  rt().Free(0, nullptr);  // a no-op, not a free
  std::size_t free_b = 0;
  rt().MemInfo(0, &free_b, nullptr);
  rt().LaunchHostTask(s, [] {});
  rt().MemsetAsync(dev, 1, kMiB, s);
  rt().RecordEvent(e, s);
  rt().StreamWaitEvent(other, e);
  rt().QueryEvent(e);
  rt().QueryStream(s);
  Event e2 = rt().CreateEvent(0);
  rt().DestroyEvent(e2);
  Stream s2 = rt().CreateStream(0);
  rt().DestroyStream(s2);
  if (g != 0) {
    void* va = rt().ReserveAddress(0, g);
    PhysicalMemory mem = rt().CreatePhysical(0, g);
    ASSERT_TRUE(mem.valid());
    rt().Map(va, g, mem, 0, 0);
    rt().Unmap(va, g);
    rt().ReleasePhysical(mem);
    rt().FreeAddress(va, g);
  }
  EXPECT_EQ(rt().SyncCount(), start);

  rt().Free(0, p);
  EXPECT_EQ(rt().SyncCount(), start + 1);
  rt().SynchronizeStream(s);
  EXPECT_EQ(rt().SyncCount(), start + 2);
  rt().SynchronizeEvent(e);
  EXPECT_EQ(rt().SyncCount(), start + 3);
  rt().SynchronizeDevice(0);
  EXPECT_EQ(rt().SyncCount(), start + 4);
  rt().QueryEvent(e);
  rt().QueryStream(s);
  EXPECT_EQ(rt().SyncCount(), start + 4);
}

INSTANTIATE_TEST_SUITE_P(Emulated, RuntimeConformanceTest, EmulatedCase(), CaseName);
INSTANTIATE_TEST_SUITE_P(CUDA, RuntimeConformanceTest, CudaCase(), CaseName);

}  // namespace
}  // namespace strata::platform::conformance_test
