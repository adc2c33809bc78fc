// The default chain's thread cache seen through the facade: what it parks, how its statistics
// read, and how other threads' caches go back to the pool before it grows (the chunk pool) or
// maps pages (the virtual-memory pool), or fails.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "facade/allocator_facade.h"
#include "layers/thread_cache_allocator.h"
#include "platform/asymmetric_fence.h"
#include "platform/emulated_runtime.h"
#include "support/facade_fixture.h"

namespace strata::facade {
namespace {

using allocation::AllocationPtr;
using flags::AllocatorFlags;
using platform::CUDAPlace;
using platform::Stream;
using test_facade::ChunkPoolFlags;
using test_facade::Flags;
using test_facade::PoolFlags;
using test_facade::Small;

// The default chain's thread cache: a freed small block waits in the thread for its next
// allocation, counted as neither allocated nor active; a block recorded on another stream never
// waits there (its reuse must wait for that stream); Release empties every thread's cache. Over
// either pool: the default virtual-memory pool (one 2 MiB page) and the chunk pool (one chunk).
class ThreadCacheOverEitherPool : public ::testing::TestWithParam<bool> {};

TEST_P(ThreadCacheOverEitherPool, ParksOnlyBlocksFreeForReuse) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFlags f = PoolFlags(GetParam());
  const std::int64_t reserved = GetParam() ? std::int64_t{2} << 20 : std::int64_t{20} << 20;
  AllocatorFacade facade(&runtime, f);
  const Stream side = runtime.CreateStream(0);
  AllocationPtr a = facade.Alloc(CUDAPlace(0), 4000);
  void* first = a->ptr();
  a.reset();
  allocation::MemoryStats s = facade.GetMemoryStats(CUDAPlace(0));
  EXPECT_EQ(s.thread_cache_blocks, 1);
  EXPECT_EQ(s.thread_cache_bytes, 4096);
  EXPECT_EQ(s.allocated_bytes[allocation::kAggregate].current, 0);
  EXPECT_EQ(s.active_bytes[allocation::kAggregate].current, 0);
  EXPECT_EQ(s.reserved_bytes[allocation::kAggregate].current, reserved);
  EXPECT_NE(facade.Snapshot(CUDAPlace(0)).find("\"thread_cache\""), std::string::npos);

  AllocationPtr b = facade.Alloc(CUDAPlace(0), 4000);
  EXPECT_EQ(b->ptr(), first);
  EXPECT_EQ(facade.GetMemoryStats(CUDAPlace(0)).thread_cache_blocks, 0);
  runtime.LaunchHostTask(side, [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  ASSERT_TRUE(facade.RecordStream(*b, side));
  b.reset();
  s = facade.GetMemoryStats(CUDAPlace(0));
  EXPECT_EQ(s.thread_cache_blocks, 0);
  EXPECT_EQ(s.active_bytes[allocation::kAggregate].current, 4096);  // pending on `side`
  AllocationPtr c = facade.Alloc(CUDAPlace(0), 4000);
  EXPECT_NE(c->ptr(), first);
  runtime.SynchronizeDevice(0);

  AllocationPtr d = facade.Alloc(CUDAPlace(0), 8000);
  c.reset();
  d.reset();
  EXPECT_EQ(facade.GetMemoryStats(CUDAPlace(0)).thread_cache_blocks, 2);
  facade.Release(CUDAPlace(0));
  s = facade.GetMemoryStats(CUDAPlace(0));
  EXPECT_EQ(s.thread_cache_blocks, 0);
  EXPECT_EQ(s.reserved_bytes[allocation::kAggregate].current, 0);
  runtime.DestroyStream(side);
}

INSTANTIATE_TEST_SUITE_P(Pools, ThreadCacheOverEitherPool, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "vmm_pool" : "chunk_pool");
                         });

// thread_cache_asymmetric_fence picks how a hit takes its block (where membarrier exists).
TEST(AllocatorFacadeTest, TheAsymmetricFenceFlagReachesTheThreadCache) {
  for (const bool fence : {true, false}) {
    platform::EmulatedRuntime runtime(Small());
    AllocatorFlags f = Flags();
    f.thread_cache_asymmetric_fence = fence;
    AllocatorFacade facade(&runtime, f);
    AllocationPtr a = facade.Alloc(CUDAPlace(0), 4000);
    const auto* cache = allocation::FindLayer<layers::ThreadCacheAllocator>(*a);
    ASSERT_NE(cache, nullptr);
    EXPECT_EQ(cache->owner_plain_take(), fence && platform::AsymmetricFenceAvailable()) << fence;
  }
}

// Another thread that allocates eight 1 MiB blocks on `facade`'s device 0, frees them (into its
// thread cache) and then idles, keeping them parked, until destroyed.
class IdleThreadWithParkedBlocks {
 public:
  explicit IdleThreadWithParkedBlocks(AllocatorFacade& facade)
      : thread_([this, &facade] {
          std::vector<AllocationPtr> blocks;
          for (int i = 0; i < 8; ++i) {
            blocks.push_back(facade.Alloc(CUDAPlace(0), std::size_t{1} << 20));
          }
          blocks.clear();
          parked_.Notify();
          done_.WaitForNotification();
        }) {
    parked_.WaitForNotification();
  }
  ~IdleThreadWithParkedBlocks() {
    done_.Notify();
    thread_.join();
  }
  IdleThreadWithParkedBlocks(const IdleThreadWithParkedBlocks&) = delete;
  IdleThreadWithParkedBlocks& operator=(const IdleThreadWithParkedBlocks&) = delete;

 private:
  absl::Notification parked_, done_;
  std::thread thread_;  // last: starts once the notifications exist
};

// Out of memory: the blocks another (idle) thread keeps in its cache go back to the pool, and
// the idle chunk to the device, before the request fails.
TEST(AllocatorFacadeTest, OutOfMemoryFlushesOtherThreadsCaches) {
  platform::EmulatedRuntime runtime(Small(std::size_t{40} << 20));
  AllocatorFacade facade(&runtime, ChunkPoolFlags());
  IdleThreadWithParkedBlocks worker(facade);
  EXPECT_EQ(facade.GetMemoryStats(CUDAPlace(0)).thread_cache_blocks, 8);
  AllocationPtr big = facade.Alloc(CUDAPlace(0), std::size_t{30} << 20);
  const allocation::MemoryStats s = facade.GetMemoryStats(CUDAPlace(0));
  EXPECT_EQ(s.thread_cache_blocks, 0);
  EXPECT_EQ(s.num_ooms, 0);
}

// The pool would grow for a request that fits only with the blocks another thread keeps in its
// cache: they go back first, and the pool does not grow.
TEST(AllocatorFacadeTest, APoolDoesNotGrowWhileOtherThreadsCacheWhatItLacks) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, ChunkPoolFlags());
  IdleThreadWithParkedBlocks worker(facade);
  allocation::MemoryStats s = facade.GetMemoryStats(CUDAPlace(0));
  ASSERT_EQ(s.thread_cache_blocks, 8);
  ASSERT_EQ(s.num_device_alloc, 1);  // one 20 MiB chunk, 8 MiB of it parked
  AllocationPtr big = facade.Alloc(CUDAPlace(0), std::size_t{16} << 20);
  s = facade.GetMemoryStats(CUDAPlace(0));
  EXPECT_EQ(s.thread_cache_blocks, 0);
  EXPECT_EQ(s.num_device_alloc, 1);
  EXPECT_EQ(s.reserved_bytes[allocation::kAggregate].current, std::int64_t{20} << 20);
}

// A request that fits no free range although the pool's free bytes would hold it (free space in
// two chunks), while another thread keeps blocks that would coalesce with one of them: the pool
// asks for them before it grows, and does not grow.
TEST(AllocatorFacadeTest, APoolTakesBackOtherThreadsBlocksBeforeItGrows) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, ChunkPoolFlags());
  AllocationPtr m1 = facade.Alloc(CUDAPlace(0), 12 * kMiB);  // chunk 1: 8 MiB free after it
  AllocationPtr m2 = facade.Alloc(CUDAPlace(0), 16 * kMiB);  // chunk 2: 4 MiB free after it
  AllocationPtr h = facade.Alloc(CUDAPlace(0), 4 * kMiB);    // fills chunk 2
  IdleThreadWithParkedBlocks worker(facade);                 // 8 x 1 MiB: the rest of chunk 1
  h.reset();
  m1.reset();  // chunk 1: 12 MiB free, then the 8 MiB the worker keeps; chunk 2: 4 MiB free
  allocation::MemoryStats s = facade.GetMemoryStats(CUDAPlace(0));
  ASSERT_EQ(s.num_device_alloc, 2);
  ASSERT_EQ(s.thread_cache_blocks, 8);
  ASSERT_EQ(s.reserved_bytes[allocation::kAggregate].current, std::int64_t{40} << 20);
  AllocationPtr big = facade.Alloc(CUDAPlace(0), 16 * kMiB);
  s = facade.GetMemoryStats(CUDAPlace(0));
  EXPECT_EQ(s.thread_cache_blocks, 0);
  EXPECT_EQ(s.num_device_alloc, 2) << "placed in chunk 1 once the worker's blocks were back";
}

// The virtual-memory pool, shared by every stream's chain, asks every chain's thread cache for its
// blocks before it maps pages: a request that fits in the pages another thread's parked blocks
// occupy maps nothing. Once the thread cache is gone, the pool does not call it.
TEST(AllocatorFacadeTest, TheVirtualMemoryPoolTakesBackCachedBlocksBeforeItMaps) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, Flags());
  {
    IdleThreadWithParkedBlocks worker(facade);  // 8 x 1 MiB: four 2 MiB pages, all parked
    allocation::MemoryStats s = facade.GetMemoryStats(CUDAPlace(0));
    ASSERT_EQ(s.thread_cache_blocks, 8);
    const std::int64_t maps = s.num_device_map;
    const std::int64_t reserved = s.reserved_bytes[allocation::kAggregate].current;
    ASSERT_EQ(reserved, std::int64_t{8} << 20);
    std::vector<AllocationPtr> mine;
    for (int i = 0; i < 8; ++i) mine.push_back(facade.Alloc(CUDAPlace(0), std::size_t{1} << 20));
    s = facade.GetMemoryStats(CUDAPlace(0));
    EXPECT_EQ(s.thread_cache_blocks, 0);
    EXPECT_EQ(s.num_device_map, maps) << "the worker's pages were mapped already";
    EXPECT_EQ(s.reserved_bytes[allocation::kAggregate].current, reserved);
  }
  // Another stream's chain (a cache of its own) grows the pool after the worker left.
  const Stream side = runtime.CreateStream(0);
  AllocationPtr on_side = facade.Alloc(CUDAPlace(0), std::size_t{64} << 20, side);
  EXPECT_NE(on_side, nullptr);
  on_side.reset();
  runtime.SynchronizeDevice(0);
  runtime.DestroyStream(side);
}

}  // namespace
}  // namespace strata::facade
