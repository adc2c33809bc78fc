#include "strategies/thread_local_allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "allocation/bad_alloc.h"
#include "support/buddy_options.h"
#include "support/test_allocators.h"

namespace strata::strategies {
namespace {

using ::testing::HasSubstr;

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * 1024;

std::shared_ptr<ThreadLocalAllocator> Make(std::shared_ptr<allocation::Allocator> base,
                                           std::size_t chunk = kMiB) {
  return std::make_shared<ThreadLocalAllocator>(std::move(base), platform::CPUPlace(),
                                                testing::FixedBuddyOptions(chunk, chunk));
}

TEST(ThreadLocalAllocatorTest, EachThreadGetsItsOwnPool) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  auto allocator = Make(base);
  EXPECT_STREQ(allocator->Name(), "thread_local");
  allocation::AllocationPtr mine = allocator->Allocate(1000);
  allocation::AllocationPtr mine2 = allocator->Allocate(1000);
  EXPECT_EQ(mine2->base_ptr(), mine->base_ptr());  // same pool, same chunk
  allocation::AllocationPtr theirs;
  std::thread([&] { theirs = allocator->Allocate(1000); }).join();
  EXPECT_NE(theirs->base_ptr(), mine->base_ptr());
  EXPECT_EQ(base->num_allocs(), 2u);  // one chunk per pool
  EXPECT_EQ(allocator->NumPools(), 2u);
  EXPECT_EQ(theirs->size(), 1024u);
  EXPECT_EQ(theirs->place(), platform::CPUPlace());
}

TEST(ThreadLocalAllocatorTest, CrossThreadFreeGoesBackToTheOwner) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  auto allocator = Make(base);
  allocation::AllocationPtr from_worker;
  void* first_ptr = nullptr;
  void* second_ptr = nullptr;
  absl::Notification allocated, freed, done;
  std::thread worker([&] {
    from_worker = allocator->Allocate(4 * kKiB);
    first_ptr = from_worker->ptr();
    allocated.Notify();
    freed.WaitForNotification();
    // The block came back to this thread's pool: best fit returns the same address.
    allocation::AllocationPtr again = allocator->Allocate(4 * kKiB);
    second_ptr = again->ptr();
    done.Notify();
  });
  allocated.WaitForNotification();
  // Main has no pool yet; freeing must not create one nor put the block into one.
  from_worker.reset();
  EXPECT_EQ(allocator->NumPools(), 1u);
  freed.Notify();
  done.WaitForNotification();
  worker.join();
  EXPECT_EQ(first_ptr, second_ptr);
  EXPECT_EQ(base->num_allocs(), 1u);
}

TEST(ThreadLocalAllocatorTest, ThreadExitReleasesIdleMemory) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  auto allocator = Make(base);
  std::thread([&] {
    allocator->Allocate(100).reset();
    EXPECT_EQ(base->live_blocks(), 1u);
  }).join();
  EXPECT_EQ(base->live_blocks(), 0u);  // without Release
  EXPECT_EQ(allocator->reserved_bytes(), 0u);
  allocator->Release(platform::CPUPlace());
  EXPECT_EQ(allocator->NumPools(), 0u);  // the empty pool of the exited thread is dropped
  // Its statistics are kept.
  allocation::MemoryStats s;
  allocator->CollectStats(&s);
  EXPECT_EQ(s.num_device_alloc, 1);
  EXPECT_EQ(s.num_device_free, 1);
}

TEST(ThreadLocalAllocatorTest, PoolOutlivesItsThreadWhileBlocksAreLive) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  auto allocator = Make(base);
  allocation::AllocationPtr survivor;
  std::thread([&] {
    survivor = allocator->Allocate(2 * kKiB);
    allocator->Allocate(kKiB).reset();
  }).join();
  EXPECT_EQ(allocator->NumPools(), 1u);
  EXPECT_EQ(base->live_blocks(), 1u);
  std::memset(survivor->ptr(), 0x5a, survivor->size());  // still valid memory
  allocator->Release(platform::CPUPlace());              // its chunk is in use: kept
  EXPECT_EQ(base->live_blocks(), 1u);
  survivor.reset();  // the last block of an exited pool returns its chunk at once
  EXPECT_EQ(base->live_blocks(), 0u);
  allocator->Release(platform::CPUPlace());
  EXPECT_EQ(allocator->NumPools(), 0u);
}

TEST(ThreadLocalAllocatorTest, ReleaseCoversAllPools) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  auto allocator = Make(base);
  constexpr int kThreads = 4;
  absl::Notification all_freed, released;
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      allocator->Allocate(100).reset();
      if (++ready == kThreads) all_freed.Notify();
      released.WaitForNotification();  // stay alive: the pools are not exited
    });
  }
  all_freed.WaitForNotification();
  allocation::AllocationPtr held = allocator->Allocate(100);  // main's pool keeps its chunk
  EXPECT_EQ(base->live_blocks(), kThreads + 1u);
  EXPECT_EQ(allocator->Release(platform::CUDAPlace(0)), 0u);  // another place
  EXPECT_EQ(allocator->Release(platform::CPUPlace()), kThreads * kMiB);
  EXPECT_EQ(base->live_blocks(), 1u);
  EXPECT_EQ(allocator->NumPools(), kThreads + 1u);
  released.Notify();
  for (auto& th : threads) th.join();
  held.reset();
  allocator->Release(platform::CPUPlace());
  EXPECT_EQ(base->live_blocks(), 0u);
}

TEST(ThreadLocalAllocatorTest, SeveralAllocatorsInOneThread) {
  auto base1 = std::make_shared<testing::RecordingAllocator>();
  auto base2 = std::make_shared<testing::RecordingAllocator>();
  auto a1 = Make(base1);
  auto a2 = Make(base2);
  std::vector<allocation::AllocationPtr> keep;
  for (int i = 0; i < 10; ++i) {
    keep.push_back(a1->Allocate(100));
    keep.push_back(a2->Allocate(100));
  }
  EXPECT_EQ(base1->num_allocs(), 1u);
  EXPECT_EQ(base2->num_allocs(), 1u);
  EXPECT_EQ(a1->allocated_bytes(), 10 * 256u);
  EXPECT_EQ(a2->allocated_bytes(), 10 * 256u);
  keep.clear();
  // Destroying an allocator returns its pools' memory even though this thread lives on.
  a1.reset();
  EXPECT_EQ(base1->live_blocks(), 0u);
  // A new allocator in the same thread (its stale entry is swept) works normally.
  auto a3 = Make(base1);
  a3->Allocate(100).reset();
  EXPECT_EQ(base1->live_blocks(), 1u);
  a3->Release(platform::CPUPlace());
  EXPECT_EQ(base1->live_blocks(), 0u);
}

// A thread keeps a destroyed allocator's pool (and what it holds: the registry, the layer below)
// only until its next new pool.
TEST(ThreadLocalAllocatorTest, ALongLivedThreadForgetsTheDestroyedAllocatorsPools) {
  auto base1 = std::make_shared<testing::RecordingAllocator>();
  auto base2 = std::make_shared<testing::RecordingAllocator>();
  std::thread([&] {
    auto a1 = Make(base1);
    a1->Allocate(100).reset();
    a1.reset();
    EXPECT_EQ(base1->live_blocks(), 0u);
    EXPECT_GT(base1.use_count(), 1) << "this thread still holds a1's pool";
    auto a2 = Make(base2);
    a2->Allocate(100).reset();
    EXPECT_EQ(base1.use_count(), 1) << "a1's pool was forgotten with its new pool";
  }).join();
  EXPECT_EQ(base2.use_count(), 1);
}

// A thread that exits after the allocator was destroyed hands its pool back safely.
TEST(ThreadLocalAllocatorTest, AThreadOutlivingItsAllocatorExitsSafely) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  auto a = Make(base);
  absl::Notification used, destroyed;
  std::thread t([&] {
    a->Allocate(100).reset();
    used.Notify();
    destroyed.WaitForNotification();
  });
  used.WaitForNotification();
  a.reset();
  EXPECT_EQ(base->live_blocks(), 0u);
  destroyed.Notify();
  t.join();
  EXPECT_EQ(base->live_blocks(), 0u);
  EXPECT_EQ(base.use_count(), 1);
}

TEST(ThreadLocalAllocatorTest, BadAllocPropagates) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  auto limited = std::make_shared<testing::LimitedAllocator>(base, kMiB + kMiB / 2);
  auto allocator = Make(limited);
  allocation::AllocationPtr a = allocator->Allocate(100);  // main's pool: 1 MiB
  std::thread([&] {
    try {
      // A second pool's 1 MiB refill does not fit, nor does the 600 KiB fallback.
      allocator->Allocate(600 * kKiB);
      ADD_FAILURE() << "expected BadAlloc";
    } catch (const allocation::BadAlloc& e) {
      EXPECT_THAT(e.what(), HasSubstr("out of memory"));
    }
  }).join();
  EXPECT_THROW(allocator->Allocate(std::size_t{0} - 1), std::invalid_argument);
}

TEST(ThreadLocalAllocatorTest, RejectsBadOptions) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  BuddyAllocator::Options o = testing::FixedBuddyOptions(kMiB, kMiB);
  o.min_block_bytes = 100;
  EXPECT_THROW(ThreadLocalAllocator(base, platform::CPUPlace(), o), std::invalid_argument);
}

TEST(ThreadLocalAllocatorTest, StatsSumOverPools) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  auto allocator = Make(base);
  allocation::AllocationPtr a = allocator->Allocate(kKiB);
  allocation::AllocationPtr b = allocator->Allocate(kKiB);
  a.reset();  // an inactive split block before b, plus the tail
  allocation::AllocationPtr c;
  absl::Notification go, hold;
  std::thread worker([&] {
    c = allocator->Allocate(3 * kMiB);  // bypasses its pool
    go.Notify();
    hold.WaitForNotification();
  });
  go.WaitForNotification();
  allocation::MemoryStats s;
  allocator->CollectStats(&s);
  using allocation::kAggregate;
  EXPECT_EQ(s.num_device_alloc, 2);
  EXPECT_EQ(s.segment[kAggregate].current, 2);
  EXPECT_EQ(s.reserved_bytes[kAggregate].current, static_cast<std::int64_t>(4 * kMiB));
  EXPECT_EQ(s.reserved_bytes[kAggregate].current, static_cast<std::int64_t>(base->live_bytes()));
  EXPECT_EQ(s.inactive_split[kAggregate].current, 2);
  EXPECT_EQ(s.inactive_split_bytes[kAggregate].current, static_cast<std::int64_t>(kMiB - kKiB));
  hold.Notify();
  worker.join();
  c.reset();
  b.reset();
  allocator->Release(platform::CPUPlace());
  allocator->ResetAccumulatedStats();
  allocator->ResetPeakStats();
  allocation::MemoryStats t;
  allocator->CollectStats(&t);
  EXPECT_EQ(t.num_device_alloc, 0);
  EXPECT_EQ(t.segment[kAggregate].peak, 0);
  EXPECT_EQ(base->live_blocks(), 0u);
}

}  // namespace
}  // namespace strata::strategies
