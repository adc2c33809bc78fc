#include "layers/retry_allocator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "allocation/bad_alloc.h"
#include "layers/retry_waiters.h"
#include "support/stats.h"
#include "support/stream_test_allocators.h"
#include "support/test_allocators.h"

namespace strata::allocation {
namespace {

using layers::RetryAllocator;
using layers::RetryWaiters;

constexpr std::size_t kBlock = 1 << 20;

// Polls (no timing assertion) until `pred` holds.
template <typename Pred>
void WaitUntil(Pred pred) {
  while (!pred()) std::this_thread::sleep_for(std::chrono::microseconds(200));
}

TEST(RetryAllocatorTest, NullUnderlyingIsRejected) {
  EXPECT_THROW(RetryAllocator(nullptr, 100), std::invalid_argument);
}

TEST(RetryAllocatorTest, FourThreadsTakeTurnsOnOneBlock) {
  auto fixed = std::make_shared<testing::FixedBlockAllocator>(kBlock, /*count=*/1);
  RetryAllocator retry(fixed, /*retry_time_ms=*/60'000);

  AllocationPtr first = retry.Allocate(kBlock);
  ASSERT_EQ(first->ptr(), fixed->block(0));

  constexpr int kThreads = 4;
  std::atomic<int> holders{0}, max_holders{0}, got{0};
  std::vector<void*> addresses(kThreads, nullptr);
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      AllocationPtr a = retry.Allocate(kBlock);
      const int h = holders.fetch_add(1) + 1;
      int m = max_holders.load();
      while (h > m && !max_holders.compare_exchange_weak(m, h)) {
      }
      addresses[t] = a->ptr();
      ++got;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // hold it a little
      holders.fetch_sub(1);
      a.reset();  // wakes the others
    });
  }
  // Every thread is out of memory and waiting before the block comes back.
  WaitUntil([&] { return retry.num_waiters() == kThreads; });
  EXPECT_EQ(got.load(), 0);
  first.reset();
  for (auto& t : threads) t.join();

  EXPECT_EQ(got.load(), kThreads);
  EXPECT_EQ(max_holders.load(), 1);
  for (void* p : addresses) EXPECT_EQ(p, fixed->block(0));
  EXPECT_GE(retry.num_alloc_retries(), kThreads);
  EXPECT_GE(retry.num_notifications(), 1u);
  EXPECT_EQ(retry.num_waiters(), 0);
  EXPECT_EQ(fixed->live_blocks(), 0);

  const MemoryStats stats = testing::StatsOf(retry);
  EXPECT_EQ(stats.num_alloc_retries, retry.num_alloc_retries());
  retry.ResetAccumulatedStats();
  EXPECT_EQ(retry.num_alloc_retries(), 0);
}

TEST(RetryAllocatorTest, TimeoutRethrowsTheUnderlyingBadAlloc) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  auto limited = std::make_shared<testing::LimitedAllocator>(base, kBlock);
  RetryAllocator retry(limited, /*retry_time_ms=*/30);

  AllocationPtr held = retry.Allocate(kBlock);
  std::string direct;
  try {
    limited->Allocate(kBlock);
  } catch (const BadAlloc& e) {
    direct = e.what();
  }
  ASSERT_FALSE(direct.empty());

  try {
    retry.Allocate(kBlock);
    FAIL() << "expected BadAlloc";
  } catch (const BadAlloc& e) {
    EXPECT_EQ(std::string(e.what()), direct);
    EXPECT_EQ(e.requested_bytes(), kBlock);
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos);
  }
  EXPECT_GE(retry.num_alloc_retries(), 1);
  EXPECT_EQ(retry.num_waiters(), 0);
  EXPECT_EQ(retry.num_notifications(), 0u);
}

TEST(RetryAllocatorTest, NonPositiveRetryTimeIsAPassThrough) {
  for (std::int64_t ms : {0, -5}) {
    auto base = std::make_shared<testing::RecordingAllocator>();
    RetryAllocator retry(base, ms);
    base->FailNext(1);
    EXPECT_THROW(retry.Allocate(64), BadAlloc);
    EXPECT_EQ(base->requests().size(), 1u) << "no retry with retry time " << ms;
    EXPECT_EQ(retry.num_alloc_retries(), 0);
    // Still forwards normally.
    AllocationPtr a = retry.Allocate(64);
    EXPECT_EQ(a->TopDecoratedAllocator(), &retry);
    a.reset();
    EXPECT_EQ(base->live_blocks(), 0u);
    EXPECT_EQ(retry.num_notifications(), 0u);
  }
}

TEST(RetryAllocatorTest, TransientFailureIsRetried) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  RetryAllocator retry(base, /*retry_time_ms=*/20);
  // Both the first attempt and the immediate retry fail; nobody frees, so the attempt after the
  // first poll interval succeeds.
  base->FailNext(2);
  AllocationPtr a = retry.Allocate(64);
  EXPECT_NE(a->ptr(), nullptr);
  EXPECT_EQ(retry.num_alloc_retries(), 2);
  EXPECT_EQ(base->requests().size(), 3u);
}

// Memory can come back below the layer without a free through it (a deferred cross-stream free
// whose events completed, another stream's pool): polling finds it long before the retry time.
TEST(RetryAllocatorTest, MemoryComingBackBelowIsFoundWithoutAFreeThroughIt) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  RetryAllocator retry(base, /*retry_time_ms=*/20'000);
  base->FailNext(5);  // back after five attempts; nothing frees through `retry`
  absl::Notification done;
  std::thread waiter([&] {
    AllocationPtr a = retry.Allocate(64);
    done.Notify();
  });
  // Polls of 1, 2, 4 and 8 ms: the allocation lands within milliseconds. Waiting for a free
  // through the layer would take the whole 20 s.
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  waiter.join();
  EXPECT_EQ(retry.num_alloc_retries(), 5);
  EXPECT_EQ(retry.num_notifications(), 0u);
}

// When nothing could give memory back (no live block, no pending free), waiting is pointless:
// the BadAlloc surfaces after one retry instead of after the retry time.
TEST(RetryAllocatorTest, DoesNotWaitWhenNothingCouldGiveMemoryBack) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  int asked = 0;
  RetryAllocator retry(base, /*retry_time_ms=*/20'000, [&] {
    ++asked;
    return false;
  });
  base->FailNext(1000);
  EXPECT_THROW(retry.Allocate(64), BadAlloc);
  EXPECT_EQ(base->requests().size(), 3u)
      << "the first attempt, one retry, and one after asking (asking may reclaim memory)";
  EXPECT_EQ(asked, 1);
}

TEST(RetryAllocatorTest, FreesWithoutWaitersDoNotNotify) {
  auto fixed = std::make_shared<testing::FixedBlockAllocator>(kBlock, /*count=*/1);
  RetryAllocator retry(fixed, /*retry_time_ms=*/60'000);
  for (int i = 0; i < 1000; ++i) retry.Allocate(kBlock).reset();
  EXPECT_EQ(retry.num_notifications(), 0u);
  EXPECT_EQ(retry.num_alloc_retries(), 0);

  // With a waiter, the free notifies (from another thread than the allocating one). The waiter
  // also polls, so now and then it takes the block between the free and the free's look for
  // waiters, which then finds none (the waiter has left): a few rounds, until one notifies.
  std::uint64_t notified = 0;
  for (int round = 0; round < 20 && notified == 0; ++round) {
    AllocationPtr held = retry.Allocate(kBlock);
    absl::Notification done;
    std::thread waiter([&] {
      AllocationPtr a = retry.Allocate(kBlock);
      EXPECT_EQ(a->ptr(), fixed->block(0));
      done.Notify();
    });
    WaitUntil([&] { return retry.num_waiters() == 1; });
    std::thread freer([&] { held.reset(); });
    freer.join();
    waiter.join();
    EXPECT_TRUE(done.HasBeenNotified());
    notified = retry.num_notifications();
  }
  EXPECT_GE(notified, 1u);
  for (int i = 0; i < 100; ++i) retry.Allocate(kBlock).reset();
  EXPECT_EQ(retry.num_notifications(), notified);
}

// Nobody can free (the only thread using the device is the waiter itself, and nothing waits on
// stream work): the waiter fails after one last attempt instead of sleeping its hour.
TEST(RetryAllocatorTest, FailsAtOnceWhenEveryHolderIsWaiting) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  auto waiters = RetryWaiters::Create(/*pending=*/[] { return false; });
  RetryAllocator retry(base, /*retry_time_ms=*/3'600'000, nullptr, waiters);
  auto holder = std::async(std::launch::async, [&] {
    AllocationPtr held = retry.Allocate(kBlock);
    base->FailNext(1'000'000);                       // out of memory from now on
    EXPECT_THROW(retry.Allocate(kBlock), BadAlloc);  // holds a block, waits for another
  });
  // Broken, the waiter sleeps an hour: let its allocation succeed so that the test ends.
  if (holder.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "the waiter slept although nobody could free";
    base->FailNext(0);
  }
  holder.get();
  EXPECT_EQ(retry.num_early_failures(), 1);
  EXPECT_EQ(retry.num_waiters(), 0);
  EXPECT_EQ(waiters->num_users(), 0) << "the holder thread exited";
}

// Another thread that used the device and does not wait could free: the waiter waits for it.
TEST(RetryAllocatorTest, WaitsWhileAnotherUserRuns) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  auto limited = std::make_shared<testing::LimitedAllocator>(base, kBlock);
  auto waiters = RetryWaiters::Create(/*pending=*/[] { return false; });
  RetryAllocator retry(limited, /*retry_time_ms=*/3'600'000, nullptr, waiters);
  AllocationPtr held = retry.Allocate(kBlock);  // this thread is a user that does not wait
  auto waiter = std::async(std::launch::async, [&] { return retry.Allocate(kBlock); });
  WaitUntil([&] { return retry.num_alloc_retries() >= 3; });  // it polled, and still waits
  EXPECT_EQ(retry.num_waiters(), 1);
  held.reset();
  AllocationPtr got = waiter.get();
  EXPECT_NE(got, nullptr);
  EXPECT_EQ(retry.num_early_failures(), 0);
}

// When the last thread that could free exits, the waiters see that nobody can free.
TEST(RetryAllocatorTest, FailsWhenTheLastOtherUserExits) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  auto waiters = RetryWaiters::Create(/*pending=*/[] { return false; });
  RetryAllocator retry(base, /*retry_time_ms=*/3'600'000, nullptr, waiters);
  absl::Notification exit_now;
  std::thread other([&] {
    retry.Allocate(kBlock).reset();  // a user: it could free
    exit_now.WaitForNotification();
  });
  WaitUntil([&] { return waiters->num_users() == 1; });
  auto waiter = std::async(std::launch::async, [&] {
    AllocationPtr own = retry.Allocate(kBlock);
    base->FailNext(1'000'000);  // out of memory from now on
    EXPECT_THROW(retry.Allocate(kBlock), BadAlloc);
  });
  WaitUntil([&] { return retry.num_alloc_retries() >= 3; });
  EXPECT_EQ(retry.num_early_failures(), 0) << "the other thread could still free";
  exit_now.Notify();
  other.join();
  if (waiter.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "the waiter slept although nobody could free";
    base->FailNext(0);
  }
  waiter.get();
  EXPECT_EQ(retry.num_early_failures(), 1);
}

// Memory waiting on stream work (`pending`) comes back with no thread acting: every holder
// waiting is no reason to give up then.
TEST(RetryAllocatorTest, KeepsWaitingWhileFreesArePending) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  std::atomic<bool> pending{true};
  auto waiters = RetryWaiters::Create([&] { return pending.load(); });
  RetryAllocator retry(base, /*retry_time_ms=*/3'600'000, nullptr, waiters);
  base->FailNext(8);  // back after eight attempts: polls of 1, 2, ... 64 ms
  AllocationPtr a = retry.Allocate(64);
  EXPECT_NE(a, nullptr);
  EXPECT_EQ(retry.num_alloc_retries(), 8);
  EXPECT_EQ(retry.num_early_failures(), 0);
}

// The retry layers of one device (one per stream's chain) share their waiters: a free through
// one chain wakes a waiter of another.
TEST(RetryAllocatorTest, AFreeOnAnotherChainOfTheDeviceWakesTheWaiter) {
  auto fixed = std::make_shared<testing::FixedBlockAllocator>(kBlock, /*count=*/1);
  auto waiters = RetryWaiters::Create();
  RetryAllocator chain1(fixed, /*retry_time_ms=*/3'600'000, nullptr, waiters);
  RetryAllocator chain2(fixed, /*retry_time_ms=*/3'600'000, nullptr, waiters);
  AllocationPtr held = chain2.Allocate(kBlock);
  auto waiter = std::async(std::launch::async, [&] { return chain1.Allocate(kBlock); });
  WaitUntil([&] { return chain1.num_waiters() == 1; });
  EXPECT_EQ(chain2.num_waiters(), 1) << "one registry for the device";
  held.reset();  // through chain2
  EXPECT_EQ(waiter.get()->ptr(), fixed->block(0));
  EXPECT_GE(waiters->num_notifications(), 1u) << "chain2's free woke chain1's waiter";
  EXPECT_EQ(chain1.num_early_failures(), 0);
}

TEST(RetryAllocatorTest, ForwardsReleaseAndStats) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  auto cache = std::make_shared<testing::CachingTestAllocator>(base);
  RetryAllocator retry(cache, 10);
  retry.Allocate(4096).reset();
  EXPECT_EQ(cache->cached_blocks(), 1u);
  EXPECT_EQ(retry.Release(platform::CPUPlace()), 4096u);
  EXPECT_EQ(base->live_blocks(), 0u);
  EXPECT_EQ(retry.Name(), std::string("retry"));
}

}  // namespace
}  // namespace strata::allocation
