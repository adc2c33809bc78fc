#include "strategies/buddy_allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

#include "allocation/bad_alloc.h"
#include "support/buddy_options.h"
#include "support/test_allocators.h"

namespace strata::strategies {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * 1024;

char* P(void* p) { return static_cast<char*>(p); }

TEST(BuddyAllocatorTest, SplitsAndMergesBuddies) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  BuddyAllocator buddy(base, testing::FixedBuddyOptions(64 * kKiB, 64 * kKiB));
  void* a = buddy.Alloc(1000);  // rounded to 1 KiB
  void* b = buddy.Alloc(1000);
  void* c = buddy.Alloc(1000);
  EXPECT_EQ(P(b), P(a) + 1024);
  EXPECT_EQ(P(c), P(b) + 1024);
  EXPECT_EQ(buddy.allocated_bytes(), 3 * kKiB);
  EXPECT_EQ(buddy.NumFreeBlocks(), 1u);  // the tail of the chunk

  buddy.Free(b);
  EXPECT_EQ(buddy.NumFreeBlocks(), 2u);  // b cannot merge: a and c are live
  buddy.Free(a);
  EXPECT_EQ(buddy.NumFreeBlocks(), 2u);  // a merged with its right buddy b
  // The merged a+b hole is the best fit for 2 KiB and starts at a.
  void* ab = buddy.Alloc(2 * kKiB);
  EXPECT_EQ(ab, a);
  buddy.Free(ab);
  buddy.Free(c);  // merges left (a+b) and right (tail): the chunk is whole again
  EXPECT_EQ(buddy.NumFreeBlocks(), 1u);
  EXPECT_EQ(buddy.allocated_bytes(), 0u);
  // The whole chunk is available again without a refill, at the same address.
  void* whole = buddy.Alloc(64 * kKiB);
  EXPECT_EQ(whole, a);
  EXPECT_EQ(base->num_allocs(), 1u);
  buddy.Free(whole);
}

TEST(BuddyAllocatorTest, PicksTheSmallestHoleThatFits) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  BuddyAllocator buddy(base, testing::FixedBuddyOptions(64 * kKiB, 64 * kKiB));
  void* h1 = buddy.Alloc(4 * kKiB);
  void* s1 = buddy.Alloc(256);
  void* h2 = buddy.Alloc(2 * kKiB);
  void* s2 = buddy.Alloc(256);
  void* h3 = buddy.Alloc(3 * kKiB);
  void* s3 = buddy.Alloc(256);
  buddy.Free(h1);
  buddy.Free(h2);
  buddy.Free(h3);
  EXPECT_EQ(buddy.Alloc(2 * kKiB), h2);
  EXPECT_EQ(buddy.Alloc(3 * kKiB), h3);
  void* part = buddy.Alloc(1 * kKiB);  // only h1 (4 KiB) and the tail remain: h1 is smaller
  EXPECT_EQ(part, h1);
  (void)s1;
  (void)s2;
  (void)s3;
}

TEST(BuddyAllocatorTest, ZeroBytesGetsAUniqueMinimumBlock) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  BuddyAllocator buddy(base, testing::FixedBuddyOptions(64 * kKiB, 64 * kKiB));
  BuddyAllocator::Span a = buddy.AllocSpan(0);
  BuddyAllocator::Span b = buddy.AllocSpan(0);
  ASSERT_NE(a.ptr, nullptr);
  EXPECT_NE(a.ptr, b.ptr);
  EXPECT_EQ(a.size, 256u);
  EXPECT_EQ(a.base, a.ptr);
  EXPECT_EQ(b.base, a.ptr);  // both carved from the same chunk
  buddy.Free(a.ptr);
  buddy.Free(b.ptr);
}

TEST(BuddyAllocatorTest, RefillsFromFractionOfAvailable) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  std::size_t available = 64 * kMiB;
  BuddyAllocator::Options o;
  o.chunk_granularity = kMiB;
  o.fraction = 0.5;
  o.available_bytes = [&available] { return available; };
  BuddyAllocator buddy(base, o);

  void* a = buddy.Alloc(32 * kMiB);  // first refill: 0.5 x 64 MiB, used up entirely
  EXPECT_EQ(buddy.max_chunk_bytes(), 32 * kMiB);
  available = 20 * kMiB;
  void* b = buddy.Alloc(kMiB);  // second refill: 0.5 x 20 MiB
  available = 7 * kMiB;
  void* c = buddy.Alloc(9 * kMiB + 1);  // 9 MiB left in chunk 2 is too small: 0.5 x 7 -> 3.5,
                                        // but never less than the request: 10 MiB (rounded)
  EXPECT_THAT(base->requests(), ElementsAre(32 * kMiB, 10 * kMiB, 10 * kMiB));
  buddy.Free(a);
  buddy.Free(b);
  buddy.Free(c);
  EXPECT_EQ(buddy.Release(), 52 * kMiB);
}

TEST(BuddyAllocatorTest, RefillsFromInitialAndReallocateBytes) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  BuddyAllocator::Options o = testing::FixedBuddyOptions(4 * kMiB, 2 * kMiB);
  o.chunk_granularity = kMiB;
  BuddyAllocator buddy(base, o);
  void* a = buddy.Alloc(3 * kMiB);    // chunk 1 (4 MiB)
  void* b = buddy.Alloc(3 * kMiB);    // does not fit the 1 MiB left: chunk 2 of max(2, 3) MiB
  void* c = buddy.Alloc(kMiB);        // fits chunk 1's tail
  void* d = buddy.Alloc(512 * kKiB);  // chunk 3: reallocate_bytes
  EXPECT_EQ(buddy.max_chunk_bytes(), 4 * kMiB);
  EXPECT_EQ(P(c), P(a) + 3 * kMiB);
  EXPECT_THAT(base->requests(), ElementsAre(4 * kMiB, 3 * kMiB, 2 * kMiB));
  EXPECT_EQ(buddy.NumChunks(), 3u);
  for (void* p : {a, b, c, d}) buddy.Free(p);
}

TEST(BuddyAllocatorTest, InitialBytesThenFractionForLaterRefills) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  BuddyAllocator::Options o;
  o.chunk_granularity = kMiB;
  o.initial_bytes = 4 * kMiB;
  o.fraction = 0.25;
  o.available_bytes = [] { return 40 * kMiB; };
  BuddyAllocator buddy(base, o);
  void* a = buddy.Alloc(4 * kMiB);
  void* b = buddy.Alloc(kMiB);
  // The derived max chunk is fixed at first use: max(initial, reallocate, granularity).
  EXPECT_EQ(buddy.max_chunk_bytes(), 4 * kMiB);
  EXPECT_THAT(base->requests(), ElementsAre(4 * kMiB, 10 * kMiB));
  buddy.Free(a);
  buddy.Free(b);
}

TEST(BuddyAllocatorTest, RefillIsRoundedUpToChunkGranularity) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  BuddyAllocator::Options o = testing::FixedBuddyOptions(3 * kMiB, 3 * kMiB);
  o.chunk_granularity = 2 * kMiB;
  BuddyAllocator buddy(base, o);
  void* a = buddy.Alloc(100);
  EXPECT_THAT(base->requests(), ElementsAre(4 * kMiB));
  EXPECT_EQ(buddy.reserved_bytes(), 4 * kMiB);
  buddy.Free(a);
}

TEST(BuddyAllocatorTest, HugeRequestsBypassThePool) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  BuddyAllocator::Options o = testing::FixedBuddyOptions(kMiB, kMiB);
  BuddyAllocator buddy(base, o);
  void* small = buddy.Alloc(kKiB);
  EXPECT_EQ(buddy.max_chunk_bytes(), kMiB);
  BuddyAllocator::Span huge = buddy.AllocSpan(3 * kMiB + 1);
  EXPECT_EQ(huge.size, 3 * kMiB + 256);  // rounded to the block size only
  EXPECT_EQ(huge.base, huge.ptr);
  EXPECT_THAT(base->requests(), ElementsAre(kMiB, 3 * kMiB + 256));
  EXPECT_EQ(buddy.NumChunks(), 1u);
  EXPECT_EQ(base->live_blocks(), 2u);
  EXPECT_EQ(buddy.allocated_bytes(), kKiB + 3 * kMiB + 256);
  buddy.Free(huge.ptr);  // straight back, no Release needed
  EXPECT_EQ(base->live_blocks(), 1u);
  EXPECT_EQ(buddy.reserved_bytes(), kMiB);
  buddy.Free(small);
}

TEST(BuddyAllocatorTest, ExplicitMaxChunkBytes) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  BuddyAllocator::Options o = testing::FixedBuddyOptions(kMiB, kMiB);
  o.max_chunk_bytes = 64 * kKiB;
  BuddyAllocator buddy(base, o);
  void* a = buddy.Alloc(64 * kKiB);  // at the limit: pooled
  void* b = buddy.Alloc(64 * kKiB + 1);
  EXPECT_THAT(base->requests(), ElementsAre(kMiB, 64 * kKiB + 256));
  buddy.Free(a);
  buddy.Free(b);
}

TEST(BuddyAllocatorTest, ReleaseReturnsExactlyTheUntouchedChunks) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  BuddyAllocator buddy(base, testing::FixedBuddyOptions(kMiB, kMiB));
  void* a = buddy.Alloc(kMiB);        // chunk 1, full
  void* b = buddy.Alloc(kMiB);        // chunk 2, full
  void* c = buddy.Alloc(512 * kKiB);  // chunk 3, half
  void* d = buddy.Alloc(256 * kKiB);  // chunk 3
  ASSERT_EQ(base->live_blocks(), 3u);
  EXPECT_EQ(buddy.Release(), 0u);
  buddy.Free(b);
  buddy.Free(c);  // chunk 3 still has d
  EXPECT_EQ(buddy.Release(), kMiB);
  EXPECT_EQ(base->live_blocks(), 2u);
  EXPECT_EQ(buddy.NumChunks(), 2u);
  EXPECT_EQ(buddy.reserved_bytes(), 2 * kMiB);
  // Live blocks are unaffected.
  std::memset(a, 1, kMiB);
  std::memset(d, 2, 256 * kKiB);
  buddy.Free(a);
  buddy.Free(d);
  EXPECT_EQ(buddy.Release(), 2 * kMiB);
  EXPECT_EQ(base->live_blocks(), 0u);
  EXPECT_EQ(buddy.reserved_bytes(), 0u);
  EXPECT_EQ(buddy.NumFreeBlocks(), 0u);
  EXPECT_EQ(buddy.Release(), 0u);
  // The pool grows again after a full release; sizing now uses reallocate_bytes.
  void* e = buddy.Alloc(kKiB);
  EXPECT_EQ(base->live_blocks(), 1u);
  buddy.Free(e);
}

TEST(BuddyAllocatorTest, DestructorReturnsEverything) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  {
    BuddyAllocator buddy(base, testing::FixedBuddyOptions(kMiB, kMiB));
    buddy.Free(buddy.Alloc(kKiB));
    buddy.Alloc(2 * kMiB);  // a bypassing block left live on purpose
    buddy.Alloc(kKiB);      // and a pooled one
    EXPECT_EQ(base->live_blocks(), 2u);
  }
  EXPECT_EQ(base->live_blocks(), 0u);
}

struct BadOption {
  const char* name;
  std::function<void(BuddyAllocator::Options&)> mutate;
  const char* value;
};

TEST(BuddyAllocatorTest, RejectsInvalidOptions) {
  const std::vector<BadOption> cases = {
      {"fraction", [](auto& o) { o.fraction = 0; }, "= 0 "},
      {"fraction", [](auto& o) { o.fraction = 1.5; }, "= 1.5 "},
      {"fraction", [](auto& o) { o.fraction = -0.1; }, "= -0.1 "},
      {"fraction", [](auto& o) { o.fraction = std::nan(""); }, "= nan"},
      {"min_block_bytes", [](auto& o) { o.min_block_bytes = 300; }, "= 300 "},
      {"min_block_bytes", [](auto& o) { o.min_block_bytes = 0; }, "= 0 "},
      {"chunk_granularity", [](auto& o) { o.chunk_granularity = 3 * kMiB; }, "= 3145728 "},
      {"max_chunk_bytes", [](auto& o) { o.max_chunk_bytes = 100; }, "= 100 "},
      {"available_bytes", [](auto& o) { o.available_bytes = nullptr; }, "<empty>"},
      {"available_bytes",
       [](auto& o) {
         o.available_bytes = nullptr;
         o.initial_bytes = kMiB;
       },
       "<empty>"},
  };
  auto base = std::make_shared<testing::RecordingAllocator>();
  for (const BadOption& c : cases) {
    BuddyAllocator::Options o;
    o.available_bytes = [] { return kMiB; };
    c.mutate(o);
    try {
      BuddyAllocator buddy(base, o);
      ADD_FAILURE() << "accepted a bad " << c.name;
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr(c.name));
      EXPECT_THAT(e.what(), HasSubstr(c.value));
      EXPECT_THAT(e.what(), HasSubstr("allowed"));
    }
  }
  // Fixed sizes need no callback; fraction 1 is allowed.
  BuddyAllocator::Options fixed = testing::FixedBuddyOptions(kMiB, kMiB);
  fixed.fraction = 1.0;
  EXPECT_NO_THROW(BuddyAllocator(base, fixed));
  EXPECT_THROW(BuddyAllocator(nullptr, fixed), std::invalid_argument);
}

TEST(BuddyAllocatorTest, BadAllocWhenUnderlyingIsExhausted) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  auto limited = std::make_shared<testing::LimitedAllocator>(base, 3 * kMiB);
  BuddyAllocator::Options o = testing::FixedBuddyOptions(2 * kMiB, 2 * kMiB);
  BuddyAllocator buddy(limited, o);
  void* a = buddy.Alloc(2 * kMiB);
  try {
    buddy.Alloc(2 * kMiB);
    FAIL() << "expected BadAlloc";
  } catch (const allocation::BadAlloc& e) {
    EXPECT_EQ(e.requested_bytes(), 2 * kMiB);
    EXPECT_THAT(e.what(), HasSubstr("out of memory"));
    // The pool adds what it holds.
    EXPECT_EQ(e.allocated_bytes(), 2 * kMiB);
    EXPECT_EQ(e.reserved_bytes(), 2 * kMiB);
    EXPECT_THAT(e.what(), HasSubstr("allocated by strata"));
  }
  // The failed refill left the pool consistent.
  EXPECT_EQ(buddy.reserved_bytes(), 2 * kMiB);
  EXPECT_EQ(buddy.NumChunks(), 1u);
  buddy.Free(a);
  void* again = buddy.Alloc(2 * kMiB);
  EXPECT_EQ(again, a);
  buddy.Free(again);

  // Bypassing requests fail the same way.
  EXPECT_THROW(buddy.Alloc(4 * kMiB), allocation::BadAlloc);
  // Injected failures of the bottom layer too: the planned refill and the fallback both fail.
  buddy.Release();
  base->FailNext(2);
  try {
    buddy.Alloc(kKiB);
    FAIL() << "expected BadAlloc";
  } catch (const allocation::BadAlloc& e) {
    EXPECT_THAT(e.what(), HasSubstr("injected by test"));
    EXPECT_EQ(e.requested_bytes(), kKiB);  // the fallback's size
  }
  EXPECT_EQ(buddy.reserved_bytes(), 0u);
}

TEST(BuddyAllocatorTest, FallsBackToTheRequestWhenABigRefillFails) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  auto limited = std::make_shared<testing::LimitedAllocator>(base, 3 * kMiB);
  BuddyAllocator::Options o = testing::FixedBuddyOptions(2 * kMiB, 4 * kMiB);
  o.max_chunk_bytes = 4 * kMiB;
  o.chunk_granularity = 512 * kKiB;
  BuddyAllocator buddy(limited, o);
  void* a = buddy.Alloc(2 * kMiB);
  void* b = buddy.Alloc(100);  // planned 4 MiB exceeds the limit: 512 KiB instead
  EXPECT_THAT(base->requests(), ElementsAre(2 * kMiB, 512 * kKiB));
  EXPECT_EQ(buddy.reserved_bytes(), 2 * kMiB + 512 * kKiB);
  buddy.Free(a);
  buddy.Free(b);
}

TEST(BuddyAllocatorTest, RejectsUnknownPointersAndAbsurdSizes) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  BuddyAllocator buddy(base, testing::FixedBuddyOptions(kMiB, kMiB));
  int local = 0;
  EXPECT_THROW(buddy.Free(&local), std::invalid_argument);
  void* a = buddy.Alloc(100);
  buddy.Free(a);
  try {
    buddy.Free(a);
    FAIL() << "double free accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("already freed"));
  }
  try {
    buddy.Alloc(std::numeric_limits<std::size_t>::max() - 10);
    FAIL() << "overflowing size accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("overflows"));
  }
}

// Random sizes, each live block filled with its own pattern; patterns are checked at free and
// the live intervals must never overlap.
TEST(BuddyAllocatorTest, RandomWorkloadNeverOverlaps) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  BuddyAllocator::Options o = testing::FixedBuddyOptions(256 * kKiB, 128 * kKiB);
  o.max_chunk_bytes = 256 * kKiB;
  BuddyAllocator buddy(base, o);
  std::mt19937 rng(1234);
  struct Live {
    std::size_t size;
    unsigned char tag;
  };
  std::map<char*, Live> live;
  auto check = [](char* p, const Live& l) {
    for (std::size_t i = 0; i < l.size; ++i) {
      if (static_cast<unsigned char>(p[i]) != l.tag) return false;
    }
    return true;
  };
  for (int step = 0; step < 20000; ++step) {
    const bool alloc = live.empty() || (rng() % 100) < 55;
    if (alloc) {
      std::size_t size = 1 + rng() % (rng() % 10 == 0 ? 300 * kKiB : 8 * kKiB);
      BuddyAllocator::Span s = buddy.AllocSpan(size);
      ASSERT_GE(s.size, size);
      ASSERT_EQ(s.size % 256, 0u);
      char* p = P(s.ptr);
      auto next = live.lower_bound(p);
      if (next != live.end()) {
        ASSERT_LE(p + size, next->first) << "overlaps the next block";
      }
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second.size, p) << "overlaps the previous block";
      }
      const unsigned char tag = static_cast<unsigned char>(step);
      std::memset(p, tag, size);
      live[p] = {size, tag};
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      ASSERT_TRUE(check(it->first, it->second)) << "block was overwritten";
      buddy.Free(it->first);
      live.erase(it);
    }
  }
  for (auto& [p, l] : live) {
    ASSERT_TRUE(check(p, l));
    buddy.Free(p);
  }
  EXPECT_EQ(buddy.allocated_bytes(), 0u);
  EXPECT_EQ(buddy.NumLiveBlocks(), 0u);
  buddy.Release();
  EXPECT_EQ(base->live_blocks(), 0u);
  EXPECT_EQ(buddy.NumFreeBlocks(), 0u);
}

TEST(BuddyAllocatorTest, StatsIdentities) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  BuddyAllocator buddy(base, testing::FixedBuddyOptions(2 * kMiB, 2 * kMiB));
  void* a = buddy.Alloc(kKiB);
  void* b = buddy.Alloc(kKiB);
  void* c = buddy.Alloc(kKiB);
  void* huge = buddy.Alloc(3 * kMiB);
  buddy.Free(b);  // a hole between a and c, plus the tail: two inactive split blocks

  allocation::MemoryStats s;
  buddy.CollectStats(&s);
  using allocation::kAggregate;
  using allocation::kLargePool;
  using allocation::kSmallPool;
  EXPECT_EQ(s.num_device_alloc, 2);
  EXPECT_EQ(s.num_device_free, 0);
  EXPECT_EQ(s.segment[kAggregate].current, s.num_device_alloc - s.num_device_free);
  EXPECT_EQ(s.segment[kLargePool].current, 2);  // 2 MiB and 3 MiB segments are large
  EXPECT_EQ(s.segment[kSmallPool].current, 0);
  EXPECT_EQ(s.reserved_bytes[kAggregate].current,
            static_cast<std::int64_t>(buddy.reserved_bytes()));
  EXPECT_EQ(s.reserved_bytes[kAggregate].current, static_cast<std::int64_t>(base->live_bytes()));
  EXPECT_EQ(s.inactive_split[kAggregate].current, 2);
  // Every byte reserved is either used or in an inactive split block here.
  EXPECT_EQ(s.inactive_split_bytes[kAggregate].current +
                static_cast<std::int64_t>(buddy.allocated_bytes()),
            s.reserved_bytes[kAggregate].current);
  for (auto* arr : {&s.segment, &s.reserved_bytes, &s.inactive_split, &s.inactive_split_bytes}) {
    EXPECT_EQ((*arr)[kAggregate].current, (*arr)[kSmallPool].current + (*arr)[kLargePool].current);
  }

  buddy.Free(huge);
  buddy.Free(a);
  buddy.Free(c);  // the chunk is whole again: no inactive split block
  buddy.Release();
  allocation::MemoryStats t;
  buddy.CollectStats(&t);
  EXPECT_EQ(t.num_device_free, 2);
  EXPECT_EQ(t.segment[kAggregate].current, 0);
  EXPECT_EQ(t.segment[kAggregate].peak, 2);
  EXPECT_EQ(t.reserved_bytes[kAggregate].peak, static_cast<std::int64_t>(5 * kMiB));
  EXPECT_EQ(t.reserved_bytes[kAggregate].freed, static_cast<std::int64_t>(5 * kMiB));
  EXPECT_EQ(t.inactive_split[kAggregate].current, 0);
  EXPECT_EQ(t.inactive_split_bytes[kAggregate].current, 0);

  buddy.ResetPeakStats();
  buddy.ResetAccumulatedStats();
  allocation::MemoryStats u;
  buddy.CollectStats(&u);
  EXPECT_EQ(u.segment[kAggregate].peak, 0);
  EXPECT_EQ(u.reserved_bytes[kAggregate].allocated, 0);
  EXPECT_EQ(u.num_device_alloc, 0);
  EXPECT_EQ(u.num_device_free, 0);
}

}  // namespace
}  // namespace strata::strategies
