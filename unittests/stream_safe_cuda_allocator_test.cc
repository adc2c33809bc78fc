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
#include "support/stream_test_allocators.h"
#include "support/test_allocators.h"
#include "support/threads.h"

namespace strata::layers {

using allocation::AllocationPtr;
using allocation::BadAlloc;
using allocation::kAggregate;
using allocation::kLargePool;
using allocation::kSmallPool;
using allocation::MemoryStats;

namespace {

using platform::EmulatedRuntime;
using platform::Stream;

constexpr platform::CUDAPlace kPlace{0};

StreamSafeCUDAAllocation* AsStreamSafe(const AllocationPtr& a) {
  auto* s = StreamSafeCUDAAllocator::Find(*a);
  EXPECT_NE(s, nullptr);
  return s;
}

template <typename Pred>
void WaitUntil(Pred pred) {
  while (!pred()) std::this_thread::sleep_for(std::chrono::microseconds(200));
}

bool AllBytesAre(const void* p, std::size_t n, unsigned char value) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) {
    if (b[i] != value) return false;
  }
  return true;
}

// Opens a gate (a host task on a stream waits for it) when leaving the scope, so a failing test
// cannot leave a stream blocked forever. Declare it after the allocator it protects.
struct GateOpener {
  absl::Notification* gate;
  ~GateOpener() {
    if (!gate->HasBeenNotified()) gate->Notify();
  }
};

class StreamSafeCUDAAllocatorTest : public ::testing::Test {
 protected:
  StreamSafeCUDAAllocatorTest()
      : s1_(rt_.CreateStream(0)), s2_(rt_.CreateStream(0)), s3_(rt_.CreateStream(0)) {}

  EmulatedRuntime rt_;
  testing::HoldableRuntime hr_{&rt_};
  Stream s1_, s2_, s3_;
  std::shared_ptr<testing::RecordingAllocator> base_ =
      std::make_shared<testing::RecordingAllocator>(kPlace);

  void RunManyStreamsAndThreads(
      const std::function<std::shared_ptr<allocation::Allocator>(Stream)>& pool_for);
};

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
  EXPECT_EQ(rt_.SyncCount(), syncs + 1);
  EXPECT_EQ(base_->live_blocks(), 0u);
  EXPECT_EQ(alloc.num_pending_frees(), 0u);
  EXPECT_EQ(alloc.num_pooled_events(), 1u);
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
}  // namespace strata::layers

namespace strata::layers {
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
}  // namespace strata::layers
