// The DeviceRuntime contract, written once and run against every runtime: the emulated one
// everywhere, the CUDA one (suite prefix "CUDA", labelled gpu) where a GPU is available.
// Device memory is never read directly: results are copied back with MemcpyAsync into pinned
// host memory, as they must be on a real GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "platform/cuda_runtime.h"
#include "platform/device_runtime.h"
#include "platform/emulated_runtime.h"
#include "platform/physical_memory.h"
#include "support/runtimes.h"
#include "support/spin_kernel.h"

namespace strata::platform {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

struct RuntimeCase {
  std::string name;
  // Returns the runtime, or null with the reason to skip in *skip.
  std::function<std::shared_ptr<DeviceRuntime>(std::string* skip)> make;
};

void PrintTo(const RuntimeCase& c, std::ostream* os) { *os << c.name; }

std::shared_ptr<DeviceRuntime> MakeEmulated(std::string*) {
  return std::make_shared<EmulatedRuntime>();
}

std::shared_ptr<DeviceRuntime> MakeCuda(std::string* skip) {
  if (!CUDARuntime::Available(skip)) return nullptr;
  // The process-wide instance is never destroyed: share it without ownership.
  return std::shared_ptr<DeviceRuntime>(&CUDARuntime::Instance(), [](DeviceRuntime*) {});
}

// Blocks a stream until opened (a host task waiting on it), so "not yet complete" states are
// deterministic rather than timed. Opens itself when destroyed, so a failing test never leaves
// a stream blocked.
class Gate {
 public:
  Gate() : open_(std::make_shared<absl::Notification>()) {}
  ~Gate() { Open(); }
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  void Open() {
    if (!open_->HasBeenNotified()) open_->Notify();
  }
  std::function<void()> Wait() const {
    return [open = open_] { open->WaitForNotification(); };
  }

 private:
  std::shared_ptr<absl::Notification> open_;
};

class RuntimeConformanceTest : public ::testing::TestWithParam<RuntimeCase> {
 protected:
  void SetUp() override {
    std::string skip;
    rt_ = GetParam().make(&skip);
    if (rt_ == nullptr) GTEST_SKIP() << skip;
    rt_->SetDevice(0);
  }

  // Releases what the test created through the helpers below; test locals (gates) are gone by
  // now, so pending work can finish.
  void TearDown() override {
    if (rt_ == nullptr) return;
    try {
      for (Stream s : streams_) {
        rt_->SynchronizeStream(s);
        rt_->DestroyStream(s);
      }
      rt_->SynchronizeDevice(0);
      for (auto [p, bytes] : mappings_) rt_->Unmap(p, bytes);
      for (PhysicalMemory m : physical_) rt_->ReleasePhysical(m);
      for (auto [p, bytes] : reservations_) rt_->FreeAddress(p, bytes);
      for (Event e : events_) rt_->DestroyEvent(e);
      for (void* p : device_blocks_) rt_->Free(0, p);
      for (void* p : host_blocks_) rt_->HostFree(p);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "cleanup failed: " << e.what();
    }
  }

  DeviceRuntime& rt() { return *rt_; }

  // Opens `gate`, which holds back the work `e` was recorded after, and waits for `e`: it is
  // complete then.
  void OpenAndWait(Gate& gate, Event e) {
    gate.Open();
    rt().SynchronizeEvent(e);
    EXPECT_TRUE(rt().QueryEvent(e));
  }

  // Work held back by a gate: a task that sets `ran`, and the event `done` recorded after it.
  struct GatedWork {
    explicit GatedWork(Event e) : done(e) {}
    Gate gate;
    std::atomic<bool> ran{false};
    const Event done;
  };
  void Enqueue(Stream s, GatedWork& w) {
    rt().LaunchHostTask(s, w.gate.Wait());
    rt().LaunchHostTask(s, [&ran = w.ran] { ran = true; });
    rt().RecordEvent(w.done, s);
  }
  // Neither the task has run nor the event completed.
  void ExpectPending(const GatedWork& w) {
    EXPECT_FALSE(rt().QueryEvent(w.done));
    EXPECT_FALSE(w.ran.load());
  }
  // Once the gate opens, the task runs and the event completes.
  void ExpectRunsOnceOpened(GatedWork& w) {
    OpenAndWait(w.gate, w.done);
    EXPECT_TRUE(w.ran.load());
  }

  Stream NewStream() {
    Stream s = rt_->CreateStream(0);
    streams_.push_back(s);
    return s;
  }
  // For tests that destroy the stream themselves.
  void Forget(Stream s) { std::erase(streams_, s); }
  Event NewEvent() {
    Event e = rt_->CreateEvent(0);
    events_.push_back(e);
    return e;
  }
  void* NewDevice(std::size_t bytes) {
    void* p = rt_->Malloc(0, bytes);
    if (p != nullptr) device_blocks_.push_back(p);
    return p;
  }
  // Virtual memory through the fixture: whatever a test leaves mapped, created or reserved is
  // undone in TearDown.
  void* NewReservation(std::size_t bytes) {
    void* p = rt_->ReserveAddress(0, bytes);
    reservations_.emplace_back(p, bytes);
    return p;
  }
  PhysicalMemory NewPhysical(std::size_t bytes) {
    PhysicalMemory m = rt_->CreatePhysical(0, bytes);
    if (m.valid()) physical_.push_back(m);
    return m;
  }
  void MapTracked(void* p, std::size_t bytes, PhysicalMemory m, std::size_t offset) {
    rt_->Map(p, bytes, m, offset, 0);
    mappings_.emplace_back(p, bytes);
  }
  void UnmapTracked(void* p, std::size_t bytes) {
    rt_->Unmap(p, bytes);
    std::erase(mappings_, std::pair<void*, std::size_t>(p, bytes));
  }
  void ReleaseTracked(PhysicalMemory m) {
    rt_->ReleasePhysical(m);
    std::erase(physical_, m);
  }
  void FreeAddressTracked(void* p, std::size_t bytes) {
    rt_->FreeAddress(p, bytes);
    std::erase(reservations_, std::pair<void*, std::size_t>(p, bytes));
  }

  unsigned char* NewHost(std::size_t bytes) {
    void* p = rt_->HostMalloc(bytes);
    if (p != nullptr) host_blocks_.push_back(p);
    return static_cast<unsigned char*>(p);
  }

  // Copies `bytes` of device memory back to the host on `stream` and waits for it.
  // `host` (pinned, from NewHost) defaults to a new buffer; pass one allocated beforehand where
  // the stream state must not be disturbed by an allocation.
  std::vector<unsigned char> ReadBack(const void* device_ptr, std::size_t bytes, Stream stream,
                                      unsigned char* host = nullptr) {
    if (host == nullptr) host = NewHost(bytes);
    std::memset(host, 0xEE, bytes);
    rt_->MemcpyAsync(host, device_ptr, bytes, stream);
    rt_->SynchronizeStream(stream);
    return std::vector<unsigned char>(host, host + bytes);
  }

  // Number of bytes in `v` different from `value` (0 on success; prints nicely on failure).
  static std::size_t Mismatches(const std::vector<unsigned char>& v, unsigned char value) {
    std::size_t n = 0;
    for (unsigned char c : v) n += c != value;
    return n;
  }

 private:
  std::shared_ptr<DeviceRuntime> rt_;
  std::vector<Stream> streams_;
  std::vector<Event> events_;
  std::vector<void*> device_blocks_;
  std::vector<void*> host_blocks_;
  std::vector<std::pair<void*, std::size_t>> reservations_, mappings_;
  std::vector<PhysicalMemory> physical_;
};

TEST_P(RuntimeConformanceTest, DevicesAndCurrentDevice) {
  ASSERT_GE(rt().DeviceCount(), 1);
  rt().SetDevice(0);
  EXPECT_EQ(rt().GetDevice(), 0);
  EXPECT_THROW(rt().SetDevice(rt().DeviceCount()), RuntimeError);
  EXPECT_THROW(rt().SetDevice(-1), RuntimeError);
  EXPECT_EQ(rt().GetDevice(), 0);
}

TEST_P(RuntimeConformanceTest, InvalidDeviceOrdinalThrowsAndLeavesTheRuntimeUsable) {
  const int bad = rt().DeviceCount();
  EXPECT_THROW(rt().Malloc(bad, 1024), RuntimeError);
  EXPECT_THROW(rt().CreateStream(bad), RuntimeError);
  EXPECT_THROW(rt().CreateEvent(bad), RuntimeError);
  std::size_t free_b = 0, total_b = 0;
  EXPECT_THROW(rt().MemInfo(bad, &free_b, &total_b), RuntimeError);
  // The failed calls left no error behind and did not change the current device.
  EXPECT_EQ(rt().GetDevice(), 0);
  EXPECT_NE(NewDevice(1024), nullptr);
}

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
  rt().RecordEvent(inside, other);  // recorded outside again: usable
  rt().SynchronizeEvent(inside);
  rt().Free(0, dev);
}

TEST_P(RuntimeConformanceTest, HostToDeviceToHostRoundTrip) {
  constexpr std::size_t kBytes = 64 * 1024;
  Stream s = NewStream();
  unsigned char* src = NewHost(kBytes);
  ASSERT_NE(src, nullptr);
  for (std::size_t i = 0; i < kBytes; ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
  void* dev = NewDevice(kBytes);
  ASSERT_NE(dev, nullptr);
  rt().MemcpyAsync(dev, src, kBytes, s);
  std::vector<unsigned char> back = ReadBack(dev, kBytes, s);
  EXPECT_EQ(std::memcmp(back.data(), src, kBytes), 0);
}

TEST_P(RuntimeConformanceTest, DefaultStreamRunsWork) {
  std::atomic<bool> ran{false};
  rt().LaunchHostTask(Stream{}, [&] { ran = true; });
  rt().SynchronizeStream(Stream{});
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(rt().QueryStream(Stream{}));
  EXPECT_THROW(rt().DestroyStream(Stream{}), RuntimeError);
}

TEST_P(RuntimeConformanceTest, NeverRecordedEventIsComplete) {
  Event e = NewEvent();
  ASSERT_TRUE(e.valid());
  EXPECT_TRUE(rt().QueryEvent(e));
  rt().SynchronizeEvent(e);  // returns at once
  EXPECT_TRUE(rt().QueryEvent(e));
}

TEST_P(RuntimeConformanceTest, EventCompletesOnlyAfterTheWorkBeforeIt) {
  Stream s = NewStream();
  GatedWork w(NewEvent());
  Enqueue(s, w);
  EXPECT_FALSE(rt().QueryStream(s));
  ExpectPending(w);
  ExpectRunsOnceOpened(w);
}

TEST_P(RuntimeConformanceTest, EventCapturesOnlyWorkEnqueuedBeforeTheRecord) {
  Stream s = NewStream();
  Event before = NewEvent();
  Event after = NewEvent();
  Gate gate;
  std::atomic<bool> first_done{false};
  rt().LaunchHostTask(s, [&] { first_done = true; });
  rt().RecordEvent(before, s);
  rt().LaunchHostTask(s, gate.Wait());
  rt().RecordEvent(after, s);
  // `before` completes although later work on the stream is blocked.
  rt().SynchronizeEvent(before);
  EXPECT_TRUE(first_done.load());
  EXPECT_TRUE(rt().QueryEvent(before));
  EXPECT_FALSE(rt().QueryEvent(after));
  OpenAndWait(gate, after);
}

TEST_P(RuntimeConformanceTest, ReRecordingTracksTheLatestRecord) {
  Stream s = NewStream();
  Event e = NewEvent();
  rt().RecordEvent(e, s);
  rt().SynchronizeEvent(e);
  EXPECT_TRUE(rt().QueryEvent(e));
  Gate gate;
  rt().LaunchHostTask(s, gate.Wait());
  rt().RecordEvent(e, s);
  EXPECT_FALSE(rt().QueryEvent(e));  // the new record is pending
  OpenAndWait(gate, e);

  // Re-recorded on another stream: follows that stream now.
  Stream other = NewStream();
  Gate gate2;
  rt().LaunchHostTask(other, gate2.Wait());
  rt().RecordEvent(e, other);
  EXPECT_FALSE(rt().QueryEvent(e));
  OpenAndWait(gate2, e);
}

// A slow writer on stream B; stream A reads the buffer. Before waiting on B's event A sees the
// old contents (the streams are independent); after the wait it sees B's pattern.
TEST_P(RuntimeConformanceTest, OtherStreamsWritesAreVisibleAfterWaitingOnItsEvent) {
  constexpr std::size_t kBytes = 4 * kMiB;
  Stream a = NewStream();
  Stream b = NewStream();
  Event b_done = NewEvent();
  void* dev = NewDevice(kBytes);
  ASSERT_NE(dev, nullptr);
  // Allocated up front: nothing but stream work happens while B is blocked.
  unsigned char* before = NewHost(kBytes);
  unsigned char* after = NewHost(kBytes);
  ASSERT_TRUE(before != nullptr && after != nullptr);
  rt().MemsetAsync(dev, 0, kBytes, a);
  rt().SynchronizeStream(a);

  Gate gate;
  rt().LaunchHostTask(b, gate.Wait());
  rt().LaunchHostTask(b, [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  rt().MemsetAsync(dev, 0x5A, kBytes, b);
  rt().RecordEvent(b_done, b);

  EXPECT_FALSE(rt().QueryEvent(b_done));
  EXPECT_EQ(Mismatches(ReadBack(dev, kBytes, a, before), 0), 0u)
      << "A must not wait for B implicitly";

  OpenAndWait(gate, b_done);
  EXPECT_EQ(Mismatches(ReadBack(dev, kBytes, a, after), 0x5A), 0u);
}

TEST_P(RuntimeConformanceTest, MallocFreeAndMemInfoAreConsistent) {
  constexpr std::size_t kBytes = 64 * kMiB;
  std::size_t free0 = 0, total0 = 0;
  rt().MemInfo(0, &free0, &total0);
  ASSERT_GT(total0, 0u);
  ASSERT_LE(free0, total0);
  ASSERT_GE(free0, kBytes);

  void* p = rt().Malloc(0, kBytes);
  ASSERT_NE(p, nullptr);
  std::size_t free1 = 0, total1 = 0;
  rt().MemInfo(0, &free1, &total1);
  EXPECT_EQ(total1, total0);
  EXPECT_LE(free1 + kBytes, free0);

  // The memory is usable end to end.
  Stream s = NewStream();
  rt().MemsetAsync(p, 0x33, kBytes, s);
  EXPECT_EQ(Mismatches(ReadBack(p, kBytes, s), 0x33), 0u);

  rt().Free(0, p);
  std::size_t free2 = 0;
  rt().MemInfo(0, &free2, nullptr);
  EXPECT_GT(free2, free1);
  rt().Free(0, nullptr);  // no-op
}

TEST_P(RuntimeConformanceTest, OutOfMemoryReturnsNullAndLeavesTheRuntimeUsable) {
  EXPECT_EQ(rt().Malloc(0, 0), nullptr);
  std::size_t total = 0;
  rt().MemInfo(0, nullptr, &total);
  EXPECT_EQ(rt().Malloc(0, std::size_t{1} << 50), nullptr);  // 1 PiB
  EXPECT_EQ(rt().Malloc(0, total + kMiB), nullptr);
  void* p = NewDevice(kMiB);
  EXPECT_NE(p, nullptr);
}

TEST_P(RuntimeConformanceTest, HostMemoryIsUsable) {
  EXPECT_EQ(rt().HostMalloc(0), nullptr);
  void* p = rt().HostMalloc(1 * kMiB);
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x11, kMiB);
  EXPECT_EQ(static_cast<unsigned char*>(p)[kMiB - 1], 0x11);
  rt().HostFree(p);
  rt().HostFree(nullptr);  // no-op
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

TEST_P(RuntimeConformanceTest, ManyThreadsRecordAndQueryEvents) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 100;
  std::vector<Stream> streams;
  std::vector<Event> events;
  for (int t = 0; t < kThreads; ++t) {
    streams.push_back(NewStream());
    events.push_back(NewEvent());
  }
  Event shared = NewEvent();
  std::atomic<int> counters[kThreads] = {};
  std::atomic<int> errors{0};
  std::atomic<bool> stop_querying{false};

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      rt().SetDevice(0);
      for (int i = 0; i < kRounds; ++i) {
        rt().LaunchHostTask(streams[t], [&counters, t] { ++counters[t]; });
        rt().RecordEvent(events[t], streams[t]);
        rt().RecordEvent(shared, streams[t]);
        rt().QueryEvent(events[t]);
        rt().SynchronizeEvent(events[t]);
        if (!rt().QueryEvent(events[t]) || counters[t].load() != i + 1) ++errors;
      }
    });
  }
  std::thread querier([&] {
    while (!stop_querying.load()) {
      rt().QueryEvent(shared);
      for (Event e : events) rt().QueryEvent(e);
    }
  });
  for (auto& th : threads) th.join();
  stop_querying = true;
  querier.join();
  EXPECT_EQ(errors.load(), 0);
  for (Stream s : streams) rt().SynchronizeStream(s);
  EXPECT_TRUE(rt().QueryEvent(shared));
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(counters[t].load(), kRounds);
}

// --- virtual memory ---------------------------------------------------------------------------

#define REQUIRE_VMM(g)                          \
  const std::size_t g = rt().VmmGranularity(0); \
  if (g == 0) GTEST_SKIP() << "no virtual memory management on device 0"

TEST_P(RuntimeConformanceTest, VmmGranularityIsAPowerOfTwo) {
  REQUIRE_VMM(g);
  EXPECT_EQ(g & (g - 1), 0u) << g;
  EXPECT_GE(g, 4096u);
  EXPECT_THROW(rt().VmmGranularity(rt().DeviceCount()), RuntimeError);
}

// Reserve, create, map, write, read back, unmap, release, free: the memory is counted in MemInfo
// while it exists and usable through the mapping.
TEST_P(RuntimeConformanceTest, VmmRoundTrip) {
  REQUIRE_VMM(g);
  Stream s = NewStream();
  unsigned char* host = NewHost(2 * g);
  ASSERT_NE(host, nullptr);
  std::size_t free0 = 0, total = 0;
  rt().MemInfo(0, &free0, &total);

  auto* base = static_cast<unsigned char*>(NewReservation(4 * g));
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(base) % g, 0u) << "reservation not aligned";
  PhysicalMemory mem = NewPhysical(2 * g);
  ASSERT_TRUE(mem.valid());
  std::size_t free1 = 0;
  rt().MemInfo(0, &free1, nullptr);
  EXPECT_LE(free1 + 2 * g, free0) << "physical memory not counted";

  MapTracked(base + g, 2 * g, mem, 0);
  rt().MemsetAsync(base + g, 0x5C, 2 * g, s);
  EXPECT_EQ(Mismatches(ReadBack(base + g, 2 * g, s, host), 0x5C), 0u);

  UnmapTracked(base + g, 2 * g);
  ReleaseTracked(mem);
  std::size_t free2 = 0;
  rt().MemInfo(0, &free2, nullptr);
  EXPECT_GT(free2, free1) << "physical memory not given back";
  FreeAddressTracked(base, 4 * g);
}

// Pages of one physical allocation mapped at two addresses show the same bytes; pages of two
// allocations mapped side by side form one range that a single operation covers.
TEST_P(RuntimeConformanceTest, VmmMappingsShareAndStitchPages) {
  REQUIRE_VMM(g);
  Stream s = NewStream();
  unsigned char* host = NewHost(2 * g);
  ASSERT_NE(host, nullptr);
  auto* base = static_cast<unsigned char*>(NewReservation(5 * g));
  PhysicalMemory first = NewPhysical(g);
  PhysicalMemory a = NewPhysical(g);
  PhysicalMemory b = NewPhysical(g);
  ASSERT_TRUE(first.valid() && a.valid() && b.valid());

  // a is at base + g and again at base + 3g; [base, base + 2g) is first's page then a's.
  MapTracked(base, g, first, 0);
  MapTracked(base + g, g, a, 0);
  MapTracked(base + 3 * g, g, a, 0);
  rt().MemsetAsync(base, 0x11, 2 * g, s);
  rt().MemsetAsync(base + g, 0x22, g, s);
  EXPECT_EQ(Mismatches(ReadBack(base + 3 * g, g, s, host), 0x22), 0u);
  rt().MemsetAsync(base + 3 * g, 0x33, g, s);
  EXPECT_EQ(Mismatches(ReadBack(base + g, g, s, host), 0x33), 0u);
  EXPECT_EQ(Mismatches(ReadBack(base, g, s, host), 0x11), 0u) << "the first page changed";

  // b right after the second mapping of a: [base + 3g, base + 5g) is a's page then b's.
  MapTracked(base + 4 * g, g, b, 0);
  rt().MemsetAsync(base + 3 * g, 0x44, 2 * g, s);
  EXPECT_EQ(Mismatches(ReadBack(base + 3 * g, 2 * g, s, host), 0x44), 0u);
  EXPECT_EQ(Mismatches(ReadBack(base + g, g, s, host), 0x44), 0u) << "a's page is shared";

  // Releasing a while mapped keeps its pages until the last mapping goes.
  ReleaseTracked(a);
  EXPECT_EQ(Mismatches(ReadBack(base + g, g, s, host), 0x44), 0u);
  UnmapTracked(base, g);
  UnmapTracked(base + g, g);
  EXPECT_EQ(Mismatches(ReadBack(base + 3 * g, g, s, host), 0x44), 0u);
  UnmapTracked(base + 3 * g, g);
  UnmapTracked(base + 4 * g, g);
}

TEST_P(RuntimeConformanceTest, VmmOutOfMemoryIsAnEmptyHandleAndLeavesTheRuntimeUsable) {
  REQUIRE_VMM(g);
  std::size_t total = 0;
  rt().MemInfo(0, nullptr, &total);
  const std::size_t too_much = (total / g + 1) * g;
  const PhysicalMemory none = rt().CreatePhysical(0, too_much);
  EXPECT_FALSE(none.valid()) << too_much << " bytes on a device of " << total;
  // A reservation is address space only: larger than the device is fine.
  void* va = NewReservation(too_much);
  PhysicalMemory mem = NewPhysical(g);
  ASSERT_TRUE(mem.valid());
  MapTracked(va, g, mem, 0);
  Stream s = NewStream();
  rt().MemsetAsync(va, 0x66, g, s);
  EXPECT_EQ(Mismatches(ReadBack(va, g, s), 0x66), 0u);
}

// Each bad call throws and changes nothing: the runtime stays usable.
TEST_P(RuntimeConformanceTest, VmmBadArgumentsThrow) {
  REQUIRE_VMM(g);
  EXPECT_THROW(rt().CreatePhysical(0, 0), RuntimeError);
  EXPECT_THROW(rt().CreatePhysical(0, g / 2), RuntimeError);
  EXPECT_THROW(rt().CreatePhysical(0, g + g / 2), RuntimeError);
  EXPECT_THROW(rt().ReserveAddress(0, 0), RuntimeError);
  EXPECT_THROW(rt().ReserveAddress(0, g / 2), RuntimeError);
  EXPECT_THROW(rt().CreatePhysical(rt().DeviceCount(), g), RuntimeError);

  auto* base = static_cast<unsigned char*>(NewReservation(4 * g));
  PhysicalMemory mem = NewPhysical(2 * g);
  ASSERT_TRUE(mem.valid());
  EXPECT_THROW(rt().Map(base, g / 2, mem, 0, 0), RuntimeError);      // size
  EXPECT_THROW(rt().Map(base, g, mem, g / 2, 0), RuntimeError);      // offset
  EXPECT_THROW(rt().Map(base, g, mem, g, 0), RuntimeError);          // offset: only 0, as CUDA
  EXPECT_THROW(rt().Map(base + g / 2, g, mem, 0, 0), RuntimeError);  // address

  PhysicalMemory page = NewPhysical(g);
  ASSERT_TRUE(page.valid());
  EXPECT_THROW(rt().Map(base, g, mem, 0, 0), RuntimeError);  // part of an allocation
  MapTracked(base + g, g, page, 0);
  if (GetParam().name == std::string("emulated")) {
    // Caller errors that CUDA does not always report; the emulated runtime does.
    EXPECT_THROW(rt().Map(base, 3 * g, mem, 0, 0), RuntimeError);   // larger than the memory
    EXPECT_THROW(rt().Unmap(base + 2 * g, g), RuntimeError);        // nothing mapped there
    EXPECT_THROW(rt().Map(base + g, g, page, 0, 0), RuntimeError);  // over a mapped range
    EXPECT_THROW(rt().Map(base, 2 * g, mem, 0, 0), RuntimeError);   // overlapping it
  }

  // Still usable: the valid mapping works.
  Stream s = NewStream();
  rt().MemsetAsync(base + g, 0x77, g, s);
  EXPECT_EQ(Mismatches(ReadBack(base + g, g, s), 0x77), 0u);
}

// --- stream waits -----------------------------------------------------------------------------

// B waits on the device for an event of A: B's later work sees A's effects, the host never
// waits (no sync counted, and StreamWaitEvent returns while A is blocked).
TEST_P(RuntimeConformanceTest, StreamWaitEventOrdersWorkWithoutHostWait) {
  Stream a = NewStream();
  Stream b = NewStream();
  Event a_done = NewEvent();
  void* dev = NewDevice(kMiB);
  unsigned char* host = NewHost(kMiB);
  ASSERT_TRUE(dev != nullptr && host != nullptr);
  rt().MemsetAsync(dev, 0, kMiB, a);
  rt().SynchronizeStream(a);
  std::memset(host, 0xEE, kMiB);

  const std::uint64_t syncs = rt().SyncCount();
  Gate gate;
  std::atomic<bool> a_ran{false}, b_saw_a{false};
  rt().LaunchHostTask(a, gate.Wait());
  rt().MemsetAsync(dev, 0x3C, kMiB, a);
  rt().LaunchHostTask(a, [&] { a_ran = true; });
  rt().RecordEvent(a_done, a);
  rt().StreamWaitEvent(b, a_done);
  rt().LaunchHostTask(b, [&] { b_saw_a = a_ran.load(); });
  rt().MemcpyAsync(host, dev, kMiB, b);
  EXPECT_EQ(rt().SyncCount(), syncs);
  EXPECT_FALSE(rt().QueryStream(b)) << "B ran past the wait while A is blocked";
  EXPECT_FALSE(a_ran.load());

  gate.Open();
  rt().SynchronizeStream(b);
  EXPECT_TRUE(b_saw_a.load());
  std::vector<unsigned char> copied(host, host + kMiB);
  EXPECT_EQ(Mismatches(copied, 0x3C), 0u);
}

// The wait is for the record at the time of the call; recording the event again later, or
// waiting on a never-recorded event, does not hold the stream.
TEST_P(RuntimeConformanceTest, StreamWaitEventWaitsForTheRecordAtTheTimeOfTheCall) {
  if (GetParam().name != std::string("emulated")) {
    GTEST_SKIP() << "CUDA runs host functions on one thread: the blocked host function this test "
                    "needs would hold back every stream's";
  }
  Stream a = NewStream();
  Stream b = NewStream();
  Stream c = NewStream();
  Event e = NewEvent();
  Event never = NewEvent();
  rt().StreamWaitEvent(b, never);
  rt().LaunchHostTask(b, [] {});
  rt().SynchronizeStream(b);  // does not hang

  rt().LaunchHostTask(a, [] {});
  rt().RecordEvent(e, a);
  rt().SynchronizeStream(a);
  Gate gate;
  rt().LaunchHostTask(c, gate.Wait());
  rt().StreamWaitEvent(b, e);  // for a's (finished) work
  rt().RecordEvent(e, c);      // now e stands for c's blocked work
  std::atomic<bool> ran{false};
  rt().LaunchHostTask(b, [&] { ran = true; });
  rt().SynchronizeStream(b);  // would hang if b waited for c
  EXPECT_TRUE(ran.load());
  EXPECT_FALSE(rt().QueryEvent(e));
  gate.Open();
  rt().SynchronizeEvent(e);
}

INSTANTIATE_TEST_SUITE_P(Emulated, RuntimeConformanceTest,
                         ::testing::Values(RuntimeCase{"emulated", &MakeEmulated}),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(CUDA, RuntimeConformanceTest,
                         ::testing::Values(RuntimeCase{"cuda", &MakeCuda}),
                         [](const auto& info) { return info.param.name; });

#if STRATA_WITH_CUDA
// Real device work (a kernel, not a host callback) between two streams of device 0: each test
// gets streams a and b, an event, kBytes of zeroed device memory and as much pinned host memory,
// all released after it.
class CUDARuntimeKernelTest : public testing::CUDAFixture {
 protected:
  static constexpr std::size_t kBytes = 4 * kMiB;

  void SetUp() override {
    CUDAFixture::SetUp();
    if (IsSkipped()) return;
    runtime_->SetDevice(0);
    a_ = runtime_->CreateStream(0);
    b_ = runtime_->CreateStream(0);
    done_ = runtime_->CreateEvent(0);
    dev_ = runtime_->Malloc(0, kBytes);
    ASSERT_NE(dev_, nullptr);
    host_ = static_cast<unsigned char*>(runtime_->HostMalloc(kBytes));
    ASSERT_NE(host_, nullptr);
    runtime_->MemsetAsync(dev_, 0, kBytes, a_);
    runtime_->SynchronizeStream(a_);
  }
  void TearDown() override {
    if (runtime_ == nullptr) return;
    if (host_ != nullptr) runtime_->HostFree(host_);
    if (dev_ != nullptr) runtime_->Free(0, dev_);
    runtime_->DestroyEvent(done_);
    runtime_->DestroyStream(a_);
    runtime_->DestroyStream(b_);
  }
  // How many bytes of the host copy are not `value`.
  std::size_t HostBytesOtherThan(unsigned char value) const {
    std::size_t n = 0;
    for (std::size_t i = 0; i < kBytes; ++i) n += host_[i] != value;
    return n;
  }

  Stream a_, b_;
  Event done_;
  void* dev_ = nullptr;
  unsigned char* host_ = nullptr;
};

// A kernel on stream B: once B's event says done, A reads the kernel's writes.
TEST_F(CUDARuntimeKernelTest, SlowKernelOnBThenAWaitsOnBsEvent) {
  testing::LaunchSpinWriteKernel(dev_, kBytes, 0x5A, /*spin_ns=*/50'000'000, b_.handle);
  runtime_->RecordEvent(done_, b_);
  // Poll (never timed): whenever the event reports done, the writes must be visible to A.
  std::uint64_t polls = 0;
  while (!runtime_->QueryEvent(done_)) ++polls;
  runtime_->SynchronizeEvent(done_);
  std::memset(host_, 0, kBytes);
  runtime_->MemcpyAsync(host_, dev_, kBytes, a_);
  runtime_->SynchronizeStream(a_);
  EXPECT_EQ(HostBytesOtherThan(0x5A), 0u) << "after " << polls << " polls";
}

// A kernel on A; B waits for A's event on the device and copies the kernel's bytes back: the host
// only waits for B.
TEST_F(CUDARuntimeKernelTest, StreamWaitEventOrdersAKernelBeforeACopy) {
  std::memset(host_, 0, kBytes);
  const std::uint64_t syncs = runtime_->SyncCount();
  testing::LaunchSpinWriteKernel(dev_, kBytes, 0x5A, /*spin_ns=*/50'000'000, a_.handle);
  runtime_->RecordEvent(done_, a_);
  runtime_->StreamWaitEvent(b_, done_);
  runtime_->MemcpyAsync(host_, dev_, kBytes, b_);
  runtime_->SynchronizeStream(b_);
  EXPECT_EQ(runtime_->SyncCount(), syncs + 1);
  EXPECT_EQ(HostBytesOtherThan(0x5A), 0u);
}
#endif  // STRATA_WITH_CUDA

}  // namespace
}  // namespace strata::platform
