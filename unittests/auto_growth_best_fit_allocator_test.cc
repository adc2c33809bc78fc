// The chunk pool (AutoGrowthBestFitAllocator): split, merge and best fit, growth and its two
// pools, max_split_size, roundup_power2_divisions, the before-growth hook, option validation and
// statistics. Giving memory back and running out of it: auto_growth_release_test.cc; quick
// reuse: auto_growth_quick_reuse_test.cc. Fixtures: support/auto_growth_fixture.h.
#include "strategies/auto_growth_best_fit_allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "allocation/bad_alloc.h"
#include "allocation/memory_stats.h"
#include "support/auto_growth_fixture.h"
#include "support/test_allocators.h"

// In the fixture's namespace: its names need no using-declarations.
namespace strata::strategies::auto_growth_test {
namespace {

using allocation::BadAlloc;
using ::testing::HasSubstr;

TEST(AutoGrowthBestFitAllocatorTest, DefaultsAreThoseOfProduction) {
  const Options o;
  EXPECT_EQ(o.chunk_size, 20 * kMiB);
  EXPECT_EQ(o.small_size, 0u);
  EXPECT_TRUE(o.release_idle_before_new_peak);
  EXPECT_FALSE(o.free_idle_chunk);
  EXPECT_FALSE(o.free_when_no_cache_hit);
  EXPECT_TRUE(o.quick_reuse);
  Fixture f(o);
  AllocationPtr a = f.alloc->Allocate(1000);  // one pool: small requests share 20 MiB chunks
  AllocationPtr b = f.alloc->Allocate(3 * kMiB);
  EXPECT_EQ(f.alloc->reserved_bytes(), 20 * kMiB);
  EXPECT_EQ(f.recording->num_allocs(), 1u);
  EXPECT_EQ(P(b), P(a) + 1024);
}

// ---- split / merge / best fit -----------------------------------------------------------------

TEST(AutoGrowthBestFitAllocatorTest, SplitsAChunkIntoConsecutiveBlocksAndReusesFreedAddress) {
  Fixture f;
  AllocationPtr a = f.alloc->Allocate(1000);
  AllocationPtr b = f.alloc->Allocate(1000);
  AllocationPtr c = f.alloc->Allocate(1000);
  EXPECT_EQ(a->size(), 1024u);
  EXPECT_EQ(P(b), P(a) + 1024);
  EXPECT_EQ(P(c), P(b) + 1024);
  EXPECT_EQ(a->base_ptr(), b->base_ptr());
  EXPECT_EQ(f.recording->num_allocs(), 1u);
  char* b_ptr = P(b);
  b.reset();
  EXPECT_EQ(f.Stats().inactive_split[allocation::kAggregate].current, 2);  // hole + tail
  AllocationPtr d = f.alloc->Allocate(900);
  EXPECT_EQ(P(d), b_ptr);
  EXPECT_EQ(f.alloc->allocated_bytes(), 3 * 1024u);
  a.reset();
  c.reset();
  d.reset();
  EXPECT_EQ(f.alloc->allocated_bytes(), 0u);
  EXPECT_EQ(f.alloc->num_chunks(), 1u);
  const MemoryStats s = f.Stats();
  EXPECT_EQ(s.inactive_split[allocation::kAggregate].current, 0);
  EXPECT_EQ(s.inactive_split_bytes[allocation::kAggregate].current, 0);
  // The chunk is one block again: a 1 MiB request starts at its base.
  AllocationPtr whole = f.alloc->Allocate(kMiB);
  EXPECT_EQ(whole->ptr(), whole->base_ptr());
  EXPECT_EQ(f.recording->num_allocs(), 1u);
}

TEST(AutoGrowthBestFitAllocatorTest, AdjacentFreesCoalesce) {
  Fixture f;
  std::vector<AllocationPtr> v;
  for (int i = 0; i < 8; ++i) v.push_back(f.alloc->Allocate(256 * kKiB));  // fills 2 MiB
  EXPECT_EQ(f.recording->num_allocs(), 1u);
  char* second = P(v[1]);
  v[2].reset();
  v[1].reset();  // merges with the next
  v[4].reset();
  v[3].reset();                                 // merges with prev (1+2) and next (4)
  AllocationPtr big = f.alloc->Allocate(kMiB);  // exactly blocks 1..4
  EXPECT_EQ(P(big), second);
  EXPECT_EQ(f.recording->num_allocs(), 1u);
  EXPECT_EQ(f.Stats().inactive_split[allocation::kAggregate].current, 0);
}

// Free blocks of the given sizes in one chunk, each followed by a live 8 KiB block so that none
// merges with another; freed in the order given (the last is the most recently freed).
struct Holes {
  Holes(const Fixture& f, std::initializer_list<std::size_t> sizes) {
    std::vector<AllocationPtr> holes;
    for (std::size_t size : sizes) {
      holes.push_back(f.alloc->Allocate(size));
      separators.push_back(f.alloc->Allocate(8 * kKiB));
    }
    for (AllocationPtr& hole : holes) {
      at.push_back(P(hole));
      hole.reset();
    }
  }
  std::vector<char*> at;  // each hole's address, in the order of the sizes
  std::vector<AllocationPtr> separators;
};

TEST(AutoGrowthBestFitAllocatorTest, ChoosesTheBestFittingHole) {
  Fixture f;
  const Holes holes(f, {300 * kKiB, 100 * kKiB, 200 * kKiB});
  AllocationPtr x = f.alloc->Allocate(150 * kKiB);
  EXPECT_EQ(P(x), holes.at[2]);
  AllocationPtr y = f.alloc->Allocate(100 * kKiB);
  EXPECT_EQ(P(y), holes.at[1]);
  AllocationPtr z = f.alloc->Allocate(260 * kKiB);
  EXPECT_EQ(P(z), holes.at[0]);
  // The 40 KiB left of the 300 KiB hole fits a 40 KiB request better than the 50 KiB left of
  // the 200 KiB hole (and the chunk's tail).
  AllocationPtr w = f.alloc->Allocate(40 * kKiB);
  EXPECT_EQ(P(w), holes.at[0] + 260 * kKiB);
  EXPECT_EQ(f.recording->num_allocs(), 1u);
}

TEST(AutoGrowthBestFitAllocatorTest, ChoosesTheBestFitWithinOneSizeClass) {
  // 133 KiB and 135 KiB fall in the same second-level bucket ([132, 136) KiB): the search must
  // still compare them rather than take the list head (the most recently freed, 135 KiB).
  Fixture f;
  const Holes holes(f, {133 * kKiB, 135 * kKiB});
  AllocationPtr x = f.alloc->Allocate(132 * kKiB + 512);
  EXPECT_EQ(P(x), holes.at[0]);
}

TEST(AutoGrowthBestFitAllocatorTest, BlocksAreAligned) {
  for (std::size_t alignment : {std::size_t{256}, std::size_t{512}, std::size_t{4096}}) {
    Fixture f(TwoPoolOptions([&](Options& o) { o.alignment = alignment; }), 4096);
    std::vector<AllocationPtr> v;
    for (std::size_t size : {1, 7, 255, 513, 4097, 100000, 3000000}) {
      v.push_back(f.alloc->Allocate(size));
      EXPECT_EQ(v.back()->size() % alignment, 0u) << size;
      EXPECT_GE(v.back()->size(), size);
      EXPECT_LT(v.back()->size(), size + alignment);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.back()->ptr()) % alignment, 0u) << size;
    }
  }
}

TEST(AutoGrowthBestFitAllocatorTest, SizeZeroGetsAMinimalBlock) {
  Fixture f;
  AllocationPtr a = f.alloc->Allocate(0);
  AllocationPtr b = f.alloc->Allocate(0);
  EXPECT_EQ(a->size(), 512u);
  EXPECT_NE(a->ptr(), b->ptr());
  EXPECT_EQ(a->place(), platform::CUDAPlace(0));
}

// ---- growth and pools -------------------------------------------------------------------------

TEST(AutoGrowthBestFitAllocatorTest, GrowthSizes) {
  Fixture f;
  AllocationPtr small = f.alloc->Allocate(1000);
  AllocationPtr large = f.alloc->Allocate(3 * kMiB + 1);
  AllocationPtr exact = f.alloc->Allocate(6 * kMiB);
  EXPECT_THAT(f.recording->requests(), ::testing::ElementsAre(2 * kMiB, 4 * kMiB, 6 * kMiB));
  // The 4 MiB chunk's remainder (just under 1 MiB) is too small for any large request.
  AllocationPtr more = f.alloc->Allocate(1536 * kKiB);
  EXPECT_EQ(f.recording->requests().back(), 2 * kMiB);
  EXPECT_EQ(f.alloc->reserved_bytes(), 14 * kMiB);
  EXPECT_EQ(f.alloc->num_chunks(), 4u);
}

TEST(AutoGrowthBestFitAllocatorTest, ChunkSizeIsTheMinimumLargeGrowth) {
  Fixture f(TwoPoolOptions([](Options& o) { o.chunk_size = 64 * kMiB; }));
  AllocationPtr a = f.alloc->Allocate(3 * kMiB);
  AllocationPtr b = f.alloc->Allocate(5 * kMiB);
  AllocationPtr c = f.alloc->Allocate(100 * kMiB);
  AllocationPtr s = f.alloc->Allocate(4 * kKiB);  // small pool: 2 MiB, not chunk_size
  EXPECT_THAT(f.recording->requests(), ::testing::ElementsAre(64 * kMiB, 100 * kMiB, 2 * kMiB));
  EXPECT_EQ(P(b), P(a) + 3 * kMiB);
}

TEST(AutoGrowthBestFitAllocatorTest, SmallAndLargePoolsAreSeparate) {
  Fixture f;
  AllocationPtr large = f.alloc->Allocate(3 * kMiB);  // 4 MiB chunk, 1 MiB free in it
  AllocationPtr small = f.alloc->Allocate(512 * kKiB);
  EXPECT_NE(small->base_ptr(), large->base_ptr());
  EXPECT_EQ(f.recording->num_allocs(), 2u);
  const MemoryStats s = f.Stats();
  EXPECT_EQ(s.segment[allocation::kSmallPool].current, 1);
  EXPECT_EQ(s.segment[allocation::kLargePool].current, 1);
  EXPECT_EQ(s.segment[allocation::kAggregate].current, 2);
  EXPECT_EQ(s.reserved_bytes[allocation::kSmallPool].current, static_cast<std::int64_t>(2 * kMiB));
  EXPECT_EQ(s.reserved_bytes[allocation::kLargePool].current, static_cast<std::int64_t>(4 * kMiB));
  // Inactive split blocks are classified by block size (as in PyTorch): the large chunk's 1 MiB
  // tail counts as small, the small chunk's 1.5 MiB tail as large.
  EXPECT_EQ(s.inactive_split[allocation::kSmallPool].current, 1);
  EXPECT_EQ(s.inactive_split[allocation::kLargePool].current, 1);
  EXPECT_EQ(s.inactive_split_bytes[allocation::kAggregate].current,
            static_cast<std::int64_t>(kMiB + 1536 * kKiB));
}

TEST(AutoGrowthBestFitAllocatorTest, WithoutSmallPoolSmallRequestsShareLargeChunks) {
  Fixture f(TwoPoolOptions([](Options& o) { o.small_size = 0; }));
  AllocationPtr large = f.alloc->Allocate(3 * kMiB);
  AllocationPtr small = f.alloc->Allocate(512 * kKiB);
  EXPECT_EQ(small->base_ptr(), large->base_ptr());
  EXPECT_EQ(f.recording->num_allocs(), 1u);
}

// ---- max_split_size ---------------------------------------------------------------------------

TEST(AutoGrowthBestFitAllocatorTest, OversizeBlocksAreNeverSplitNorTakenBySmallerRequests) {
  Fixture f(TwoPoolOptions([](Options& o) { o.max_split_size = 8 * kMiB; }));
  AllocationPtr big = f.alloc->Allocate(10 * kMiB);
  EXPECT_EQ(f.recording->requests().back(), 10 * kMiB);
  char* big_ptr = P(big);
  big.reset();
  EXPECT_EQ(f.Stats().oversize_segments.current, 1);
  EXPECT_EQ(f.Stats().max_split_size, static_cast<std::int64_t>(8 * kMiB));
  // An ordinary request does not take (and split) the idle oversize block.
  AllocationPtr ordinary = f.alloc->Allocate(4 * kMiB);
  EXPECT_NE(P(ordinary), big_ptr);
  EXPECT_EQ(f.recording->num_allocs(), 2u);
  // An oversize request within the slack takes it whole, unsplit.
  AllocationPtr over = f.alloc->Allocate(9 * kMiB);
  EXPECT_EQ(P(over), big_ptr);
  EXPECT_EQ(over->size(), 10 * kMiB);
  EXPECT_EQ(f.alloc->allocated_bytes(), 4 * kMiB + 10 * kMiB);  // the whole block is used
  EXPECT_EQ(f.Stats().inactive_split[allocation::kAggregate].current, 0);
  over.reset();
  // Beyond the 20 MiB slack it does not.
  AllocationPtr huge = f.alloc->Allocate(40 * kMiB);
  char* huge_ptr = P(huge);
  huge.reset();
  AllocationPtr twelve = f.alloc->Allocate(12 * kMiB);  // 10 MiB is too small, 40 MiB too big
  EXPECT_NE(P(twelve), huge_ptr);
  EXPECT_NE(P(twelve), big_ptr);
  EXPECT_EQ(f.recording->num_allocs(), 4u);
  EXPECT_EQ(f.recording->requests().back(), 12 * kMiB);
}

TEST(AutoGrowthBestFitAllocatorTest, ChunkSizeStaysBelowMaxSplitSize) {
  Fixture f(TwoPoolOptions([](Options& o) {
    o.max_split_size = 16 * kMiB;
    o.chunk_size = 64 * kMiB;
  }));
  AllocationPtr a = f.alloc->Allocate(3 * kMiB);
  EXPECT_EQ(f.recording->requests().back(), 14 * kMiB);
  AllocationPtr b = f.alloc->Allocate(5 * kMiB);
  EXPECT_EQ(b->base_ptr(), a->base_ptr());
}

// ---- roundup_power2_divisions -----------------------------------------------------------------

TEST(AutoGrowthBestFitAllocatorTest, RoundupPower2Divisions) {
  {
    Fixture f(TwoPoolOptions([](Options& o) {
      o.roundup_power2_divisions = AutoGrowthBestFitAllocator::UniformRoundup(4);
    }));
    EXPECT_EQ(f.alloc->RoundSize(1200 * kMiB), 1280 * kMiB);
    EXPECT_EQ(f.alloc->RoundSize(1280 * kMiB + 1), 1536 * kMiB);
    EXPECT_EQ(f.alloc->RoundSize(1280 * kMiB), 1280 * kMiB);  // already on a division
    EXPECT_EQ(f.alloc->RoundSize(1024 * kMiB), 1024 * kMiB);  // powers of two stay
    EXPECT_EQ(f.alloc->RoundSize(1100 * kKiB), 1280 * kKiB);
    EXPECT_EQ(f.alloc->RoundSize(1000), 1024u);  // not above alignment * divisions: aligned only
    EXPECT_EQ(f.alloc->RoundSize(5000), 5120u);
    EXPECT_EQ(f.alloc->RoundSize(5 * kMiB), 5 * kMiB);
    EXPECT_EQ(f.alloc->RoundSize(5 * kMiB + 1), 6 * kMiB);
    AllocationPtr a = f.alloc->Allocate(5 * kMiB + 3);
    EXPECT_EQ(a->size(), 6 * kMiB);
    EXPECT_EQ(f.recording->requests().back(), 6 * kMiB);
  }
  {
    Fixture f(TwoPoolOptions([](Options& o) {
      o.roundup_power2_divisions = {0, 0, 8};  // [0,2) MiB off, [2,4) MiB off, >= 4 MiB: 8
    }));
    EXPECT_EQ(f.alloc->RoundSize(1100 * kKiB), 1100 * kKiB);
    EXPECT_EQ(f.alloc->RoundSize(3 * kMiB + 1), 3 * kMiB + 512);
    EXPECT_EQ(f.alloc->RoundSize(5 * kMiB), 5 * kMiB);
    EXPECT_EQ(f.alloc->RoundSize(5 * kMiB + 1), 5 * kMiB + 512 * kKiB);
    EXPECT_EQ(f.alloc->RoundSize(100 * kMiB), 104 * kMiB);
  }
  {
    Fixture f(TwoPoolOptions());  // no rounding
    EXPECT_EQ(f.alloc->RoundSize(1280 * kMiB + 1), 1280 * kMiB + 512);
  }
}

// ---- before growth ----------------------------------------------------------------------------

// With no room, the pool asks its BeforeGrowth hook (outside its lock: the hook frees into it)
// and searches again; what the hook gave back is used instead of growing. With room, it does
// not ask.
TEST(AutoGrowthBestFitAllocatorTest, BeforeGrowthIsAskedAndWhatItGivesBackIsUsed) {
  Fixture f;
  struct Holder {
    AllocationPtr block;
    int calls = 0;
  } holder;
  holder.block = f.alloc->Allocate(4 * kMiB);
  f.alloc->SetBeforeGrowth(
      [](void* context) {
        auto* h = static_cast<Holder*>(context);
        ++h->calls;
        h->block.reset();
        return true;
      },
      &holder);
  AllocationPtr a = f.alloc->Allocate(4 * kMiB);  // no room: the hook frees the first block
  EXPECT_EQ(holder.calls, 1);
  EXPECT_EQ(f.alloc->num_chunks(), 1u);
  EXPECT_EQ(f.recording->num_allocs(), 1u);
  a.reset();
  AllocationPtr b = f.alloc->Allocate(kMiB + 4096);  // room: no call
  EXPECT_EQ(holder.calls, 1);
  AllocationPtr c = f.alloc->Allocate(8 * kMiB);  // no room, nothing given back: grows
  EXPECT_EQ(holder.calls, 2);
  EXPECT_EQ(f.alloc->num_chunks(), 2u);
  ExpectConsistent(f);
}

// ---- options ----------------------------------------------------------------------------------

TEST(AutoGrowthBestFitAllocatorTest, OptionValidation) {
  // Each case changes TwoPoolOptions() into an invalid set; the error names the option.
  const struct {
    const char* error;
    std::function<void(Options&)> change;
  } invalid[] = {
      {"alignment = 500", [](Options& o) { o.alignment = 500; }},
      {"alignment = 0", [](Options& o) { o.alignment = 0; }},
      {"alignment", [](Options& o) { o.alignment = 4 * kMiB; }},
      {"growth_granularity", [](Options& o) { o.growth_granularity = 3 * kMiB; }},
      {"max_split_size = 524288", [](Options& o) { o.max_split_size = 512 * kKiB; }},
      {"roundup_power2_divisions[1] = 3",
       [](Options& o) {
         o.roundup_power2_divisions = {4, 3};
       }},
      {"roundup_power2_divisions[0] = 131072",
       [](Options& o) { o.roundup_power2_divisions = {131072}; }},
      {"roundup_power2_divisions", [](Options& o) { o.roundup_power2_divisions.assign(45, 1); }},
      {"garbage_collection_threshold",
       [](Options& o) {
         o.garbage_collection_threshold = 1.0;
         o.memory_limit = kMiB;
       }},
      {"garbage_collection_threshold",
       [](Options& o) {
         o.garbage_collection_threshold = -0.1;
         o.memory_limit = kMiB;
       }},
      {"garbage_collection_threshold",
       [](Options& o) {
         o.garbage_collection_threshold = std::numeric_limits<double>::quiet_NaN();
         o.memory_limit = kMiB;
       }},
      {"needs memory_limit",
       [](Options& o) {
         o.garbage_collection_threshold = 0.5;
         o.memory_limit = 0;
       }},
      {"small_chunk_size", [](Options& o) { o.small_chunk_size = 512 * kKiB; }},
      {"small_chunk_size", [](Options& o) { o.small_chunk_size = 3 * kMiB; }},
      {"chunk_size", [](Options& o) { o.chunk_size = std::numeric_limits<std::size_t>::max(); }},
  };
  for (const auto& c : invalid) {
    SCOPED_TRACE(::testing::Message() << "case " << &c - invalid);
    const Options o = TwoPoolOptions(c.change);
    try {
      AutoGrowthBestFitAllocator a(std::make_shared<testing::RecordingAllocator>(),
                                   platform::CPUPlace(), o);
      ADD_FAILURE() << "expected std::invalid_argument for " << c.error;
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr(c.error));
    }
  }
  EXPECT_THROW(AutoGrowthBestFitAllocator(nullptr, platform::CPUPlace(), TwoPoolOptions()),
               std::invalid_argument);
  // Valid corner cases.
  Options o = TwoPoolOptions();
  o.alignment = 1;
  o.max_split_size = kMiB + 1;
  o.roundup_power2_divisions = {0, 1, 2, 65536};
  o.garbage_collection_threshold = 0.99;
  o.memory_limit = 1;
  EXPECT_NO_THROW(AutoGrowthBestFitAllocator(std::make_shared<testing::RecordingAllocator>(),
                                             platform::CPUPlace(), o));
}

// ---- statistics -------------------------------------------------------------------------------

TEST(AutoGrowthBestFitAllocatorTest, StatisticsIdentitiesAndResets) {
  Fixture f;
  std::vector<AllocationPtr> v;
  for (int i = 0; i < 20; ++i) v.push_back(f.alloc->Allocate((i % 5 + 1) * 300 * kKiB));
  ExpectConsistent(f);
  for (int i = 0; i < 20; i += 2) v[i].reset();
  ExpectConsistent(f);
  const MemoryStats before = f.Stats();
  EXPECT_GT(before.inactive_split[0].current, 0);
  const std::int64_t peak = before.reserved_bytes[0].peak;
  f.alloc->Release(platform::CUDAPlace(0));
  v.clear();
  f.alloc->Release(platform::CUDAPlace(0));
  ExpectConsistent(f);
  MemoryStats s = f.Stats();
  EXPECT_EQ(s.reserved_bytes[0].peak, peak);
  EXPECT_EQ(s.reserved_bytes[0].current, 0);
  f.alloc->ResetPeakStats();
  s = f.Stats();
  EXPECT_EQ(s.reserved_bytes[0].peak, 0);
  EXPECT_GT(s.reserved_bytes[0].allocated, 0);
  f.alloc->ResetAccumulatedStats();
  s = f.Stats();
  EXPECT_EQ(s.reserved_bytes[0].allocated, 0);
  EXPECT_EQ(s.num_device_alloc, 0);
  EXPECT_EQ(s.num_device_free, 0);
}

// With nothing reserved there is no fragmentation to hint at.
TEST(AutoGrowthBestFitAllocatorTest, NoFragmentationHintWhenNothingIsReserved) {
  Fixture f;
  f.recording->FailNext(2);  // the growth and its bare-request retry
  try {
    f.alloc->Allocate(std::size_t{4} << 20);
    FAIL() << "expected BadAlloc";
  } catch (const allocation::BadAlloc& e) {
    EXPECT_EQ(std::string(e.what()).find("fragmentation"), std::string::npos) << e.what();
  }
  EXPECT_EQ(f.alloc->reserved_bytes(), 0u);
}

}  // namespace
}  // namespace strata::strategies::auto_growth_test
