// The stream-safe layer under load and over its lifetime: many streams and threads over each pool,
// out of memory, destruction with frees pending, the event pool, statistics, Release.
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

// The multi-stream, multi-thread harness: 64 streams, each with a stream-safe layer over the pool
// `pool_for` gives it; 4 threads allocate, write on up to three streams and free from any thread.
// A block handed out again while a stream still writes it shows as a race (ThreadSanitizer). Runs
// over each pool (a parameter of the harness, not a copy of it).
void StreamSafeCUDAAllocatorTest::RunManyStreamsAndThreads(
    const std::function<std::shared_ptr<allocation::Allocator>(Stream)>& pool_for) {
  constexpr int kStreams = 64, kThreads = 4, kIters = 3000;
  std::vector<Stream> streams;
  std::vector<std::shared_ptr<allocation::Allocator>> pools;
  std::vector<std::unique_ptr<StreamSafeCUDAAllocator>> allocs;
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(rt_.CreateStream(0));
    pools.push_back(pool_for(streams.back()));
    allocs.push_back(
        std::make_unique<StreamSafeCUDAAllocator>(pools.back(), &rt_, kPlace, streams.back()));
  }
  absl::Mutex handoff_mu;
  std::vector<AllocationPtr> handoff;  // freed by whichever thread takes them
  const auto syncs = rt_.SyncCount();

  testing::RunThreads(kThreads, [&](int t) {
    std::mt19937 rng(1234 + t);
    std::vector<AllocationPtr> local;
    for (int it = 0; it < kIters; ++it) {
      const int i = static_cast<int>(rng() % kStreams);
      const std::size_t size = (1 + rng() % 16) * 256;
      AllocationPtr a = allocs[i]->Allocate(size);
      rt_.MemsetAsync(a->ptr(), i, size, streams[i]);
      const int uses = static_cast<int>(rng() % 3);
      for (int u = 0, prev = i; u < uses; ++u) {
        const int j = static_cast<int>(rng() % kStreams);
        // Stream j writes after the previous user, as cudaStreamWaitEvent would order it
        // (QueryEvent does not count as a sync). Unordered, the users' writes would race
        // with each other, and under ThreadSanitizer that race would hide the one this test
        // exists for: a block handed out again before every stream using it is done.
        const platform::Event written = rt_.CreateEvent(0);
        rt_.RecordEvent(written, streams[prev]);
        rt_.LaunchHostTask(streams[j], [this, written, p = a->ptr(), j, size] {
          while (!rt_.QueryEvent(written)) std::this_thread::yield();
          rt_.DestroyEvent(written);
          std::memset(p, j, size);
        });
        AsStreamSafe(a)->RecordStream(streams[j]);
        prev = j;
      }
      switch (rng() % 4) {
        case 0:
          break;  // freed at once
        case 1:
          local.push_back(std::move(a));
          break;
        default: {
          absl::MutexLock lock(&handoff_mu);
          handoff.push_back(std::move(a));
          if (handoff.size() > 32) {
            // Free someone else's allocation (maybe of another thread) under the lock:
            // frees must be safe from any thread.
            std::swap(handoff[rng() % handoff.size()], handoff.back());
            handoff.pop_back();
          }
        }
      }
      if (local.size() > 16) local.erase(local.begin() + static_cast<long>(rng() % 16));
    }
  });
  handoff.clear();
  EXPECT_EQ(rt_.SyncCount(), syncs) << "allocate/free paths must not synchronize";

  std::size_t events = 0;
  for (auto& a : allocs) events += a->num_events_created();
  EXPECT_GT(events, 0u);

  rt_.SynchronizeDevice(0);
  for (auto& a : allocs) {
    a->Release(kPlace);
    EXPECT_EQ(a->num_pending_frees(), 0u);
  }
  allocs.clear();
}

namespace {

TEST_F(StreamSafeCUDAAllocatorTest, ManyStreamsAndThreads) {
  RunManyStreamsAndThreads(
      [&](Stream) { return std::make_shared<testing::CachingTestAllocator>(base_); });
  EXPECT_EQ(base_->live_blocks(), 0u);
}

TEST_F(StreamSafeCUDAAllocatorTest, ManyStreamsAndThreadsOverTheVirtualMemoryPool) {
  auto pool = std::make_shared<strategies::VirtualMemoryPool>(
      &rt_, kPlace, strategies::VirtualMemoryPool::Options{});
  RunManyStreamsAndThreads([&](Stream s) {
    return std::make_shared<strategies::VmmPoolAllocator>(pool, s, /*reports_stats=*/false);
  });
  EXPECT_EQ(pool->allocated_bytes(), 0u);
  pool->WaitForStreams();
  pool->Release();
  EXPECT_EQ(pool->reserved_bytes(), 0u) << "one empty_cache gives everything back";
}

// The chain's recovery layer over the stream-safe layer: its Release reclaims completed frees.
TEST_F(StreamSafeCUDAAllocatorTest, OutOfMemoryRecoveryReclaimsCompletedFreesAndRetries) {
  constexpr std::size_t kBlock = 1 << 20;
  auto limited = std::make_shared<testing::LimitedAllocator>(base_, kBlock);
  auto alloc = std::make_shared<StreamSafeCUDAAllocator>(limited, &hr_, kPlace, s1_);
  int recoveries = 0;
  OomRecoveryAllocator top(alloc, [&](std::size_t size) {
    EXPECT_EQ(size, kBlock);
    ++recoveries;
    return alloc->Release(kPlace);
  });
  AllocationPtr a = top.Allocate(kBlock);
  AsStreamSafe(a)->RecordStream(s2_);
  a.reset();
  ASSERT_EQ(alloc->num_pending_frees(), 1u);
  // The lazy scan at the start of Allocate sees the event not ready yet; by the out-of-memory
  // recovery it is.
  hr_.HoldNextQueries(1);
  const auto syncs = hr_.SyncCount();
  AllocationPtr b = top.Allocate(kBlock);
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(recoveries, 1);
  EXPECT_EQ(top.num_recoveries(), 1);
  EXPECT_EQ(alloc->num_pending_frees(), 0u);
  EXPECT_EQ(base_->live_blocks(), 1u);
  EXPECT_EQ(hr_.SyncCount(), syncs);
}

TEST_F(StreamSafeCUDAAllocatorTest, OutOfMemoryWithEventsNotReadyThrows) {
  constexpr std::size_t kBlock = 1 << 20;
  auto limited = std::make_shared<testing::LimitedAllocator>(base_, kBlock);
  auto alloc = std::make_shared<StreamSafeCUDAAllocator>(limited, &hr_, kPlace, s1_);
  int recoveries = 0;
  OomRecoveryAllocator top(alloc, [&](std::size_t) {
    ++recoveries;
    return alloc->Release(kPlace);
  });
  AllocationPtr a = top.Allocate(kBlock);
  AsStreamSafe(a)->RecordStream(s2_);
  a.reset();
  hr_.HoldEvents(true);
  const auto syncs = hr_.SyncCount();
  try {
    top.Allocate(kBlock);
    FAIL() << "expected BadAlloc";
  } catch (const BadAlloc& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Tried to allocate 1.00 MiB"), std::string::npos)
        << e.what();
    EXPECT_EQ(e.requested_bytes(), kBlock);
  }
  EXPECT_EQ(recoveries, 1);
  EXPECT_EQ(alloc->num_pending_frees(), 1u);
  EXPECT_EQ(hr_.SyncCount(), syncs);
  hr_.HoldEvents(false);
  AllocationPtr b = top.Allocate(kBlock);
  EXPECT_EQ(alloc->num_pending_frees(), 0u);
}

TEST_F(StreamSafeCUDAAllocatorTest, DestroyWithOutstandingEventsWaitsAndFrees) {
  auto alloc = std::make_unique<StreamSafeCUDAAllocator>(base_, &hr_, kPlace, s1_);
  hr_.HoldEvents(true);  // nothing is ready as far as the allocator can tell
  for (int i = 0; i < 5; ++i) {
    AllocationPtr a = alloc->Allocate(4096);
    AsStreamSafe(a)->RecordStream(s2_);
    if (i % 2 == 0) AsStreamSafe(a)->RecordStream(s3_);
  }
  EXPECT_EQ(alloc->num_pending_frees(), 5u);
  EXPECT_EQ(base_->live_blocks(), 5u);
  const auto syncs = hr_.SyncCount();
  alloc.reset();
  EXPECT_EQ(base_->live_blocks(), 0u);
  EXPECT_EQ(hr_.SyncCount() - syncs, 8u);  // one per outstanding event
  EXPECT_EQ(hr_.events_created(), 8u);
  EXPECT_EQ(hr_.events_destroyed(), 8u);
}

TEST_F(StreamSafeCUDAAllocatorTest, DestroyWhileStreamStillWorking) {
  constexpr std::size_t kN = 4096;
  std::atomic<bool> intact{false};
  auto alloc = std::make_unique<StreamSafeCUDAAllocator>(base_, &rt_, kPlace, s1_);
  AllocationPtr a = alloc->Allocate(kN);
  void* p = a->ptr();
  rt_.LaunchHostTask(s2_, [] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); });
  rt_.MemsetAsync(p, 0x5A, kN, s2_);
  rt_.LaunchHostTask(s2_, [&intact, p] { intact = AllBytesAre(p, kN, 0x5A); });
  AsStreamSafe(a)->RecordStream(s2_);
  a.reset();
  alloc.reset();  // must wait for S2 before the block goes back (RecordingAllocator frees it)
  EXPECT_EQ(base_->live_blocks(), 0u);
  rt_.SynchronizeStream(s2_);
  EXPECT_TRUE(intact.load());
}

TEST_F(StreamSafeCUDAAllocatorTest, EventPoolIsReused) {
  StreamSafeCUDAAllocator alloc(base_, &hr_, kPlace, s1_);
  auto cycle = [&] {
    AllocationPtr a = alloc.Allocate(2048);
    AsStreamSafe(a)->RecordStream(s2_);
    AsStreamSafe(a)->RecordStream(s3_);
  };
  cycle();
  alloc.ProcessPendingFrees();  // warm-up
  const auto created = alloc.num_events_created();
  const auto runtime_created = hr_.events_created();
  EXPECT_EQ(created, 2u);
  for (int i = 0; i < 200; ++i) cycle();  // each Allocate reclaims the previous cycle's free
  alloc.ProcessPendingFrees();
  EXPECT_EQ(alloc.num_events_created(), created);
  EXPECT_EQ(hr_.events_created(), runtime_created);
  EXPECT_EQ(alloc.num_pooled_events(), 2u);
  EXPECT_EQ(base_->live_blocks(), 0u);
}

TEST_F(StreamSafeCUDAAllocatorTest, RecordedStreamDestroyedBeforeFreeFallsBackToDeviceSync) {
  constexpr std::size_t kN = 4096;
  StreamSafeCUDAAllocator alloc(base_, &rt_, kPlace, s1_);
  Stream doomed = rt_.CreateStream(0);
  AllocationPtr a = alloc.Allocate(kN);
  rt_.MemsetAsync(a->ptr(), 0x11, kN, doomed);
  AsStreamSafe(a)->RecordStream(doomed);
  rt_.DestroyStream(doomed);
  const auto syncs = rt_.SyncCount();
  a.reset();  // must neither throw nor crash
  // A wait for the stream (refused: the handle is gone), then for the device: both counted.
  EXPECT_EQ(rt_.SyncCount(), syncs + 2);
  EXPECT_EQ(base_->live_blocks(), 0u);
  EXPECT_EQ(alloc.num_pending_frees(), 0u);
  EXPECT_EQ(alloc.num_pooled_events(), 1u);
}

// A stream of another device cannot take this device's event: the free waits for that stream
// itself (not for this device, which would leave the other device's work running).
TEST(StreamSafeCUDAAllocatorCrossDeviceTest, AStreamOfAnotherDeviceIsWaitedForBeforeTheFree) {
  EmulatedRuntime rt({.device_count = 2, .capacity_bytes = std::size_t{1} << 30});
  auto base = std::make_shared<testing::RecordingAllocator>(kPlace);
  const Stream own = rt.CreateStream(0);
  const Stream other = rt.CreateStream(1);
  {
    StreamSafeCUDAAllocator alloc(base, &rt, kPlace, own);
    AllocationPtr a = alloc.Allocate(4096);
    std::atomic<bool> done{false};
    rt.LaunchHostTask(other, [&done] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      done = true;
    });
    AsStreamSafe(a)->RecordStream(other);
    a.reset();
    EXPECT_TRUE(done.load()) << "freed while the other device's stream still used the block";
    EXPECT_EQ(base->live_blocks(), 0u);
  }
  rt.DestroyStream(own);
  rt.DestroyStream(other);
}

TEST_F(StreamSafeCUDAAllocatorTest, PendingFreesCountAsActiveInStats) {
  StreamSafeCUDAAllocator alloc(base_, &hr_, kPlace, s1_);
  hr_.HoldEvents(true);
  {
    AllocationPtr small = alloc.Allocate(4096);
    AllocationPtr large = alloc.Allocate(4 << 20);
    AsStreamSafe(small)->RecordStream(s2_);
    AsStreamSafe(large)->RecordStream(s2_);
  }
  const MemoryStats stats = testing::StatsOf(alloc);
  EXPECT_EQ(stats.active[kAggregate].current, 2);
  EXPECT_EQ(stats.active[kSmallPool].current, 1);
  EXPECT_EQ(stats.active[kLargePool].current, 1);
  EXPECT_EQ(stats.active_bytes[kAggregate].current, 4096 + (4 << 20));
  EXPECT_EQ(stats.active_bytes[kSmallPool].current, 4096);

  hr_.HoldEvents(false);
  alloc.ProcessPendingFrees();
  const MemoryStats after = testing::StatsOf(alloc);
  EXPECT_EQ(after.active[kAggregate].current, 0);
  EXPECT_EQ(after.active[kAggregate].peak, 2);
  EXPECT_EQ(after.active[kAggregate].freed, 2);
  alloc.ResetPeakStats();
  alloc.ResetAccumulatedStats();
  const MemoryStats reset = testing::StatsOf(alloc);
  EXPECT_EQ(reset.active[kAggregate].peak, 0);
  EXPECT_EQ(reset.active[kAggregate].freed, 0);
}

TEST_F(StreamSafeCUDAAllocatorTest, ReleaseReclaimsCompletedFreesThenForwards) {
  auto cache = std::make_shared<testing::CachingTestAllocator>(base_);
  StreamSafeCUDAAllocator alloc(cache, &hr_, kPlace, s1_);
  {
    AllocationPtr a = alloc.Allocate(8192);
    AsStreamSafe(a)->RecordStream(s2_);
  }
  hr_.HoldEvents(true);  // keep it pending through the next Allocate
  AllocationPtr plain = alloc.Allocate(1024);
  plain.reset();  // cached at once
  EXPECT_EQ(cache->cached_blocks(), 1u);
  EXPECT_EQ(alloc.num_pending_frees(), 1u);
  hr_.HoldEvents(false);
  EXPECT_EQ(alloc.Release(kPlace), 8192u + 1024u);
  EXPECT_EQ(alloc.num_pending_frees(), 0u);
  EXPECT_EQ(base_->live_blocks(), 0u);
}

TEST_F(StreamSafeCUDAAllocatorTest, FreeOnAnotherThread) {
  StreamSafeCUDAAllocator alloc(base_, &rt_, kPlace, s1_);
  std::vector<AllocationPtr> blocks;
  for (int i = 0; i < 64; ++i) {
    blocks.push_back(alloc.Allocate(256 * (i + 1)));
    if (i % 2 == 0) AsStreamSafe(blocks.back())->RecordStream(s2_);
  }
  std::thread freer([&] { blocks.clear(); });
  freer.join();
  WaitUntil([&] { return rt_.QueryStream(s2_); });
  alloc.ProcessPendingFrees();
  EXPECT_EQ(base_->live_blocks(), 0u);
}

}  // namespace
}  // namespace strata::layers::stream_safe_test
