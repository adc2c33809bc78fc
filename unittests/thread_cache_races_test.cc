// The thread cache under threads that race: flushes from other threads against the owner's hits
// and drops (both ways of taking), the take window's handshake, and many threads sharing blocks
// and the large block's slot. (Also run under TSan and ASan.)
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "layers/thread_cache_allocator.h"
#include "platform/asymmetric_fence.h"
#include "support/test_allocators.h"
#include "support/thread_cache_fixture.h"
#include "support/threads.h"

namespace strata::layers {

using allocation::AllocationPtr;

namespace {

using thread_cache_test::Fixture;
using thread_cache_test::LargeUntilNextCall;

// An owner taking its newest block back on every hit while another thread keeps flushing every
// cache: each block goes to exactly one of them. Both ways of taking: a plain load and store
// inside the owner's window (where the asymmetric fence is available) and the exchange.
// Runs `owner_loop` (given the count of flushes so far) on a thread of its own while this one
// flushes every cache (Release) until the loop ends; then checks that every block went down
// exactly once.
template <typename OwnerLoop>
void RaceAgainstFlushes(Fixture& f, int min_flushes, OwnerLoop owner_loop) {
  std::atomic<bool> done{false};
  std::atomic<int> flushes{0};
  std::thread owner([&] {
    owner_loop(flushes);
    done = true;
  });
  while (!done) {
    f.cache->Release(platform::CPUPlace());
    ++flushes;
  }
  owner.join();
  EXPECT_GE(flushes.load(), min_flushes);
  f.cache->Release(platform::CPUPlace());
  EXPECT_EQ(f.cache->num_parked(), 0u);
  EXPECT_EQ(f.below->live_blocks(), 0u);
  EXPECT_EQ(f.below->num_allocs(), f.below->num_frees());
}

class ThreadCacheTakeTest : public ::testing::TestWithParam<bool> {};

TEST_P(ThreadCacheTakeTest, FlushesFromAnotherThreadNeverTakeTheOwnersHit) {
  ThreadCacheAllocator::Options o;
  o.owner_plain_take = GetParam();
  Fixture f(o);
  EXPECT_EQ(f.cache->owner_plain_take(), GetParam() && platform::AsymmetricFenceAvailable());
  constexpr int kPairs = 100000, kFlushes = 200;
  std::atomic<int> corrupted{0};
  RaceAgainstFlushes(f, kFlushes, [&](const std::atomic<int>& flushes) {
    for (int i = 0; i < kPairs || flushes.load() < kFlushes; ++i) {
      AllocationPtr a = f.cache->Allocate(4096);
      auto* p = static_cast<unsigned char*>(a->ptr());
      p[0] = static_cast<unsigned char>(i);
      p[4095] = static_cast<unsigned char>(i);
      // A block the flusher took too would be freed below (and its memory reused) by now.
      if (p[0] != static_cast<unsigned char>(i) || p[4095] != static_cast<unsigned char>(i)) {
        ++corrupted;
      }
    }
  });
  EXPECT_EQ(corrupted.load(), 0);
}

// The same race on large blocks: the owner parks one, then drops it on its next call (another
// size class), while another thread keeps flushing; each block goes down exactly once.
TEST_P(ThreadCacheTakeTest, FlushesFromAnotherThreadNeverTakeALargeBlockTheOwnerDrops) {
  ThreadCacheAllocator::Options o = LargeUntilNextCall();
  o.owner_plain_take = GetParam();
  Fixture f(o);
  constexpr int kRounds = 50000, kFlushes = 200;
  RaceAgainstFlushes(f, kFlushes, [&](const std::atomic<int>& flushes) {
    for (int i = 0; i < kRounds || flushes.load() < kFlushes; ++i) {
      f.cache->Allocate(64 << 10).reset();                             // parks until the next call
      AllocationPtr small = f.cache->Allocate(1000 + (i % 2) * 1000);  // drops it
    }
  });
}

INSTANTIATE_TEST_SUITE_P(OwnerTakes, ThreadCacheTakeTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "PlainWhereFenced" : "Exchange";
                         });

// The handshake itself: a flush from another thread that starts while the owner is inside its
// take window waits for the owner to leave it, and then finds the slot empty.
absl::Notification* g_in_window = nullptr;
absl::Notification* g_flush_started = nullptr;
std::atomic<bool> g_flush_returned{false};
std::atomic<bool> g_returned_in_window{false};

TEST(ThreadCacheAllocatorTest, AFlushWaitsForTheOwnersTakeWindow) {
  if (!platform::AsymmetricFenceAvailable()) GTEST_SKIP() << "no asymmetric fence: hits exchange";
  absl::Notification in_window, flush_started;
  g_in_window = &in_window;
  g_flush_started = &flush_started;
  g_flush_returned = false;
  g_returned_in_window = false;
  ThreadCacheAllocator::Options o;
  o.take_window_hook = [] {
    g_in_window->Notify();
    g_flush_started->WaitForNotification();
    // Long enough for a flush that did not wait to take the block and return.
    absl::SleepFor(absl::Milliseconds(100));
    g_returned_in_window = g_flush_returned.load();
  };
  Fixture f(o);
  ASSERT_TRUE(f.cache->owner_plain_take());
  void* first = nullptr;
  {
    AllocationPtr a = f.cache->Allocate(4096);
    first = a->ptr();
  }  // parked
  std::thread flusher([&] {
    in_window.WaitForNotification();
    flush_started.Notify();
    f.cache->Release(platform::CPUPlace());
    g_flush_returned = true;
  });
  AllocationPtr hit = f.cache->Allocate(4096);
  flusher.join();
  EXPECT_FALSE(g_returned_in_window.load());
  EXPECT_EQ(hit->ptr(), first);         // the owner's hit got the parked block...
  EXPECT_EQ(f.below->num_frees(), 0u);  // ...and the flush did not free it below
  EXPECT_EQ(f.below->num_allocs(), 1u);
  hit.reset();
  f.cache->Release(platform::CPUPlace());
  EXPECT_EQ(f.below->live_blocks(), 0u);
}

// A thread that stays inside its take window (stopped, or gone in a forked child) does not hang
// a flush: after kMaxWindowWait the flush leaves that thread's cache alone.
absl::Notification* g_stuck_in_window = nullptr;
absl::Notification* g_flush_done = nullptr;
std::atomic<bool> g_flush_done_in_window{false};

TEST(ThreadCacheAllocatorTest, AFlushGivesUpOnAThreadStuckInItsWindow) {
  if (!platform::AsymmetricFenceAvailable()) GTEST_SKIP() << "no asymmetric fence: hits exchange";
  absl::Notification stuck, flush_done;
  g_stuck_in_window = &stuck;
  g_flush_done = &flush_done;
  g_flush_done_in_window = false;
  ThreadCacheAllocator::Options o;
  o.take_window_hook = [] {
    g_stuck_in_window->Notify();
    // Far longer than kMaxWindowWait: the flush must return while we are still here.
    g_flush_done_in_window = g_flush_done->WaitForNotificationWithTimeout(absl::Seconds(20));
  };
  Fixture f(o);
  AllocationPtr a = f.cache->Allocate(4096);
  AllocationPtr b = f.cache->Allocate(8192);
  void* first = a->ptr();
  b.reset();
  a.reset();  // newest
  std::thread flusher([&] {
    stuck.WaitForNotification();
    f.cache->Release(platform::CPUPlace());
    flush_done.Notify();
  });
  AllocationPtr hit = f.cache->Allocate(4096);
  flusher.join();
  EXPECT_TRUE(g_flush_done_in_window.load());
  EXPECT_EQ(hit->ptr(), first);
  EXPECT_EQ(f.below->num_frees(), 0u);  // the stuck thread's cache was left as it was
  EXPECT_EQ(f.cache->num_parked(), 1u);
  hit.reset();
  f.cache->Release(platform::CPUPlace());
  EXPECT_EQ(f.below->live_blocks(), 0u);
}

// Sixteen threads allocate, write, hand some blocks to a neighbour thread and free: no block
// is handed to two owners at once, and everything goes back. (Also run under TSan and ASan.)
TEST(ThreadCacheAllocatorTest, SixteenThreadsNeverShareABlock) {
  Fixture f;
  constexpr int kThreads = 16, kSteps = 2000;
  std::vector<std::vector<AllocationPtr>> handoff(kThreads);
  std::vector<std::unique_ptr<absl::Mutex>> handoff_mu;
  for (int i = 0; i < kThreads; ++i) handoff_mu.push_back(std::make_unique<absl::Mutex>());
  std::atomic<int> corrupted{0};
  testing::RunThreads(kThreads, [&](int t) {
    std::vector<AllocationPtr> mine;
    for (int i = 0; i < kSteps; ++i) {
      const std::size_t size = 64 + static_cast<std::size_t>((i * 7 + t) % 5) * 700;
      AllocationPtr a = f.cache->Allocate(size);
      std::memset(a->ptr(), t, size);
      mine.push_back(std::move(a));
      if (mine.size() > 4) {
        AllocationPtr& b = mine.front();
        const auto* p = static_cast<const unsigned char*>(b->ptr());
        if (p[0] != t || p[b->requested_size() - 1] != t) ++corrupted;
        if (i % 3 == 0) {
          absl::MutexLock lock(handoff_mu[(t + 1) % kThreads].get());
          handoff[(t + 1) % kThreads].push_back(std::move(b));
        }
        mine.erase(mine.begin());
      }
      if (i % 50 == 0) {
        std::vector<AllocationPtr> taken;
        {
          absl::MutexLock lock(handoff_mu[t].get());
          taken.swap(handoff[t]);
        }
        taken.clear();  // freed on another thread than the allocating one
      }
    }
  });
  // Every thread flushed at exit; what this thread frees now parks here.
  EXPECT_EQ(f.cache->num_parked(), 0u);
  handoff.clear();
  EXPECT_EQ(corrupted.load(), 0);
  EXPECT_LE(f.cache->num_parked(), static_cast<std::size_t>(ThreadCacheAllocator::kSlots));
  f.cache->Release(platform::CPUPlace());
  EXPECT_EQ(f.cache->num_parked(), 0u);
  EXPECT_EQ(f.below->live_blocks(), 0u);
}

// Eight threads park large blocks in the one slot and take or drop each other's: no block is
// handed to two owners at once, and each goes down once. (Also run under TSan and ASan.)
TEST(ThreadCacheAllocatorTest, ThreadsSharingTheLargeSlotNeverShareABlock) {
  Fixture f(LargeUntilNextCall());
  constexpr int kThreads = 8, kSteps = 5000;
  std::atomic<int> corrupted{0};
  testing::RunThreads(kThreads, [&](int t) {
    for (int i = 0; i < kSteps; ++i) {
      const std::size_t size = std::size_t{64 << 10} << ((i + t) % 2);
      AllocationPtr a = f.cache->Allocate(size);
      std::memset(a->ptr(), t, size);
      f.cache->Allocate(1000 + 1000 * static_cast<std::size_t>(i % 2)).reset();
      const auto* p = static_cast<const unsigned char*>(a->ptr());
      if (p[0] != t || p[size - 1] != t) ++corrupted;
    }
  });
  EXPECT_EQ(corrupted.load(), 0);
  f.cache->Release(platform::CPUPlace());
  EXPECT_EQ(f.cache->num_parked(), 0u);
  EXPECT_EQ(f.below->live_blocks(), 0u);
  EXPECT_EQ(f.below->num_allocs(), f.below->num_frees());
}

}  // namespace
}  // namespace strata::layers
