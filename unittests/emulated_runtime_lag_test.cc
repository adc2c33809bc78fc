// The emulated runtime's device lag (EmulatedRuntime::Options::event_lag): work is seen done by
// host queries only once more tasks were enqueued behind it, as on a GPU that runs behind the
// host; host waits catch the lag up.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "platform/emulated_runtime.h"

namespace strata::platform {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Device lag. Waits until the tasks enqueued on `s` so far have run, without a host wait on `s`
// (which would catch its lag up) and without enqueueing on `s` (which would count against the
// lag): another stream waits for them on the device, then signals the host.
void WaitRanWithoutHostWait(EmulatedRuntime& rt, Stream s) {
  Stream other = rt.CreateStream(0);
  Event e = rt.CreateEvent(0);
  rt.RecordEvent(e, s);
  rt.StreamWaitEvent(other, e);
  absl::Notification ran;
  rt.LaunchHostTask(other, [&] { ran.Notify(); });
  ran.WaitForNotification();
  rt.DestroyEvent(e);
  rt.DestroyStream(other);
}

// One device of 10 MiB, `lag` tasks behind the host.
EmulatedRuntime::Options Lagged(std::uint64_t lag) {
  EmulatedRuntime::Options o;
  o.capacity_bytes = 10 * kMiB;
  o.event_lag = lag;
  return o;
}

// The lag tests: Start makes the runtime, with the stream s_ and the event e_ on it that the
// test uses; both are destroyed after it.
class EmulatedRuntimeLagTest : public ::testing::Test {
 protected:
  EmulatedRuntime& Start(const EmulatedRuntime::Options& o) {
    rt_ = std::make_unique<EmulatedRuntime>(o);
    s_ = rt_->CreateStream(0);
    e_ = rt_->CreateEvent(0);
    return *rt_;
  }
  void TearDown() override {
    if (rt_ == nullptr) return;
    rt_->DestroyEvent(e_);
    rt_->DestroyStream(s_);
  }

  std::unique_ptr<EmulatedRuntime> rt_;
  Stream s_;
  Event e_;
};

// With lag N, an event recorded after a task is complete to host queries only once the task ran
// and N more tasks were enqueued on that stream.
TEST_F(EmulatedRuntimeLagTest, LagHidesCompletedWorkUntilNMoreTasks) {
  constexpr int kLag = 3;
  EmulatedRuntime& rt = Start(Lagged(kLag));
  rt.LaunchHostTask(s_, [] {});
  rt.RecordEvent(e_, s_);
  WaitRanWithoutHostWait(rt, s_);
  for (int i = 0; i < kLag; ++i) {
    EXPECT_FALSE(rt.QueryEvent(e_)) << "after " << i << " more task(s)";
    rt.LaunchHostTask(s_, [] {});
    WaitRanWithoutHostWait(rt, s_);
  }
  EXPECT_TRUE(rt.QueryEvent(e_));
  // The stream's own last tasks are still behind: the stream is not idle to a query.
  EXPECT_FALSE(rt.QueryStream(s_));
}

// Lag never makes work complete before it ran: N later tasks are not enough while it is blocked.
TEST_F(EmulatedRuntimeLagTest, LaggedWorkMustAlsoHaveRun) {
  EmulatedRuntime& rt = Start(Lagged(2));
  absl::Notification gate;
  rt.LaunchHostTask(s_, [&] { gate.WaitForNotification(); });
  rt.RecordEvent(e_, s_);
  rt.LaunchHostTask(s_, [] {});
  rt.LaunchHostTask(s_, [] {});
  EXPECT_FALSE(rt.QueryEvent(e_));
  gate.Notify();
  rt.SynchronizeEvent(e_);
  EXPECT_TRUE(rt.QueryEvent(e_));
}

// Deterministic lag: what a query sees depends on task counts alone. Work enqueued N tasks ago
// is seen complete, the query waiting for it to run (here it runs only once another thread
// opens its gate); work enqueued fewer than N tasks ago is not, although it ran.
TEST_F(EmulatedRuntimeLagTest, DeterministicLagDependsOnTaskCountsAlone) {
  EmulatedRuntime::Options o = Lagged(2);
  o.deterministic_lag = true;
  EmulatedRuntime& rt = Start(o);
  absl::Notification gate;
  rt.LaunchHostTask(s_, [&] { gate.WaitForNotification(); });
  rt.RecordEvent(e_, s_);
  rt.LaunchHostTask(s_, [] {});
  EXPECT_FALSE(rt.QueryEvent(e_)) << "one task after it: within the lag";
  rt.LaunchHostTask(s_, [] {});
  std::thread opener([&] {
    absl::SleepFor(absl::Milliseconds(20));  // most likely after the query began
    gate.Notify();
  });
  EXPECT_TRUE(rt.QueryEvent(e_)) << "two tasks after it: complete once run";
  opener.join();
  EXPECT_EQ(rt.SyncCount(), 0u) << "a query is not a host synchronize";
}

// Deterministic lag: a wait on another stream's work is a task of the waiting stream whether
// that work has run yet or not (a timing), so the same calls always leave the same task counts
// behind them. Here the work waited for has run (a host wait on it), and an event recorded on
// the waiting stream after the wait is still within that stream's lag.
TEST_F(EmulatedRuntimeLagTest, DeterministicLagCountsAWaitOnWorkThatRan) {
  EmulatedRuntime::Options o = Lagged(2);
  o.deterministic_lag = true;
  EmulatedRuntime& rt = Start(o);
  Stream other = rt.CreateStream(0);
  Event done = rt.CreateEvent(0);
  rt.LaunchHostTask(other, [] {});
  rt.RecordEvent(done, other);
  rt.SynchronizeEvent(done);
  rt.StreamWaitEvent(s_, done);
  rt.RecordEvent(e_, s_);  // covers the wait
  EXPECT_FALSE(rt.QueryEvent(e_)) << "the wait is a task: two more must follow it";
  rt.LaunchHostTask(s_, [] {});
  rt.LaunchHostTask(s_, [] {});
  EXPECT_TRUE(rt.QueryEvent(e_));
  rt.DestroyEvent(done);
  rt.DestroyStream(other);
}

// Host waits return once the work ran, whatever the lag, and queries then see it complete.
TEST_F(EmulatedRuntimeLagTest, HostWaitsReturnAndCatchUpTheLag) {
  EmulatedRuntime& rt = Start(Lagged(1000));
  rt.LaunchHostTask(s_, [] {});
  rt.RecordEvent(e_, s_);
  rt.LaunchHostTask(s_, [] {});
  rt.SynchronizeEvent(e_);
  EXPECT_TRUE(rt.QueryEvent(e_));
  EXPECT_FALSE(rt.QueryStream(s_));  // the second task is not covered by the event's wait
  rt.SynchronizeStream(s_);
  EXPECT_TRUE(rt.QueryStream(s_));

  rt.LaunchHostTask(s_, [] {});
  rt.RecordEvent(e_, s_);
  WaitRanWithoutHostWait(rt, s_);
  EXPECT_FALSE(rt.QueryEvent(e_));
  rt.SynchronizeDevice(0);
  EXPECT_TRUE(rt.QueryEvent(e_));
  EXPECT_TRUE(rt.QueryStream(s_));
  // The default stream too.
  rt.LaunchHostTask(Stream{}, [] {});
  WaitRanWithoutHostWait(rt, Stream{});
  EXPECT_FALSE(rt.QueryStream(Stream{}));
  rt.SynchronizeDevice(0);
  EXPECT_TRUE(rt.QueryStream(Stream{}));
}

// A device free synchronizes the device on CUDA: with lag it catches every stream of the device
// up to what was enqueued before it (once that work ran).
TEST_F(EmulatedRuntimeLagTest, FreeCatchesTheLagUp) {
  EmulatedRuntime& rt = Start(Lagged(1000));
  rt.LaunchHostTask(s_, [] {});
  rt.RecordEvent(e_, s_);
  WaitRanWithoutHostWait(rt, s_);
  void* p = rt.Malloc(0, kMiB);
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(rt.QueryEvent(e_));
  rt.Free(0, p);
  EXPECT_TRUE(rt.QueryEvent(e_));
  EXPECT_TRUE(rt.QueryStream(s_));
}

// An event that captured no task is complete at once, lag or not; without lag (the default) an
// event is complete as soon as its work ran.
TEST_F(EmulatedRuntimeLagTest, NoLagByDefaultAndNothingToWaitForIsComplete) {
  EXPECT_EQ(EmulatedRuntime::Options{}.event_lag, 0u);
  EmulatedRuntime& lagged = Start(Lagged(5));
  lagged.RecordEvent(e_, s_);  // s_ is idle
  EXPECT_TRUE(lagged.QueryEvent(e_));
  EXPECT_TRUE(lagged.QueryStream(s_));

  EmulatedRuntime rt(Lagged(0));
  Stream s = rt.CreateStream(0);
  Event f = rt.CreateEvent(0);
  rt.LaunchHostTask(s, [] {});
  rt.RecordEvent(f, s);
  WaitRanWithoutHostWait(rt, s);
  EXPECT_TRUE(rt.QueryEvent(f));
  EXPECT_TRUE(rt.QueryStream(s));
  rt.DestroyEvent(f);
  rt.DestroyStream(s);
}

}  // namespace
}  // namespace strata::platform
