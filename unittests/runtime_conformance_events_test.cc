// The DeviceRuntime contract for events and waits between streams (fixture and runtimes:
// support/runtime_conformance_fixture.h): when an event completes, what a record captures,
// re-recording, another stream's writes seen after its event, StreamWaitEvent, and many threads
// recording and querying at once. Run against the emulated runtime and, as CUDA/..., the CUDA
// one; CUDARuntimeKernelTest orders real kernels between two streams on a GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "platform/device_runtime.h"
#include "support/runtime_conformance_fixture.h"
#include "support/runtimes.h"
#include "support/spin_kernel.h"

namespace strata::platform::conformance_test {
namespace {

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

INSTANTIATE_TEST_SUITE_P(Emulated, RuntimeConformanceTest, EmulatedCase(), CaseName);
INSTANTIATE_TEST_SUITE_P(CUDA, RuntimeConformanceTest, CudaCase(), CaseName);

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
}  // namespace strata::platform::conformance_test
