// The thread cache's policy, one thread at a time: hits, misses, bounds, large blocks, flushes,
// statistics and snapshots. Races between threads: thread_cache_races_test.cc.
#include "layers/thread_cache_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "allocation/memory_snapshot.h"
#include "support/stats.h"
#include "support/test_allocators.h"
#include "support/thread_cache_fixture.h"

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
using thread_cache_test::Fixture;
using thread_cache_test::LargeUntilNextCall;
using thread_cache_test::ThreadWithParkedBlock;

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

}  // namespace
}  // namespace strata::layers
