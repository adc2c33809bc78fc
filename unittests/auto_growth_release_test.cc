// The chunk pool (AutoGrowthBestFitAllocator) giving memory back and running out of it: the
// release policies (garbage collection, free when no cache hit, release before a new peak,
// Release's exact bytes) and out of memory (the memory limit, device refusals retried with the
// bare request, the fragmentation hint, absurd sizes). Fixtures: support/auto_growth_fixture.h.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <vector>

#include "allocation/bad_alloc.h"
#include "strategies/auto_growth_best_fit_allocator.h"
#include "support/auto_growth_fixture.h"
#include "support/test_allocators.h"

// In the fixture's namespace: its names need no using-declarations.
namespace strata::strategies::auto_growth_test {
namespace {

using allocation::BadAlloc;
using ::testing::HasSubstr;

// ---- release policies -------------------------------------------------------------------------

TEST(AutoGrowthBestFitAllocatorTest, GarbageCollectionReleasesLongestIdleChunksFirst) {
  Fixture f(TwoPoolOptions([](Options& o) {
    o.memory_limit = 16 * kMiB;
    o.garbage_collection_threshold = 0.5;  // 8 MiB
  }));
  AllocationPtr a = f.alloc->Allocate(2 * kMiB);
  AllocationPtr b = f.alloc->Allocate(2 * kMiB);
  AllocationPtr c = f.alloc->Allocate(2 * kMiB);
  void* a_ptr = a->ptr();
  void* b_ptr = b->ptr();
  b.reset();  // idle order: b, a, c
  a.reset();
  c.reset();
  EXPECT_EQ(f.alloc->reserved_bytes(), 6 * kMiB);
  AllocationPtr d = f.alloc->Allocate(3 * kMiB);   // misses: every idle block is 2 MiB
  EXPECT_EQ(f.alloc->reserved_bytes(), 8 * kMiB);  // 6 + 4 > 8: b's chunk went first
  ASSERT_EQ(f.log->freed().size(), 1u);
  EXPECT_EQ(f.log->freed()[0], b_ptr);
  AllocationPtr e = f.alloc->Allocate(3 * kMiB);  // 8 + 4 > 8: a's, then c's
  ASSERT_EQ(f.log->freed().size(), 3u);
  EXPECT_EQ(f.log->freed()[1], a_ptr);
  EXPECT_EQ(f.alloc->reserved_bytes(), 8 * kMiB);
  EXPECT_EQ(f.Stats().num_device_free, 3);
}

TEST(AutoGrowthBestFitAllocatorTest, GarbageCollectionIsOffWithoutThreshold) {
  Fixture f(TwoPoolOptions([](Options& o) { o.memory_limit = 16 * kMiB; }));
  AllocationPtr a = f.alloc->Allocate(2 * kMiB);
  a.reset();
  AllocationPtr d = f.alloc->Allocate(8 * kMiB);
  EXPECT_EQ(f.log->freed().size(), 0u);
  EXPECT_EQ(f.alloc->reserved_bytes(), 10 * kMiB);
}

TEST(AutoGrowthBestFitAllocatorTest, FreeWhenNoCacheHitReleasesIdleChunksBeforeGrowing) {
  for (bool on : {false, true}) {
    Fixture f(TwoPoolOptions([&](Options& o) { o.free_when_no_cache_hit = on; }));
    AllocationPtr a = f.alloc->Allocate(2 * kMiB);
    a.reset();
    AllocationPtr hit = f.alloc->Allocate(kMiB + 512);  // hits the idle chunk: nothing released
    EXPECT_EQ(f.recording->live_blocks(), 1u);
    hit.reset();
    AllocationPtr miss = f.alloc->Allocate(4 * kMiB);
    EXPECT_EQ(f.recording->live_blocks(), on ? 1u : 2u);
  }
}

TEST(AutoGrowthBestFitAllocatorTest, ReleaseIdleBeforeNewPeakKeepsThePeakDown) {
  for (bool on : {false, true}) {
    Fixture f(TwoPoolOptions([&](Options& o) { o.release_idle_before_new_peak = on; }));
    AllocationPtr a = f.alloc->Allocate(2 * kMiB);
    AllocationPtr b = f.alloc->Allocate(2 * kMiB);
    AllocationPtr c = f.alloc->Allocate(2 * kMiB);
    AllocationPtr x = f.alloc->Allocate(4 * kMiB);
    void* a_ptr = a->ptr();
    void* b_ptr = b->ptr();
    b.reset();
    x.reset();  // idle, longest first: b, x; reserved 10 MiB (the high-water mark)
    // Growth below the mark releases nothing even when on: x's 4 MiB serves 3 MiB.
    AllocationPtr y = f.alloc->Allocate(3 * kMiB);
    EXPECT_TRUE(f.log->freed().empty());
    a.reset();  // idle: b, a
    // 6 MiB misses: 10 + 6 > 10, so (when on) b then a go (6 + 6 is still > 10), c stays.
    AllocationPtr d = f.alloc->Allocate(5 * kMiB);
    if (on) {
      EXPECT_THAT(f.log->freed(), ::testing::ElementsAre(b_ptr, a_ptr));
      EXPECT_EQ(f.alloc->reserved_bytes(), 12 * kMiB);
    } else {
      EXPECT_TRUE(f.log->freed().empty());
      EXPECT_EQ(f.alloc->reserved_bytes(), 16 * kMiB);
    }
    EXPECT_EQ(f.Stats().reserved_bytes[allocation::kAggregate].peak,
              static_cast<std::int64_t>(on ? 12 * kMiB : 16 * kMiB));
  }
}

TEST(AutoGrowthBestFitAllocatorTest, ReleaseReturnsExactBytesAndLeavesNothingBehind) {
  Fixture f;
  std::vector<AllocationPtr> v;
  v.push_back(f.alloc->Allocate(1000));       // small chunk 2 MiB
  v.push_back(f.alloc->Allocate(3 * kMiB));   // 4 MiB
  v.push_back(f.alloc->Allocate(10 * kMiB));  // 10 MiB
  v.push_back(f.alloc->Allocate(10 * kMiB));  // 10 MiB
  v[1].reset();
  v[3].reset();
  EXPECT_EQ(f.alloc->Release(platform::CPUPlace()), 0u);  // another place
  EXPECT_EQ(f.alloc->Release(platform::CUDAPlace(0)), 14 * kMiB);
  EXPECT_EQ(f.alloc->Release(platform::CUDAPlace(0)), 0u);
  EXPECT_EQ(f.alloc->reserved_bytes(), 12 * kMiB);
  v.clear();
  ExpectReleasesEverything(f, 12 * kMiB);
  EXPECT_EQ(f.alloc->reserved_bytes(), 0u);
  const MemoryStats s = f.Stats();
  EXPECT_EQ(s.num_device_alloc, 4);
  EXPECT_EQ(s.num_device_free, 4);
  EXPECT_EQ(s.segment[allocation::kAggregate].current, 0);
  EXPECT_EQ(s.segment[allocation::kAggregate].peak, 4);
  EXPECT_EQ(s.reserved_bytes[allocation::kAggregate].peak, static_cast<std::int64_t>(26 * kMiB));
}

// ---- out of memory ----------------------------------------------------------------------------

TEST(AutoGrowthBestFitAllocatorTest, MemoryLimitThrowsBeforeAskingTheDevice) {
  Fixture f(TwoPoolOptions([](Options& o) { o.memory_limit = 8 * kMiB; }));
  AllocationPtr a = f.alloc->Allocate(6 * kMiB);
  try {
    f.alloc->Allocate(4 * kMiB);
    FAIL() << "expected BadAlloc";
  } catch (const BadAlloc& e) {
    EXPECT_EQ(e.memory_limit(), 8 * kMiB);
    EXPECT_EQ(e.reserved_bytes(), 6 * kMiB);
    EXPECT_EQ(e.allocated_bytes(), 6 * kMiB);
    EXPECT_THAT(e.what(), HasSubstr("limit"));
  }
  EXPECT_EQ(f.recording->num_allocs(), 1u);
}

TEST(AutoGrowthBestFitAllocatorTest, MemoryLimitShrinksGrowthToTheBareRequest) {
  Fixture f(TwoPoolOptions([](Options& o) {
    o.memory_limit = 12 * kMiB;
    o.chunk_size = 8 * kMiB;
  }));
  AllocationPtr a = f.alloc->Allocate(6 * kMiB);  // an 8 MiB chunk
  AllocationPtr b = f.alloc->Allocate(3 * kMiB);  // 8 more would pass the limit; 4 does not
  EXPECT_THAT(f.recording->requests(), ::testing::ElementsAre(8 * kMiB, 4 * kMiB));
  EXPECT_THROW(f.alloc->Allocate(2 * kMiB + 1), BadAlloc);
  EXPECT_EQ(f.recording->num_allocs(), 2u);
}

TEST(AutoGrowthBestFitAllocatorTest, MemoryLimitReleasesIdleChunksBeforeFailing) {
  Fixture f(TwoPoolOptions([](Options& o) { o.memory_limit = 8 * kMiB; }));
  AllocationPtr a = f.alloc->Allocate(6 * kMiB);
  a.reset();
  AllocationPtr b = f.alloc->Allocate(8 * kMiB);  // needs the idle 6 MiB given back first
  EXPECT_EQ(f.alloc->reserved_bytes(), 8 * kMiB);
  EXPECT_EQ(f.recording->live_blocks(), 1u);
}

TEST(AutoGrowthBestFitAllocatorTest, DeviceOomReleasesIdleChunksAndRetriesWithTheBareRequest) {
  auto recording = std::make_shared<testing::RecordingAllocator>();
  auto limited = std::make_shared<testing::LimitedAllocator>(recording, 16 * kMiB);
  AutoGrowthBestFitAllocator alloc(limited, platform::CPUPlace(),
                                   TwoPoolOptions([](Options& o) { o.chunk_size = 64 * kMiB; }));
  AllocationPtr a = alloc.Allocate(3 * kMiB);  // 64 MiB fails; 4 MiB succeeds
  EXPECT_EQ(alloc.reserved_bytes(), 4 * kMiB);
  AllocationPtr idle = alloc.Allocate(10 * kMiB);
  idle.reset();
  AllocationPtr b = alloc.Allocate(12 * kMiB);  // needs the idle 10 MiB released
  EXPECT_EQ(alloc.reserved_bytes(), 16 * kMiB);
  EXPECT_EQ(recording->live_blocks(), 2u);
  try {
    alloc.Allocate(2 * kMiB);
    FAIL() << "expected BadAlloc";
  } catch (const BadAlloc& e) {
    EXPECT_EQ(e.allocated_bytes(), 15 * kMiB);
    EXPECT_EQ(e.reserved_bytes(), 16 * kMiB);
    EXPECT_THAT(e.what(), HasSubstr("reserved by strata but unallocated"));
  }
  EXPECT_EQ(alloc.allocated_bytes(), 15 * kMiB);
}

TEST(AutoGrowthBestFitAllocatorTest, FragmentationHintNamesMaxSplitSize) {
  auto recording = std::make_shared<testing::RecordingAllocator>();
  auto limited = std::make_shared<testing::LimitedAllocator>(recording, 8 * kMiB);
  AutoGrowthBestFitAllocator alloc(limited, platform::CPUPlace(), TwoPoolOptions());
  alloc.Allocate(8 * kMiB).reset();  // one idle 8 MiB chunk
  AllocationPtr p1 = alloc.Allocate(2 * kMiB);
  AllocationPtr p2 = alloc.Allocate(2 * kMiB);
  AllocationPtr p3 = alloc.Allocate(2 * kMiB);
  AllocationPtr p4 = alloc.Allocate(2 * kMiB);
  EXPECT_EQ(recording->num_allocs(), 1u);
  p1.reset();
  p3.reset();  // 4 MiB free, but in two 2 MiB holes of a live chunk
  try {
    alloc.Allocate(3 * kMiB);
    FAIL() << "expected BadAlloc";
  } catch (const BadAlloc& ex) {
    EXPECT_THAT(ex.what(), HasSubstr("max_split_size_mb"));
    EXPECT_THAT(ex.what(), HasSubstr("4.00 MiB is reserved by strata but unallocated"));
  }
}

TEST(AutoGrowthBestFitAllocatorTest, InjectedFailureIsRetriedOnce) {
  Fixture f;
  f.recording->FailNext(1);
  AllocationPtr a = f.alloc->Allocate(1000);
  ASSERT_TRUE(a);
  f.recording->FailNext(2);
  EXPECT_THROW(f.alloc->Allocate(4 * kMiB), BadAlloc);
  EXPECT_EQ(f.alloc->num_chunks(), 1u);
  AllocationPtr b = f.alloc->Allocate(4 * kMiB);
  EXPECT_EQ(f.alloc->num_chunks(), 2u);
}

TEST(AutoGrowthBestFitAllocatorTest, AbsurdSizesThrowInvalidArgument) {
  Fixture f;
  EXPECT_THROW(f.alloc->Allocate(std::numeric_limits<std::size_t>::max()), std::invalid_argument);
  EXPECT_THROW(f.alloc->Allocate(std::numeric_limits<std::size_t>::max() - 100),
               std::invalid_argument);
  EXPECT_THROW(f.alloc->Allocate(AutoGrowthBestFitAllocator::kMaxRequestBytes + 1),
               std::invalid_argument);
  EXPECT_EQ(f.recording->num_allocs(), 0u);
}

TEST(AutoGrowthBestFitAllocatorTest, HugeButValidSizeIsBadAllocFromBelow) {
  auto recording = std::make_shared<testing::RecordingAllocator>();
  auto limited = std::make_shared<testing::LimitedAllocator>(recording, 64 * kMiB);
  AutoGrowthBestFitAllocator alloc(limited, platform::CPUPlace(), TwoPoolOptions());
  EXPECT_THROW(alloc.Allocate(AutoGrowthBestFitAllocator::kMaxRequestBytes), BadAlloc);
  EXPECT_EQ(alloc.reserved_bytes(), 0u);
}

}  // namespace
}  // namespace strata::strategies::auto_growth_test
