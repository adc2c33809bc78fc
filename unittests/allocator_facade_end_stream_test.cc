// AllocatorFacade::EndStream: a stream about to be destroyed. CUDA may hand its handle to a
// stream created later, and does not check a destroyed handle; the facade keys what it keeps per
// stream by handle. Over a runtime that reuses handles as CUDA does (HandleReusingRuntime), with
// both device pools.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "facade/allocator_facade.h"
#include "platform/emulated_runtime.h"
#include "support/facade_fixture.h"
#include "support/handle_reusing_runtime.h"
#include "support/runtimes.h"

namespace strata::facade::test_facade {
namespace {

constexpr std::size_t kPage = std::size_t{2} << 20;

class EndStreamTest : public ::testing::TestWithParam<bool> {
 protected:
  // The block a destroyed stream freed, its work still running, goes to the stream that got the
  // handle next only after that work: the new stream waits on the device, the host never waits.
  void NewStreamRunsAfterTheOldStreamsWork();
  // Frees after the stream is gone (a tensor outliving its stream), releases, an EmptyCache and
  // the teardown call nothing on the dead handle.
  void NothingIsCalledOnTheDeadHandle();
  // A block recorded on a stream that ended and was destroyed: the free records nothing on the
  // dead handle; the block's next user on its own stream runs after the ended stream's work (a
  // device-side wait), and the host never waits.
  void FreeRecordedOnAnEndedStream();

  platform::EmulatedRuntime emulated_;
  platform::DeviceRuntime* base_ = &emulated_;  // the CUDA runtime in the CUDA suite
  std::unique_ptr<strata::testing::HandleReusingRuntime> reusing_ =
      std::make_unique<strata::testing::HandleReusingRuntime>(base_);
  strata::testing::HandleReusingRuntime& rt() { return *reusing_; }
};

// The same cases on a GPU (skipped without one).
class CUDAEndStreamTest : public EndStreamTest {
 protected:
  void SetUp() override {
    std::string why;
    base_ = strata::testing::GetRuntime(strata::testing::RuntimeKind::kCuda, &why);
    if (base_ == nullptr) GTEST_SKIP() << why;
    reusing_ = std::make_unique<strata::testing::HandleReusingRuntime>(base_);
  }
};

void EndStreamTest::NewStreamRunsAfterTheOldStreamsWork() {
  AllocatorFacade facade(&rt(), PoolFlags(GetParam()));
  const Stream old_stream = rt().CreateStream(0);
  AllocationPtr a = facade.Alloc(CUDAPlace(0), kPage, old_stream);
  void* const addr = a->ptr();
  absl::Notification release;
  std::atomic<bool> old_done{false};
  rt().LaunchHostTask(old_stream, [&] {
    release.WaitForNotification();
    old_done = true;
  });
  a.reset();  // kept for the handle's next request
  facade.EndStream(CUDAPlace(0), old_stream);
  rt().DestroyStream(old_stream);
  const Stream new_stream = rt().CreateStream(0);
  ASSERT_EQ(new_stream, old_stream) << "the runtime hands the handle out again, as CUDA may";
  const std::uint64_t syncs = rt().SyncCount();

  AllocationPtr b = facade.Alloc(CUDAPlace(0), kPage, new_stream);
  EXPECT_EQ(b->ptr(), addr) << "the same block, reused on the handle";
  std::atomic<bool> saw_old_done{false};
  absl::Notification ran;
  rt().LaunchHostTask(new_stream, [&] {
    saw_old_done = old_done.load();
    ran.Notify();
  });
  // Unordered, the new stream's task runs now; ordered, only once the old work is released.
  ran.WaitForNotificationWithTimeout(absl::Milliseconds(200));
  release.Notify();
  rt().SynchronizeStream(new_stream);
  EXPECT_TRUE(saw_old_done) << "the new stream used the block before the old stream's work ended";
  EXPECT_EQ(rt().SyncCount(), syncs + 1);  // the test's own synchronize only
  b.reset();
  facade.EndStream(CUDAPlace(0), new_stream);
  rt().DestroyStream(new_stream);
  EXPECT_EQ(rt().dead_handle_calls(), 0u);
}

void EndStreamTest::NothingIsCalledOnTheDeadHandle() {
  {
    AllocatorFacade facade(&rt(), PoolFlags(GetParam()));
    const Stream s = rt().CreateStream(0);
    std::vector<AllocationPtr> blocks;
    for (int i = 0; i < 80; ++i) blocks.push_back(facade.Alloc(CUDAPlace(0), kPage, s));
    AllocationPtr other = facade.Alloc(CUDAPlace(0), kPage);  // a second stream: fences
    for (int i = 0; i < 40; ++i) blocks[i].reset();
    facade.EndStream(CUDAPlace(0), s);
    rt().DestroyStream(s);
    for (AllocationPtr& b : blocks) b.reset();  // freed late, through the ended handle
    for (int i = 0; i < 8; ++i) facade.Alloc(CUDAPlace(0), 3 * kPage).reset();
    facade.Release(CUDAPlace(0));
    facade.EmptyCache(CUDAPlace(0));
    other.reset();
  }
  EXPECT_EQ(rt().dead_handle_calls(), 0u);
}

TEST_P(EndStreamTest, ANewStreamOnAnEndedHandleRunsAfterTheOldStreamsWork) {
  NewStreamRunsAfterTheOldStreamsWork();
}
TEST_P(CUDAEndStreamTest, ANewStreamOnAnEndedHandleRunsAfterTheOldStreamsWork) {
  NewStreamRunsAfterTheOldStreamsWork();
}
TEST_P(EndStreamTest, NothingIsCalledOnAnEndedHandleAfterItsStreamIsDestroyed) {
  NothingIsCalledOnTheDeadHandle();
}
TEST_P(CUDAEndStreamTest, NothingIsCalledOnAnEndedHandleAfterItsStreamIsDestroyed) {
  NothingIsCalledOnTheDeadHandle();
}

// The same without EndStream: the virtual-memory pool fences the dead handle (on CUDA, undefined
// behaviour), which the runtime above counts. This is the call EndStream exists to prevent.
TEST(EndStreamVmmTest, WithoutEndStreamTheDeadHandleIsCalled) {
  platform::EmulatedRuntime emulated;
  strata::testing::HandleReusingRuntime runtime(&emulated);
  {
    AllocatorFacade facade(&runtime, PoolFlags(true));
    const Stream s = runtime.CreateStream(0);
    std::vector<AllocationPtr> blocks;
    for (int i = 0; i < 80; ++i) blocks.push_back(facade.Alloc(CUDAPlace(0), kPage, s));
    runtime.DestroyStream(s);
    for (AllocationPtr& b : blocks) b.reset();
  }
  EXPECT_GT(runtime.dead_handle_calls(), 0u);
}

void EndStreamTest::FreeRecordedOnAnEndedStream() {
  AllocatorFacade facade(&rt(), PoolFlags(GetParam()));
  const Stream owner = rt().CreateStream(0), side = rt().CreateStream(0);
  facade.Alloc(CUDAPlace(0), kPage, side).reset();  // strata knows the side stream
  AllocationPtr a = facade.Alloc(CUDAPlace(0), kPage, owner);
  void* const addr = a->ptr();
  ASSERT_TRUE(facade.RecordStream(*a, side));
  std::atomic<bool> release{false}, side_done{false};
  rt().LaunchHostTask(side, [&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    side_done = true;
  });
  facade.EndStream(CUDAPlace(0), side);
  rt().DestroyStream(side);
  const std::uint64_t syncs = rt().SyncCount();
  // A free that waited on the host for the side stream would wait forever: let it go after a
  // while, so that such a failure shows as one, not as a hang.
  absl::Notification freed;
  std::thread guard([&] {
    if (!freed.WaitForNotificationWithTimeout(absl::Seconds(2))) release = true;
  });
  a.reset();  // the tensor outlived the stream it was used on
  freed.Notify();
  guard.join();
  AllocationPtr b = facade.Alloc(CUDAPlace(0), kPage, owner);
  EXPECT_EQ(b->ptr(), addr) << "freed at once, reused on its own stream";
  std::atomic<bool> saw_side_done{false};
  absl::Notification ran;
  rt().LaunchHostTask(owner, [&] {
    saw_side_done = side_done.load();
    ran.Notify();
  });
  ran.WaitForNotificationWithTimeout(absl::Milliseconds(200));
  release = true;
  rt().SynchronizeStream(owner);
  EXPECT_TRUE(saw_side_done) << "the block was reused before the ended stream's work was done";
  EXPECT_EQ(rt().SyncCount(), syncs + 1);  // the test's own synchronize only
  EXPECT_EQ(rt().dead_handle_calls(), 0u);
  b.reset();
  facade.EndStream(CUDAPlace(0), owner);
  rt().DestroyStream(owner);
}

TEST_P(EndStreamTest, AFreeRecordedOnAnEndedStreamWaitsForItsFenceNotOnItsHandle) {
  FreeRecordedOnAnEndedStream();
}
TEST_P(CUDAEndStreamTest, AFreeRecordedOnAnEndedStreamWaitsForItsFenceNotOnItsHandle) {
  FreeRecordedOnAnEndedStream();
}

TEST_P(EndStreamTest, EndingAStreamTwiceOrKeepingItAfterwardsIsHarmless) {
  AllocatorFacade facade(&rt(), PoolFlags(GetParam()));
  const Stream s = rt().CreateStream(0);
  facade.EndStream(CUDAPlace(0), s);  // never allocated on: nothing kept under it
  facade.Alloc(CUDAPlace(0), kPage, s).reset();
  facade.EndStream(CUDAPlace(0), s);
  facade.EndStream(CUDAPlace(0), s);
  // The stream was not destroyed after all: it allocates on, after one wait on its own work.
  AllocationPtr a = facade.Alloc(CUDAPlace(0), kPage, s);
  EXPECT_NE(a->ptr(), nullptr);
  a.reset();
  facade.EndStream(CUDAPlace(0), s);
  rt().DestroyStream(s);
  EXPECT_EQ(rt().dead_handle_calls(), 0u);
}

TEST_P(EndStreamTest, RefusesTheDefaultStreamAHostPlaceAndADestroyedStream) {
  AllocatorFacade facade(&rt(), PoolFlags(GetParam()));
  EXPECT_THROW(facade.EndStream(CUDAPlace(0), Stream{}), std::invalid_argument);
  const Stream s = rt().CreateStream(0);
  EXPECT_THROW(facade.EndStream(CPUPlace(), s), std::invalid_argument);
  facade.Alloc(CUDAPlace(0), kPage, s).reset();
  rt().BeginCapture(s);
  EXPECT_THROW(facade.EndStream(CUDAPlace(0), s), std::invalid_argument);
  rt().EndCapture(s);
  rt().DestroyStream(s);
  EXPECT_THROW(facade.EndStream(CUDAPlace(0), s), std::invalid_argument);
  // Nothing was lost: the default stream allocates on.
  EXPECT_NE(facade.Alloc(CUDAPlace(0), kPage)->ptr(), nullptr);
}

INSTANTIATE_TEST_SUITE_P(BothPools, EndStreamTest, ::testing::Bool(), PoolName);
INSTANTIATE_TEST_SUITE_P(CUDA, CUDAEndStreamTest, ::testing::Bool(), PoolName);

}  // namespace
}  // namespace strata::facade::test_facade
