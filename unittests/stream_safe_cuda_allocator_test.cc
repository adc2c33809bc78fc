#include "layers/stream_safe_cuda_allocator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "allocation/bad_alloc.h"
#include "layers/oom_recovery_allocator.h"
#include "layers/stream_safe_cuda_allocation.h"
#include "platform/emulated_runtime.h"
#include "raw/device_allocator.h"
#include "strategies/auto_growth_best_fit_allocator.h"
#include "strategies/vmm_pool.h"
#include "strategies/vmm_pool_allocator.h"
#include "support/holdable_runtime.h"
#include "support/runtimes.h"
#include "support/spin_kernel.h"
#include "support/stats.h"
#include "support/stream_safe_fixture.h"
#include "support/stream_test_allocators.h"
#include "support/test_allocators.h"
#include "support/threads.h"

namespace strata::layers::stream_safe_test {

namespace {

TEST_F(StreamSafeCUDAAllocatorTest, RejectsNullArguments) {
  EXPECT_THROW(StreamSafeCUDAAllocator(nullptr, &rt_, kPlace, s1_), std::invalid_argument);
  EXPECT_THROW(StreamSafeCUDAAllocator(base_, nullptr, kPlace, s1_), std::invalid_argument);
}

TEST_F(StreamSafeCUDAAllocatorTest, AllocationKnowsItsStreamAndChain) {
  StreamSafeCUDAAllocator alloc(base_, &hr_, kPlace, s1_);
  AllocationPtr a = alloc.Allocate(1000);
  StreamSafeCUDAAllocation* s = AsStreamSafe(a);
  EXPECT_EQ(s->owning_stream(), s1_);
  EXPECT_EQ(a->size(), 1000u);
  ASSERT_EQ(a->num_decorators(), 2);
  EXPECT_EQ(a->decorator(0), base_.get());
  EXPECT_EQ(a->decorator(1), &alloc);
  EXPECT_EQ(s->underlying()->ptr(), a->ptr());

  s->RecordStream(s1_);  // owner: no-op
  EXPECT_EQ(s->num_recorded_streams(), 0);
  s->RecordStream(s2_);
  s->RecordStream(s2_);  // duplicate
  s->RecordStream(s3_);
  EXPECT_EQ(s->num_recorded_streams(), 2);
  EXPECT_EQ(s->recorded_stream(0), s2_);
  EXPECT_TRUE(s->HasRecordedStream(s3_));
  EXPECT_FALSE(s->HasRecordedStream(s1_));
  EXPECT_THROW(s->recorded_stream(2), std::out_of_range);
  a.reset();
  EXPECT_EQ(alloc.num_events_created(), 2u);
  alloc.ProcessPendingFrees();
  EXPECT_EQ(base_->live_blocks(), 0u);
}

TEST_F(StreamSafeCUDAAllocatorTest, FreeWithoutRecordedStreamsIsImmediate) {
  StreamSafeCUDAAllocator alloc(base_, &hr_, kPlace, s1_);
  const auto syncs = hr_.SyncCount();
  for (int i = 0; i < 100; ++i) {
    AllocationPtr a = alloc.Allocate(256);
    EXPECT_EQ(base_->live_blocks(), 1u);
    a.reset();
    EXPECT_EQ(base_->live_blocks(), 0u);
  }
  EXPECT_EQ(hr_.events_created(), 0u);
  EXPECT_EQ(hr_.event_queries(), 0u);
  EXPECT_EQ(alloc.num_pending_frees(), 0u);
  EXPECT_EQ(hr_.SyncCount(), syncs);
}

// Wrappers are recycled: one that had recorded streams (more than fit inline) and went through
// the pending list must come back clean — no stream, the new block, the right chain.
TEST_F(StreamSafeCUDAAllocatorTest, RecycledAllocationStartsClean) {
  StreamSafeCUDAAllocator alloc(base_, &hr_, kPlace, s1_);
  const Stream s4 = rt_.CreateStream(0);
  for (int round = 0; round < 3; ++round) {
    AllocationPtr a = alloc.Allocate(512);
    StreamSafeCUDAAllocation* s = AsStreamSafe(a);
    EXPECT_EQ(s->num_recorded_streams(), 0);
    ASSERT_EQ(a->num_decorators(), 2);
    EXPECT_EQ(a->decorator(0), base_.get());
    EXPECT_EQ(a->decorator(1), &alloc);
    EXPECT_EQ(s->underlying()->ptr(), a->ptr());
    EXPECT_EQ(s->owning_stream(), s1_);
    s->RecordStream(s2_);
    s->RecordStream(s3_);
    s->RecordStream(s4);
    EXPECT_EQ(s->num_recorded_streams(), 3);
    a.reset();
    EXPECT_EQ(alloc.num_pending_frees(), 1u);
    rt_.SynchronizeDevice(0);
    EXPECT_EQ(alloc.ProcessPendingFrees(), 1u);
    EXPECT_EQ(base_->live_blocks(), 0u);
    // A plain allocate/free in between reuses the recycled wrapper without events.
    const auto events = alloc.num_events_created() + alloc.num_pooled_events();
    AllocationPtr b = alloc.Allocate(64);
    EXPECT_EQ(AsStreamSafe(b)->num_recorded_streams(), 0);
    b.reset();
    EXPECT_EQ(base_->live_blocks(), 0u);
    EXPECT_EQ(alloc.num_pending_frees(), 0u);
    EXPECT_EQ(alloc.num_events_created() + alloc.num_pooled_events(), events);
  }
  rt_.DestroyStream(s4);
}

// The core guarantee: a block freed on S1 but used by slow work on S2 is not handed out again
// on S1 before that work is done — and is handed out again (lazily, without a sync) after.
TEST_F(StreamSafeCUDAAllocatorTest, CrossStreamUseIsNotReusedEarly) {
  constexpr std::size_t kN = 64 << 10;
  auto cache = std::make_shared<testing::CachingTestAllocator>(base_);
  std::vector<AllocationPtr> kept;
  std::atomic<bool> b_intact{false};
  {
    StreamSafeCUDAAllocator alloc(cache, &rt_, kPlace, s1_);
    const auto syncs = rt_.SyncCount();

    AllocationPtr a = alloc.Allocate(kN);
    void* const p = a->ptr();
    rt_.LaunchHostTask(s2_, [] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); });
    rt_.MemsetAsync(p, 0xBB, kN, s2_);
    rt_.LaunchHostTask(s2_, [&b_intact, p] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      b_intact = AllBytesAre(p, kN, 0xBB);
    });
    AsStreamSafe(a)->RecordStream(s2_);
    a.reset();
    EXPECT_EQ(alloc.num_pending_frees(), 1u);

    // While S2 works: S1 must not get p (unless S2 has finished by then).
    for (int i = 0; i < 8; ++i) {
      AllocationPtr b = alloc.Allocate(kN);
      if (b->ptr() == p) {
        EXPECT_TRUE(rt_.QueryStream(s2_)) << "block reused on S1 before S2's work completed";
      }
      rt_.MemsetAsync(b->ptr(), 0xAA, kN, s1_);
      kept.push_back(std::move(b));
    }

    // After S2 is done (observed by queries only), the next allocation reclaims and reuses p.
    WaitUntil([&] { return rt_.QueryStream(s2_); });
    AllocationPtr c = alloc.Allocate(kN);
    EXPECT_EQ(c->ptr(), p) << "the block was not reused after S2 finished";
    EXPECT_EQ(alloc.num_pending_frees(), 0u);
    rt_.MemsetAsync(c->ptr(), 0xAA, kN, s1_);
    kept.push_back(std::move(c));
    EXPECT_EQ(rt_.SyncCount(), syncs) << "the stream-safe layer synchronized";

    rt_.SynchronizeStream(s1_);
    rt_.SynchronizeStream(s2_);
    EXPECT_TRUE(b_intact.load()) << "S2's data was overwritten while S2 used it";
    for (const AllocationPtr& k : kept) {
      EXPECT_TRUE(AllBytesAre(k->ptr(), kN, 0xAA)) << "S1's data at " << k->ptr() << " corrupted";
    }
    kept.clear();
    alloc.Release(kPlace);
  }
  EXPECT_EQ(base_->live_blocks(), 0u);
}

TEST_F(StreamSafeCUDAAllocatorTest, ScanStopsAtTheFirstNotReadyEventOfEachStream) {
  StreamSafeCUDAAllocator alloc(base_, &hr_, kPlace, s1_);
  absl::Notification gate;
  GateOpener opener{&gate};
  rt_.LaunchHostTask(s2_, [&gate] { gate.WaitForNotification(); });
  hr_.HoldEvents(true);  // the Allocates below must not reclaim S3's frees yet
  for (int i = 0; i < 10; ++i) {
    AllocationPtr a = alloc.Allocate(512);
    AsStreamSafe(a)->RecordStream(s2_);  // blocked behind the gate
  }
  for (int i = 0; i < 4; ++i) {
    AllocationPtr a = alloc.Allocate(512);
    AsStreamSafe(a)->RecordStream(s3_);  // idle: ready at once
  }
  EXPECT_EQ(alloc.num_pending_frees(), 14u);
  hr_.HoldEvents(false);
  const auto syncs = hr_.SyncCount();
  auto queries = hr_.event_queries();
  EXPECT_EQ(alloc.ProcessPendingFrees(), 4u);
  EXPECT_EQ(hr_.event_queries() - queries, 1u + 4u);  // one for S2, each of S3's
  queries = hr_.event_queries();
  EXPECT_EQ(alloc.ProcessPendingFrees(), 0u);
  EXPECT_EQ(hr_.event_queries() - queries, 1u);
  EXPECT_EQ(base_->live_blocks(), 10u);

  gate.Notify();
  WaitUntil([&] { return rt_.QueryStream(s2_); });
  // Lazily, by the next allocation.
  AllocationPtr b = alloc.Allocate(512);
  EXPECT_EQ(alloc.num_pending_frees(), 0u);
  EXPECT_EQ(base_->live_blocks(), 1u);
  EXPECT_EQ(hr_.SyncCount(), syncs);
}

// Blocks whose recorded streams' work is done go down in the order they were freed, whatever
// stream each was recorded on (the queues are kept per stream): the pool below places what comes
// next by that order.
TEST_F(StreamSafeCUDAAllocatorTest, ReclaimedBlocksGoDownInFreeOrder) {
  class FreeOrder : public testing::RecordingAllocator {
   public:
    using RecordingAllocator::RecordingAllocator;
    std::vector<std::size_t> freed;  // sizes, in the order they came down

   protected:
    void FreeImpl(allocation::Allocation* a) override {
      freed.push_back(a->size());
      RecordingAllocator::FreeImpl(a);
    }
  };
  auto below = std::make_shared<FreeOrder>(kPlace);
  StreamSafeCUDAAllocator alloc(below, &hr_, kPlace, s1_);
  hr_.HoldEvents(true);
  const Stream recorded_on[] = {s2_, s3_, s2_, s3_, s3_, s2_, s3_, s2_};
  std::vector<std::size_t> sizes;
  for (std::size_t i = 0; i < std::size(recorded_on); ++i) {
    AllocationPtr a = alloc.Allocate(512 * (i + 1));
    sizes.push_back(a->size());
    AsStreamSafe(a)->RecordStream(recorded_on[i]);
  }
  hr_.HoldEvents(false);
  EXPECT_EQ(alloc.ProcessPendingFrees(), std::size(recorded_on));
  EXPECT_EQ(below->freed, sizes);
}

TEST_F(StreamSafeCUDAAllocatorTest, AllocationUsedByTwoStreamsWaitsForBoth) {
  StreamSafeCUDAAllocator alloc(base_, &hr_, kPlace, s1_);
  absl::Notification gate;
  GateOpener opener{&gate};
  rt_.LaunchHostTask(s3_, [&gate] { gate.WaitForNotification(); });
  AllocationPtr a = alloc.Allocate(512);
  AsStreamSafe(a)->RecordStream(s2_);
  AsStreamSafe(a)->RecordStream(s3_);
  a.reset();
  WaitUntil([&] { return rt_.QueryStream(s2_); });
  EXPECT_EQ(alloc.ProcessPendingFrees(), 0u);  // S2 done, S3 not
  EXPECT_EQ(base_->live_blocks(), 1u);
  gate.Notify();
  WaitUntil([&] { return rt_.QueryStream(s3_); });
  EXPECT_EQ(alloc.ProcessPendingFrees(), 1u);
  EXPECT_EQ(base_->live_blocks(), 0u);
  EXPECT_EQ(alloc.num_pooled_events(), 2u);
}

TEST_F(StreamSafeCUDAAllocatorTest, ZeroSizeRecordStreamIsSafe) {
  auto empty = std::make_shared<testing::EmptyAllocator>();
  StreamSafeCUDAAllocator alloc(empty, &hr_, kPlace, s1_);
  AllocationPtr a = alloc.Allocate(0);
  EXPECT_EQ(a->ptr(), nullptr);
  EXPECT_EQ(a->size(), 0u);
  AsStreamSafe(a)->RecordStream(s2_);
  EXPECT_EQ(AsStreamSafe(a)->num_recorded_streams(), 0);
  a.reset();
  EXPECT_EQ(empty->live(), 0);
  EXPECT_EQ(alloc.num_pending_frees(), 0u);
  EXPECT_EQ(hr_.events_created(), 0u);

  // A zero-size allocation with a (non-null) pointer is just as empty.
  StreamSafeCUDAAllocator alloc2(base_, &hr_, kPlace, s1_);
  AllocationPtr b = alloc2.Allocate(0);
  AsStreamSafe(b)->RecordStream(s2_);
  EXPECT_EQ(AsStreamSafe(b)->num_recorded_streams(), 0);
  b.reset();
  EXPECT_EQ(base_->live_blocks(), 0u);
}

}  // namespace

namespace {

// The same corruption scenario on a real GPU, with a real kernel: a block used by a slow kernel
// on stream S2 is freed on S1 after RecordStream(S2); S1 must not get it back before the kernel
// has finished, and the kernel's bytes and S1's bytes must both be intact in the end.
class CUDAStreamSafetyTest : public testing::CUDAFixture {};

TEST_F(CUDAStreamSafetyTest, BlockUsedByASlowKernelIsNotReusedEarly) {
#if STRATA_WITH_CUDA
  constexpr std::size_t kBytes = 1 << 20;
  const std::uint64_t syncs_before = runtime_->SyncCount();
  std::uint64_t test_syncs = 0;
  Stream s1 = runtime_->CreateStream(0), s2 = runtime_->CreateStream(0);
  // Outside the scope: it counts the device frees, which wait for the device (SyncCount).
  auto device = std::make_shared<raw::DeviceAllocator>(runtime_, 0);
  {
    auto pool = std::make_shared<strategies::AutoGrowthBestFitAllocator>(
        device, kPlace, strategies::AutoGrowthBestFitAllocator::Options{});
    StreamSafeCUDAAllocator allocator(pool, runtime_, kPlace, s1);
    AllocationPtr first = allocator.Allocate(kBytes);
    void* used_by_kernel = first->ptr();
    testing::LaunchSpinWriteKernel(used_by_kernel, kBytes, 0xBB, 200'000'000, s2.handle);
    AsStreamSafe(first)->RecordStream(s2);
    first.reset();
    // While the kernel spins, every new block on S1 must be elsewhere.
    std::vector<AllocationPtr> on_s1;
    while (!runtime_->QueryStream(s2) && on_s1.size() < 64) {
      on_s1.push_back(allocator.Allocate(kBytes));
      ASSERT_NE(on_s1.back()->ptr(), used_by_kernel) << "reused before the kernel finished";
      runtime_->MemsetAsync(on_s1.back()->ptr(), 0xAA, kBytes, s1);
    }
    EXPECT_FALSE(on_s1.empty()) << "the kernel finished before the test could allocate";
    runtime_->SynchronizeStream(s2);
    runtime_->SynchronizeStream(s1);
    std::vector<unsigned char> host(kBytes);
    for (const AllocationPtr& a : on_s1) {
      runtime_->MemcpyAsync(host.data(), a->ptr(), kBytes, s1);
      runtime_->SynchronizeStream(s1);
      ASSERT_EQ(host[0], 0xAA);
      ASSERT_EQ(host[kBytes - 1], 0xAA);
    }
    runtime_->MemcpyAsync(host.data(), used_by_kernel, kBytes, s1);
    runtime_->SynchronizeStream(s1);
    EXPECT_EQ(host[0], 0xBB);
    EXPECT_EQ(host[kBytes - 1], 0xBB);
    // After the kernel, the block is reclaimed lazily (queries only) and handed out again.
    test_syncs = 3 + on_s1.size();
    on_s1.clear();
    bool reused = false;
    std::vector<AllocationPtr> again;
    for (int i = 0; i < 80 && !reused; ++i) {
      again.push_back(allocator.Allocate(kBytes));
      reused = again.back()->ptr() == used_by_kernel;
    }
    EXPECT_TRUE(reused);
  }
  // Only the test's own synchronizations (two streams, one per copy-back) and the pool's device
  // frees when it went away: the stream-safe layer none.
  EXPECT_GT(device->device_frees(), 0);
  EXPECT_EQ(runtime_->SyncCount(),
            syncs_before + test_syncs + static_cast<std::uint64_t>(device->device_frees()));
  runtime_->DestroyStream(s1);
  runtime_->DestroyStream(s2);
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace strata::layers::stream_safe_test
