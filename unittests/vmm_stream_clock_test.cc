#include "strategies/vmm/stream_clock.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "absl/synchronization/notification.h"
#include "platform/emulated_runtime.h"
#include "support/holdable_runtime.h"
#include "support/vmm_pool_fixture.h"

namespace strata::strategies::vmm {
namespace {

using platform::Stream;
using vmm_test::kPlace;

class VmmStreamClockTest : public ::testing::Test {
 protected:
  // Enqueues `tasks` tasks on `s` and waits until they ran, without catching up the lag (a
  // synchronize would): what queries see then depends on task counts alone.
  void Work(Stream s, int tasks = 1) {
    for (int i = 1; i < tasks; ++i) runtime_.LaunchHostTask(s, [] {});
    absl::Notification ran;
    runtime_.LaunchHostTask(s, [&ran] { ran.Notify(); });
    ran.WaitForNotification();
  }
  std::uint64_t Free(Stream s, bool fence) {
    return clock_.NumberFree(s, [&](std::uint64_t, std::size_t) { return fence; });
  }

  platform::EmulatedRuntime runtime_{vmm_test::Lagging(4)};
  StreamClock clock_{&runtime_, kPlace};
  Stream a_ = runtime_.CreateStream(0);
  Stream b_ = runtime_.CreateStream(0);

  void TearDown() override { clock_.DestroyEvents(); }
};

TEST_F(VmmStreamClockTest, FreesAreNumberedPerStream) {
  EXPECT_EQ(Free(a_, false), 1u);
  EXPECT_EQ(Free(a_, false), 2u);
  EXPECT_EQ(Free(b_, false), 1u);
  EXPECT_EQ(clock_.Mark(a_), 3u);
  EXPECT_TRUE(clock_.Done(a_, 0)) << "number 0: no use";
}

// An ended stream's frees (blocks freed after End, their work enqueued before it) take the end
// fence's number and record nothing; queries and another stream's wait use that fence. Resume
// (a new stream on the handle) numbers on.
TEST_F(VmmStreamClockTest, AnEndedStreamsFreesAreCoveredByItsEndFence) {
  Work(a_);
  const std::uint64_t before = Free(a_, /*fence=*/false);
  EXPECT_TRUE(clock_.End(a_));
  const std::uint64_t end = Free(a_, /*fence=*/true);  // a due fence is not recorded
  EXPECT_GT(end, before);
  EXPECT_EQ(Free(a_, /*fence=*/true), end);
  std::vector<platform::Event> fences;
  EXPECT_FALSE(clock_.FencesToWaitFor(&fences)) << "the end fence covers every free";
  ASSERT_EQ(fences.size(), 1u);
  EXPECT_EQ(fences[0], clock_.Fence(a_)) << "no new record on the ended handle";
  clock_.OrderAfter(a_, end, b_);
  EXPECT_EQ(clock_.num_waits(), 1);
  Work(a_, 4);
  EXPECT_TRUE(clock_.Done(a_, end));
  EXPECT_TRUE(clock_.Resume(a_));
  EXPECT_FALSE(clock_.Resume(a_));
  EXPECT_EQ(Free(a_, /*fence=*/false), end + 1);
  EXPECT_EQ(runtime_.SyncCount(), 0u);
}

TEST_F(VmmStreamClockTest, AFreeIsDoneOnceAFenceAfterItIsSeenDone) {
  Work(a_);
  const std::uint64_t e = Free(a_, /*fence=*/false);
  EXPECT_FALSE(clock_.Done(a_, e)) << "no fence covers it yet";
  Work(a_);
  const std::uint64_t later = Free(a_, /*fence=*/true);
  EXPECT_FALSE(clock_.Done(a_, e)) << "the device is behind";
  Work(a_, 4);
  EXPECT_TRUE(clock_.Done(a_, e));
  EXPECT_TRUE(clock_.Done(a_, later));
  EXPECT_EQ(runtime_.SyncCount(), 0u) << "queries only";
}

TEST_F(VmmStreamClockTest, NoFenceWhileEveryEarlierFreeWasTakenBack) {
  auto due = [](std::uint64_t frees, std::size_t) { return frees >= 3; };
  Work(a_);
  std::uint64_t e = 0;
  for (int i = 0; i < 4; ++i) {
    e = clock_.NumberFree(a_, due);
    clock_.TakenBack(a_);
  }
  const std::uint64_t last = clock_.NumberFree(a_, due);
  Work(a_, 8);
  EXPECT_FALSE(clock_.Done(a_, e)) << "no fence: every free before the last was taken back";
  // A free not taken back: the next due free is fenced.
  const std::uint64_t fenced = clock_.NumberFree(a_, due);
  Work(a_, 8);
  EXPECT_TRUE(clock_.Done(a_, last));
  EXPECT_TRUE(clock_.Done(a_, fenced));
}

TEST_F(VmmStreamClockTest, ARecordNotDoneFencesItsStreamForALaterQuery) {
  Work(a_);
  LastUse use;
  use.Note(a_, Free(a_, false), clock_.next_checkpoint());
  StreamClock::Scan scan;
  EXPECT_FALSE(clock_.Done(use, &scan));  // records a fence covering the free
  Work(a_, 4);
  EXPECT_TRUE(clock_.Done(use, &scan));
}

TEST_F(VmmStreamClockTest, AnotherStreamWaitsOnTheDeviceItsOwnStreamDoesNot) {
  Work(a_);
  const std::uint64_t e = Free(a_, true);
  LastUse use;
  use.Note(a_, e, clock_.next_checkpoint());
  clock_.OrderAfter(use, a_);  // stream order covers it
  EXPECT_EQ(clock_.num_waits(), 0);
  clock_.OrderAfter(use, b_);
  EXPECT_EQ(clock_.num_waits(), 1);
  Work(a_, 4);
  clock_.OrderAfter(use, b_);  // done: no wait
  EXPECT_EQ(clock_.num_waits(), 1);
  EXPECT_EQ(runtime_.SyncCount(), 0u);
}

// Stream order keeps a device-side wait: a stream that waited for a fence does not wait again
// for work that fence covers. Another stream, newer work, or a new stream on the handle (after
// End) still waits.
TEST_F(VmmStreamClockTest, AWaitIsNotMadeAgainForWorkAnEarlierWaitCovers) {
  Work(a_);
  const std::uint64_t first = Free(a_, /*fence=*/false);
  const std::uint64_t second = Free(a_, /*fence=*/true);  // one fence covers both
  clock_.OrderAfter(a_, second, b_);
  EXPECT_EQ(clock_.num_waits(), 1);
  clock_.OrderAfter(a_, first, b_);
  clock_.OrderAfter(a_, second, b_);
  EXPECT_EQ(clock_.num_waits(), 1) << "waited again for work an earlier wait covers";
  const Stream c = runtime_.CreateStream(0);
  clock_.OrderAfter(a_, first, c);
  EXPECT_EQ(clock_.num_waits(), 2) << "another stream made no wait";
  Work(a_);
  const std::uint64_t third = Free(a_, /*fence=*/true);
  clock_.OrderAfter(a_, third, b_);
  EXPECT_EQ(clock_.num_waits(), 3) << "no wait for work after the fence waited for";
  ASSERT_FALSE(clock_.Done(a_, first)) << "the device is behind";
  EXPECT_TRUE(clock_.End(b_));
  EXPECT_TRUE(clock_.Resume(b_));  // a new stream has the handle
  clock_.OrderAfter(a_, first, b_);
  EXPECT_EQ(clock_.num_waits(), 4) << "a new stream on the handle made no wait";
  EXPECT_EQ(runtime_.SyncCount(), 0u);
  runtime_.DestroyStream(c);
}

TEST_F(VmmStreamClockTest, ARecordOfTwoStreamsIsMixedAndWaitsForEveryStream) {
  LastUse use;
  Work(a_);
  Work(b_);
  use.Note(a_, Free(a_, true), clock_.next_checkpoint());
  use.Note(b_, Free(b_, true), clock_.next_checkpoint());
  EXPECT_TRUE(use.mixed);
  StreamClock::Scan scan;
  EXPECT_FALSE(clock_.Done(use, &scan));
  const Stream c = runtime_.CreateStream(0);
  clock_.OrderAfter(use, c);
  EXPECT_EQ(clock_.num_waits(), 2);
  runtime_.DestroyStream(c);
}

// A record of two streams is done once both streams' work up to its last note is, although
// both streams keep working and freeing (the latest frees of every stream are never all done
// at one query then).
TEST_F(VmmStreamClockTest, AMixedRecordIsDoneOnceTheWorkUpToItIsWhileStreamsKeepWorking) {
  LastUse use;
  Work(a_);
  use.Note(a_, Free(a_, false), clock_.next_checkpoint());
  Work(b_);
  use.Note(b_, Free(b_, false), clock_.next_checkpoint());
  ASSERT_TRUE(use.mixed);
  int queries = 0;
  for (StreamClock::Scan scan; !clock_.Done(use, &scan) && queries < 100; scan = {}) {
    ++queries;
    Work(a_);
    Free(a_, false);
    Work(b_);
    Free(b_, false);
  }
  EXPECT_LT(queries, 100) << "never seen done while the streams keep working";
  EXPECT_GE(queries, 4) << "not before the device ran the work (4 tasks behind)";
  EXPECT_EQ(runtime_.SyncCount(), 0u);
}

// A placement weighs many pages whose last use is one pending fence (a device far behind the
// host): one scan asks the device once per stream, not once per page.
TEST(VmmStreamClockScanTest, OneScanAsksEachStreamsPendingFenceOnce) {
  platform::EmulatedRuntime emulated(vmm_test::Lagging(4));
  testing::HoldableRuntime runtime(&emulated);
  StreamClock clock(&runtime, kPlace);
  const Stream a = emulated.CreateStream(0), b = emulated.CreateStream(0);
  auto fenced_free = [&](Stream s) {
    emulated.LaunchHostTask(s, [] {});
    return clock.NumberFree(s, [](std::uint64_t, std::size_t) { return true; });
  };
  // A stream's first free is fenced with its second: fences on `a` at frees 2 and 4, on `b` at 2.
  const std::uint64_t a1 = fenced_free(a);
  fenced_free(a);
  fenced_free(a);
  const std::uint64_t a2 = fenced_free(a);
  fenced_free(b);
  const std::uint64_t b1 = fenced_free(b);
  LastUse use_a1, use_a2, use_b1;
  use_a1.Note(a, a1, clock.next_checkpoint());
  use_a2.Note(a, a2, clock.next_checkpoint());
  use_b1.Note(b, b1, clock.next_checkpoint());
  runtime.HoldEvents(true);
  {
    StreamClock::Scan scan;
    const std::uint64_t before = runtime.event_queries();
    EXPECT_FALSE(clock.Done(use_a1, &scan));
    EXPECT_EQ(runtime.event_queries(), before + 1);
    for (int page = 0; page < 8; ++page) {
      EXPECT_FALSE(clock.Done(use_a1, &scan));
      EXPECT_FALSE(clock.Done(use_a2, &scan)) << "a later fence of the stream: pending too";
    }
    EXPECT_EQ(runtime.event_queries(), before + 1) << "the pending fence asked again";
    EXPECT_FALSE(clock.Done(use_b1, &scan));
    EXPECT_EQ(runtime.event_queries(), before + 2) << "another stream's fence is its own";
  }
  runtime.HoldEvents(false);
  emulated.SynchronizeDevice(0);
  StreamClock::Scan fresh;  // a new decision asks again
  EXPECT_TRUE(clock.Done(use_a2, &fresh));
  EXPECT_TRUE(clock.Done(use_b1, &fresh));
  clock.DestroyEvents();
  emulated.DestroyStream(a);
  emulated.DestroyStream(b);
}

// More fences than the ring holds while the device runs behind all of them: the oldest stay,
// so the first free is seen done once the device reaches it, before it reaches the newest.
TEST(VmmStreamClockRingTest, ADeviceBehindTheWholeRingStillShowsItsOldestFreesDone) {
  constexpr int kLag = 30;  // tasks: more than the 12 fences below span
  platform::EmulatedRuntime runtime(vmm_test::Lagging(kLag));
  StreamClock clock(&runtime, kPlace);
  const Stream a = runtime.CreateStream(0);
  auto work = [&](int tasks) {  // enqueued and run, the lag not caught up
    for (int i = 1; i < tasks; ++i) runtime.LaunchHostTask(a, [] {});
    absl::Notification ran;
    runtime.LaunchHostTask(a, [&ran] { ran.Notify(); });
    ran.WaitForNotification();
  };
  std::vector<std::uint64_t> fenced;
  for (int i = 0; i < 12; ++i) {  // fence i follows task i + 1
    work(1);
    clock.NumberFree(a, [](std::uint64_t, std::size_t) { return false; });
    fenced.push_back(clock.NumberFree(a, [](std::uint64_t, std::size_t) { return true; }));
  }
  EXPECT_FALSE(clock.Done(a, fenced.front())) << "the device is 30 tasks behind";
  work(1 + kLag - 12);  // the first fence done; the fifth not yet (it needs 4 tasks more)
  EXPECT_TRUE(clock.Done(a, fenced.front())) << "the fence covering the first free was lost";
  EXPECT_FALSE(clock.Done(a, fenced.back()));
  EXPECT_EQ(runtime.SyncCount(), 0u);
  clock.DestroyEvents();
  runtime.DestroyStream(a);
}

TEST_F(VmmStreamClockTest, OrderingAfterADestroyedStreamSynchronizesTheDevice) {
  const Stream gone = runtime_.CreateStream(0);
  Work(gone);
  const std::uint64_t e = Free(gone, false);
  runtime_.DestroyStream(gone);
  const std::uint64_t syncs = runtime_.SyncCount();
  clock_.OrderAfter(gone, e, a_);
  EXPECT_EQ(runtime_.SyncCount(), syncs + 1);
  EXPECT_TRUE(clock_.Done(gone, e));
}

TEST_F(VmmStreamClockTest, FencesToWaitForCoverEveryStreamWithPendingFrees) {
  Work(a_);
  Free(a_, false);
  Work(b_);
  Free(b_, false);
  std::vector<platform::Event> fences;
  clock_.FencesToWaitFor(&fences);
  EXPECT_EQ(fences.size(), 2u);
  EXPECT_EQ(clock_.num_host_waits(), 1);
  for (const platform::Event& f : fences) runtime_.SynchronizeEvent(f);
  fences.clear();
  clock_.FencesToWaitFor(&fences);
  EXPECT_TRUE(fences.empty());
  EXPECT_EQ(clock_.num_host_waits(), 1);
}

}  // namespace
}  // namespace strata::strategies::vmm
