#include "layers/thread_cache_allocator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "allocation/memory_snapshot.h"
#include "platform/asymmetric_fence.h"
#include "support/stats.h"
#include "support/test_allocators.h"
#include "support/threads.h"

namespace strata::layers {

using allocation::Allocation;
using allocation::AllocationPtr;
using allocation::BlockState;
using allocation::MemorySnapshot;
using allocation::MemoryStats;
using allocation::SnapshotBlock;
using allocation::SnapshotSegment;

namespace {

using testing::RecordingAllocator;

struct Fixture {
  explicit Fixture(ThreadCacheAllocator::Options o = {})
      : below(std::make_shared<RecordingAllocator>()),
        cache(std::make_unique<ThreadCacheAllocator>(below, o)) {}
  std::shared_ptr<RecordingAllocator> below;
  std::unique_ptr<ThreadCacheAllocator> cache;
};

// Another thread that parks a block of `bytes` in its cache and then keeps its cache (stays alive,
// not touching the allocator again) until Finish. Constructed once the block is parked.
class ThreadWithParkedBlock {
 public:
  ThreadWithParkedBlock(ThreadCacheAllocator* cache, std::size_t bytes)
      : thread_([this, cache, bytes] {
          cache->Allocate(bytes).reset();
          parked_.Notify();
          finish_.WaitForNotification();
        }) {
    parked_.WaitForNotification();
  }
  ~ThreadWithParkedBlock() { Finish(); }
  ThreadWithParkedBlock(const ThreadWithParkedBlock&) = delete;
  ThreadWithParkedBlock& operator=(const ThreadWithParkedBlock&) = delete;

  void Finish() {
    if (!finish_.HasBeenNotified()) finish_.Notify();
    if (thread_.joinable()) thread_.join();
  }

 private:
  absl::Notification parked_, finish_;
  std::thread thread_;  // last: it uses the notifications
};

TEST(ThreadCacheAllocatorTest, RejectsBadOptions) {
  EXPECT_THROW(ThreadCacheAllocator(nullptr, {}), std::invalid_argument);
  ThreadCacheAllocator::Options o;
  o.size_class = 384;
  EXPECT_THROW(ThreadCacheAllocator(std::make_shared<RecordingAllocator>(), o),
               std::invalid_argument);
}

TEST(ThreadCacheAllocatorTest, SameSizeLoopStaysInTheThread) {
  Fixture f;
  void* first = nullptr;
  for (int i = 0; i < 100; ++i) {
    AllocationPtr a = f.cache->Allocate(1000);
    if (first == nullptr) first = a->ptr();
    EXPECT_EQ(a->ptr(), first);
    EXPECT_EQ(a->requested_size(), 1000u);
  }
  EXPECT_EQ(f.below->num_allocs(), 1u);
  EXPECT_EQ(f.below->num_frees(), 0u);
  const MemoryStats s = testing::StatsOf(*f.cache);
  EXPECT_EQ(s.thread_cache_blocks, 1);
  EXPECT_EQ(s.thread_cache_bytes, 1000);
  // A request of the same size class takes it too.
  AllocationPtr b = f.cache->Allocate(700);
  EXPECT_EQ(b->ptr(), first);
  EXPECT_EQ(b->requested_size(), 700u);
  EXPECT_EQ(f.below->num_allocs(), 1u);
}

TEST(ThreadCacheAllocatorTest, ABlockTooSmallForTheRequestIsNotHandedOut) {
  ThreadCacheAllocator::Options o;
  o.size_class = 4096;
  Fixture f(o);
  f.cache->Allocate(100).reset();  // a 100-byte block parks in class 4096
  AllocationPtr a = f.cache->Allocate(3000);
  EXPECT_GE(a->size(), 3000u);
  EXPECT_EQ(f.below->num_allocs(), 2u);
  EXPECT_EQ(f.below->num_frees(), 1u);  // the miss flushed the small block first
}

TEST(ThreadCacheAllocatorTest, AMissFlushesTheThreadsBlocksBeforeGoingDown) {
  Fixture f;
  AllocationPtr a = f.cache->Allocate(1000);
  AllocationPtr b = f.cache->Allocate(5000);
  a.reset();
  b.reset();
  EXPECT_EQ(f.cache->num_parked(), 2u);
  EXPECT_EQ(f.below->live_blocks(), 2u);
  AllocationPtr big = f.cache->Allocate(20000);
  EXPECT_EQ(f.cache->num_parked(), 0u);
  EXPECT_EQ(f.below->num_frees(), 2u);
  EXPECT_EQ(f.below->live_blocks(), 1u);
  // The frees reached the layer below before the miss's request.
  const std::vector<std::size_t> requests = f.below->requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests.back(), 20000u);
  // Nothing parked: a miss has nothing to flush.
  AllocationPtr c = f.cache->Allocate(30000);
  EXPECT_EQ(f.below->num_frees(), 2u);
}

TEST(ThreadCacheAllocatorTest, BoundsEvictTheOldestBlocks) {
  ThreadCacheAllocator::Options o;
  o.max_bytes = 64 << 10;
  o.max_block_bytes = 16 << 10;
  Fixture f(o);
  std::vector<AllocationPtr> live;
  for (int i = 0; i < ThreadCacheAllocator::kSlots + 1; ++i) {
    live.push_back(f.cache->Allocate(512 * static_cast<std::size_t>(i + 1)));
  }
  void* oldest = live[0]->ptr();
  live.clear();  // frees 9 distinct classes: the first goes down
  EXPECT_EQ(f.cache->num_parked(), static_cast<std::size_t>(ThreadCacheAllocator::kSlots));
  EXPECT_EQ(f.below->num_frees(), 1u);
  EXPECT_EQ(f.below->live_blocks(), static_cast<std::size_t>(ThreadCacheAllocator::kSlots));
  (void)oldest;

  // A block above max_block_bytes never parks.
  f.cache->Release(platform::CPUPlace());
  const std::size_t frees = f.below->num_frees();
  f.cache->Allocate(32 << 10).reset();
  EXPECT_EQ(f.below->num_frees(), frees + 1);
  EXPECT_EQ(f.cache->num_parked(), 0u);

  // The byte bound: four 16 KiB blocks fill it, a fifth pushes the oldest out.
  for (int i = 0; i < 5; ++i) live.push_back(f.cache->Allocate(16 << 10));
  live.clear();
  EXPECT_EQ(f.cache->num_parked(), 4u);
  EXPECT_EQ(testing::StatsOf(*f.cache).thread_cache_bytes, 64 << 10);
}

ThreadCacheAllocator::Options LargeUntilNextCall() {
  ThreadCacheAllocator::Options o;
  o.max_bytes = 64 << 10;
  o.max_block_bytes = 16 << 10;
  o.large_until_next_call = true;
  return o;
}

// A large block is taken back by the very next call when it asks for its class; any other call
// finds it gone down first, as if it had never parked.
TEST(ThreadCacheAllocatorTest, ALargeBlockParksUntilTheThreadsNextCall) {
  Fixture f(LargeUntilNextCall());
  void* first = nullptr;
  for (int i = 0; i < 10; ++i) {
    AllocationPtr a = f.cache->Allocate(1 << 20);
    if (first == nullptr) first = a->ptr();
    EXPECT_EQ(a->ptr(), first);
  }
  EXPECT_EQ(f.below->num_allocs(), 1u);
  EXPECT_EQ(f.cache->num_parked(), 1u);
  EXPECT_EQ(testing::StatsOf(*f.cache).thread_cache_bytes, 1 << 20);

  // Another class: the large block goes down before the request.
  AllocationPtr small = f.cache->Allocate(1000);
  EXPECT_EQ(f.below->num_frees(), 1u);
  EXPECT_EQ(f.cache->num_parked(), 0u);
  const std::vector<std::size_t> requests = f.below->requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests.back(), 1000u);

  // A free: the large block goes down before it, and the small one parks as before.
  AllocationPtr large = f.cache->Allocate(1 << 20);
  large.reset();
  EXPECT_EQ(f.cache->num_parked(), 1u);
  small.reset();
  EXPECT_EQ(f.below->num_frees(), 2u);
  EXPECT_EQ(f.below->live_blocks(), 1u);
  EXPECT_EQ(f.cache->num_parked(), 1u);
  EXPECT_EQ(testing::StatsOf(*f.cache).thread_cache_bytes, 1000);
  // Small blocks parked before it stay beside it, and are taken back after it.
  AllocationPtr big = f.cache->Allocate(1 << 20);  // a miss: the small block goes down first
  AllocationPtr small2 = f.cache->Allocate(1000);
  const std::size_t allocs = f.below->num_allocs();
  small2.reset();
  big.reset();
  EXPECT_EQ(f.cache->num_parked(), 2u);
  AllocationPtr big_again = f.cache->Allocate(1 << 20);
  AllocationPtr small_again = f.cache->Allocate(1000);
  EXPECT_EQ(f.below->num_allocs(), allocs);
  EXPECT_EQ(f.cache->num_parked(), 0u);
  // Another class than the large block's: it goes down, and the small block under it is a hit.
  const std::size_t frees = f.below->num_frees();
  small_again.reset();
  big_again.reset();
  AllocationPtr small_hit = f.cache->Allocate(1000);
  EXPECT_EQ(f.below->num_allocs(), allocs);
  EXPECT_EQ(f.below->num_frees(), frees + 1);
  EXPECT_EQ(f.cache->num_parked(), 0u);
}

// The slot is the instance's: a large block freed on another thread (PyTorch frees on its
// autograd thread and allocates on the main one) is handed to this thread's next call when it
// asks for the block's class, and goes down before any other call of this thread.
TEST(ThreadCacheAllocatorTest, ALargeBlockParksUntilTheNextCallFromAnyThread) {
  Fixture f(LargeUntilNextCall());
  AllocationPtr a = f.cache->Allocate(1 << 20);
  void* const first = a->ptr();
  std::thread([&] { a.reset(); }).join();
  EXPECT_EQ(f.cache->num_parked(), 1u);
  EXPECT_EQ(testing::StatsOf(*f.cache).thread_cache_bytes, 1 << 20);
  AllocationPtr again = f.cache->Allocate(1 << 20);
  EXPECT_EQ(again->ptr(), first);
  EXPECT_EQ(f.below->num_allocs(), 1u);
  EXPECT_EQ(f.cache->num_parked(), 0u);

  std::thread([&] { again.reset(); }).join();
  AllocationPtr small = f.cache->Allocate(1000);  // another class
  EXPECT_EQ(f.below->num_frees(), 1u);
  EXPECT_EQ(f.below->live_blocks(), 1u);
  EXPECT_EQ(f.cache->num_parked(), 0u);

  AllocationPtr b = f.cache->Allocate(1 << 20);
  std::thread([&] { b.reset(); }).join();
  small.reset();  // a free: the large block goes down before it
  EXPECT_EQ(f.below->num_frees(), 2u);
  EXPECT_EQ(f.below->live_blocks(), 1u);
  EXPECT_EQ(f.cache->num_parked(), 1u);  // the small block

  // The freeing thread stays alive and makes no other call (the autograd thread between
  // backward passes): its block still goes down before this thread's next call.
  f.cache->Release(platform::CPUPlace());
  ThreadWithParkedBlock idle(f.cache.get(), 1 << 20);
  const std::size_t frees = f.below->num_frees();
  AllocationPtr other = f.cache->Allocate(2000);
  EXPECT_EQ(f.below->num_frees(), frees + 1);
  EXPECT_EQ(f.below->live_blocks(), 1u);
}

TEST(ThreadCacheAllocatorTest, LargeBlocksNeverParkWithoutTheOptionOrWithZeroBytes) {
  ThreadCacheAllocator::Options o = LargeUntilNextCall();
  o.large_until_next_call = false;
  Fixture off(o);
  off.cache->Allocate(1 << 20).reset();
  EXPECT_EQ(off.below->num_frees(), 1u);
  o = LargeUntilNextCall();
  o.max_bytes = 0;
  Fixture zero(o);
  zero.cache->Allocate(1 << 20).reset();
  zero.cache->Allocate(1000).reset();
  EXPECT_EQ(zero.below->num_frees(), 2u);
  EXPECT_EQ(zero.cache->num_parked(), 0u);
}

// Flushes from outside the calls (a pool about to grow, Release) take a parked large block; the
// next call then finds its slot empty, on every path.
TEST(ThreadCacheAllocatorTest, ALargeBlockFlushedMeanwhileIsNotTakenOrFreedTwice) {
  Fixture f(LargeUntilNextCall());
  AllocationPtr held = f.cache->Allocate(3000);
  f.cache->Allocate(1 << 20).reset();
  EXPECT_TRUE(ThreadCacheAllocator::GiveBackForGrowth(f.cache.get()));
  EXPECT_EQ(f.below->live_blocks(), 1u);
  AllocationPtr a = f.cache->Allocate(1 << 20);  // its class: the hit finds nothing
  EXPECT_EQ(f.below->num_allocs(), 3u);
  a.reset();
  f.cache->Release(platform::CPUPlace());
  f.cache->Allocate(1000).reset();  // another class: nothing to drop
  EXPECT_EQ(f.below->num_frees(), 2u);
  f.cache->Release(platform::CPUPlace());
  f.cache->Allocate(1 << 20).reset();
  f.cache->Release(platform::CPUPlace());
  held.reset();  // a free: nothing to drop, and it parks
  EXPECT_EQ(f.cache->num_parked(), 1u);
  f.cache->Release(platform::CPUPlace());
  EXPECT_EQ(f.below->live_blocks(), 0u);
  EXPECT_EQ(f.below->num_frees(), f.below->num_allocs());
}

TEST(ThreadCacheAllocatorTest, RefusedBlocksGoDownAtOnce) {
  ThreadCacheAllocator::Options o;
  o.cacheable = [](const Allocation& a) { return a.size() != 1000; };
  Fixture f(o);
  f.cache->Allocate(1000).reset();
  EXPECT_EQ(f.below->num_frees(), 1u);
  f.cache->Allocate(2000).reset();
  EXPECT_EQ(f.below->num_frees(), 1u);
  EXPECT_EQ(f.cache->num_parked(), 1u);
}

TEST(ThreadCacheAllocatorTest, ZeroBytesIsAPassThrough) {
  ThreadCacheAllocator::Options o;
  o.max_bytes = 0;
  Fixture f(o);
  for (int i = 0; i < 3; ++i) f.cache->Allocate(1000).reset();
  EXPECT_EQ(f.below->num_allocs(), 3u);
  EXPECT_EQ(f.below->num_frees(), 3u);
}

TEST(ThreadCacheAllocatorTest, ReleaseFlushesEveryThreadsCache) {
  Fixture f;
  ThreadWithParkedBlock other(f.cache.get(), 4096);
  f.cache->Allocate(8192).reset();
  EXPECT_EQ(f.cache->num_parked(), 2u);
  f.cache->Release(platform::CPUPlace());
  EXPECT_EQ(f.cache->num_parked(), 0u);
  EXPECT_EQ(f.below->live_blocks(), 0u);
}

// The pool below about to grow (it calls GiveBackForGrowth) takes back what every thread keeps;
// a miss alone leaves other threads' blocks where they are.
TEST(ThreadCacheAllocatorTest, APoolAboutToGrowTakesBackEveryThreadsBlocks) {
  Fixture f;
  ThreadWithParkedBlock other(f.cache.get(), 4096);
  AllocationPtr a = f.cache->Allocate(100 << 10);
  EXPECT_EQ(f.cache->num_parked(), 1u);
  ThreadCacheAllocator::GiveBackForGrowth(f.cache.get());
  EXPECT_EQ(f.cache->num_parked(), 0u);
  EXPECT_EQ(f.below->num_frees(), 1u);
}

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

TEST(ThreadCacheAllocatorTest, ThreadExitFlushesItsCache) {
  Fixture f;
  AllocationPtr from_main = f.cache->Allocate(3000);
  std::thread t([&] {
    f.cache->Allocate(1000).reset();
    from_main.reset();  // freed on another thread: parks there
    EXPECT_EQ(f.cache->num_parked(), 2u);
  });
  t.join();
  EXPECT_EQ(f.cache->num_parked(), 0u);
  EXPECT_EQ(f.below->live_blocks(), 0u);
  EXPECT_EQ(f.below->num_frees(), 2u);
}

TEST(ThreadCacheAllocatorTest, DestructionFlushesAndThreadsOutliveIt) {
  Fixture f;
  ThreadWithParkedBlock other(f.cache.get(), 4096);
  f.cache->Allocate(100).reset();
  f.cache.reset();
  EXPECT_EQ(f.below->live_blocks(), 0u);
  other.Finish();  // the thread exits after the instance: it must not touch it
  EXPECT_EQ(f.below->live_blocks(), 0u);
}

TEST(ThreadCacheAllocatorTest, SnapshotMarksParkedBlocks) {
  Fixture f;
  AllocationPtr live = f.cache->Allocate(2048);
  void* parked = f.cache->Allocate(1000)->ptr();  // freed at once
  MemorySnapshot snapshot;
  SnapshotSegment segment;
  segment.address = 0;
  segment.size = ~std::size_t{0} >> 1;
  segment.blocks.push_back(
      {reinterpret_cast<std::uintptr_t>(parked), 1000, 1000, BlockState::kAllocated});
  segment.blocks.push_back(
      {reinterpret_cast<std::uintptr_t>(live->ptr()), 2048, 2048, BlockState::kAllocated});
  snapshot.AddSegment(segment);
  f.cache->Snapshot(&snapshot);
  const std::vector<SnapshotSegment> segments = snapshot.Segments();
  ASSERT_EQ(segments.size(), 1u);
  for (const SnapshotBlock& b : segments[0].blocks) {
    EXPECT_EQ(b.state, b.address == reinterpret_cast<std::uintptr_t>(parked)
                           ? BlockState::kThreadCache
                           : BlockState::kAllocated);
  }
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
