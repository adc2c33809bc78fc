// The auto-growth pool's free and reuse, each case with quick reuse off and on (it must not
// change anything a user can see), the randomized model check, and quick reuse's invisibility
// over long random traffic (the same placement and figures at every step).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "allocation/bad_alloc.h"
#include "allocation/memory_stats.h"
#include "strategies/auto_growth_best_fit_allocator.h"
#include "support/auto_growth_fixture.h"

// In the fixture's namespace: its names need no using-declarations.
namespace strata::strategies::auto_growth_test {
namespace {

// ---- free + reuse, with and without quick reuse -----------------------------------------------

// Quick reuse must not change anything these tests can see: each runs with it off and on.
class AutoGrowthReuseTest : public ::testing::TestWithParam<bool> {
 protected:
  Options ReuseOptions() const {
    Options o = TwoPoolOptions();
    o.quick_reuse = GetParam();
    return o;
  }
  // ReuseOptions() with the release policy `policy` (free_idle_chunk, ...) on.
  Options ReuseOptionsWith(bool Options::*policy) const {
    Options o = ReuseOptions();
    o.*policy = true;
    return o;
  }
};

INSTANTIATE_TEST_SUITE_P(QuickReuse, AutoGrowthReuseTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "On" : "Off";
                         });

TEST_P(AutoGrowthReuseTest, FreedBlockComesBackCleanAndCountsAsCoalesced) {
  Fixture f(ReuseOptions());
  AllocationPtr a = f.alloc->Allocate(1000);
  AllocationPtr b = f.alloc->Allocate(1000);
  char* b_ptr = P(b);
  b->set_requested_size(1000);
  const auto tail = static_cast<std::int64_t>(2 * kMiB - 2048);
  // b borders the free tail: while it waits for reuse the figures are those of b + tail.
  b.reset();
  MemoryStats s = f.Stats();
  EXPECT_EQ(s.inactive_split[allocation::kAggregate].current, 1);
  EXPECT_EQ(s.inactive_split_bytes[allocation::kAggregate].current, tail + 1024);
  EXPECT_EQ(f.alloc->allocated_bytes(), 1024u);
  AllocationPtr c = f.alloc->Allocate(900);
  EXPECT_EQ(P(c), b_ptr);
  EXPECT_EQ(c->size(), 1024u);
  EXPECT_EQ(c->requested_size(), 900u);  // its own request, nothing of the previous owner
  ASSERT_EQ(c->num_decorators(), 1);
  EXPECT_EQ(c->decorator(0), f.alloc.get());
  s = f.Stats();
  EXPECT_EQ(s.inactive_split[allocation::kAggregate].current, 1);
  EXPECT_EQ(s.inactive_split_bytes[allocation::kAggregate].current, tail);
  // A block between live ones is a hole of its own.
  AllocationPtr d = f.alloc->Allocate(1000);
  c.reset();
  s = f.Stats();
  EXPECT_EQ(s.inactive_split[allocation::kAggregate].current, 2);
  EXPECT_EQ(s.inactive_split_bytes[allocation::kAggregate].current, tail - 1024 + 1024);
  ExpectConsistent(f);
  AllocationPtr e = f.alloc->Allocate(1024);
  EXPECT_EQ(P(e), b_ptr);
  EXPECT_EQ(f.recording->num_allocs(), 1u);
}

TEST_P(AutoGrowthReuseTest, BlockNextToFreeSpaceIsNotReusedWhenBestFitPrefersAHole) {
  Fixture f(ReuseOptions());
  AllocationPtr hole = f.alloc->Allocate(64 * kKiB);
  AllocationPtr sep = f.alloc->Allocate(8 * kKiB);
  AllocationPtr b = f.alloc->Allocate(64 * kKiB);  // followed by the free tail
  char* hole_ptr = P(hole);
  char* b_ptr = P(b);
  hole.reset();
  b.reset();
  // Best fit over the coalesced blocks: the 64 KiB hole, not the front of b + tail.
  AllocationPtr x = f.alloc->Allocate(64 * kKiB);
  EXPECT_EQ(P(x), hole_ptr);
  // And b was coalesced with the tail: a request spanning both starts at b.
  AllocationPtr y = f.alloc->Allocate(kMiB);
  EXPECT_EQ(P(y), b_ptr);
  EXPECT_EQ(f.recording->num_allocs(), 1u);
}

TEST_P(AutoGrowthReuseTest, LastLiveBlockReleasesItsChunkDespiteParkedBlocks) {
  Fixture f(ReuseOptionsWith(&Options::free_idle_chunk));
  AllocationPtr a = f.alloc->Allocate(1000);
  AllocationPtr b = f.alloc->Allocate(1000);
  AllocationPtr c = f.alloc->Allocate(1000);
  c.reset();  // next to the free tail
  a.reset();  // at the chunk's start, before live b
  EXPECT_EQ(f.recording->live_blocks(), 1u);
  EXPECT_EQ(f.alloc->allocated_bytes(), 1024u);
  b.reset();
  EXPECT_EQ(f.recording->live_blocks(), 0u);
  EXPECT_EQ(f.alloc->reserved_bytes(), 0u);
  EXPECT_EQ(f.alloc->num_chunks(), 0u);
  const MemoryStats s = f.Stats();
  EXPECT_EQ(s.inactive_split[allocation::kAggregate].current, 0);
  EXPECT_EQ(s.inactive_split_bytes[allocation::kAggregate].current, 0);
}

TEST_P(AutoGrowthReuseTest, ReleaseAndOtherSizesCoalesceParkedBlocks) {
  Fixture f(ReuseOptions());
  std::vector<AllocationPtr> v;
  for (int i = 0; i < 8; ++i) v.push_back(f.alloc->Allocate(256 * kKiB));  // fills 2 MiB
  char* second = P(v[1]);
  v[1].reset();
  v[3].reset();
  v[5].reset();
  ExpectConsistent(f);
  EXPECT_EQ(f.Stats().inactive_split[allocation::kAggregate].current, 3);
  // A request of another size sees the holes coalesced with their free neighbours.
  v[2].reset();
  AllocationPtr big = f.alloc->Allocate(768 * kKiB);  // exactly blocks 1..3
  EXPECT_EQ(P(big), second);
  big.reset();
  v.clear();
  ExpectReleasesEverything(f, 2 * kMiB);
}

// ---- reuse of a chunk's last live block ---------------------------------------------------

TEST_P(AutoGrowthReuseTest, LastLiveBlockOfAChunkIsReusedInPlace) {
  Fixture f(ReuseOptions());
  AllocationPtr a = f.alloc->Allocate(4096);
  char* a_ptr = P(a);
  a->set_requested_size(4096);
  for (int i = 0; i < 100; ++i) {
    a.reset();  // nothing else is live in the chunk
    EXPECT_EQ(f.alloc->allocated_bytes(), 0u);
    a = f.alloc->Allocate(4000);
    ASSERT_EQ(P(a), a_ptr);
    ASSERT_EQ(a->size(), 4096u);
    ASSERT_EQ(a->requested_size(), 4000u);  // its own request (the pool records it)
    ASSERT_EQ(a->num_decorators(), 1);
  }
  // The same for a block that is the whole chunk (large pool, no split).
  AllocationPtr w = f.alloc->Allocate(2 * kMiB);
  char* w_ptr = P(w);
  for (int i = 0; i < 10; ++i) {
    w.reset();
    w = f.alloc->Allocate(2 * kMiB);
    ASSERT_EQ(P(w), w_ptr);
  }
  EXPECT_EQ(f.recording->num_allocs(), 2u);
  ExpectConsistent(f);
  // Another size sees the 4 KiB chunk idle and whole: 1 MiB starts at its base.
  a.reset();
  AllocationPtr b = f.alloc->Allocate(kMiB);
  EXPECT_EQ(P(b), a_ptr);
  EXPECT_EQ(f.recording->num_allocs(), 2u);
  b.reset();
  w.reset();
  ExpectReleasesEverything(f, 4 * kMiB);
}

TEST_P(AutoGrowthReuseTest, StatisticsOfAParkedLastBlockAreThoseOfTheWholeChunk) {
  Fixture f(ReuseOptions());
  const auto tail = static_cast<std::int64_t>(2 * kMiB - 1024);
  AllocationPtr a = f.alloc->Allocate(1000);
  a.reset();  // coalesced with the tail it would be the whole chunk: no split
  MemoryStats s = f.Stats();
  const auto& count = s.inactive_split[allocation::kAggregate];
  const auto& bytes = s.inactive_split_bytes[allocation::kAggregate];
  EXPECT_EQ(count.current, 0);
  EXPECT_EQ(count.allocated, 1);
  EXPECT_EQ(count.freed, 1);
  EXPECT_EQ(count.peak, 1);
  EXPECT_EQ(bytes.current, 0);
  EXPECT_EQ(bytes.allocated, tail);
  EXPECT_EQ(bytes.freed, tail);
  EXPECT_EQ(s.segment[allocation::kAggregate].current, 1);
  EXPECT_EQ(s.reserved_bytes[allocation::kAggregate].current, static_cast<std::int64_t>(2 * kMiB));
  ExpectConsistent(f);
  // Taken back: the whole chunk split again, as TakeBlock would count it.
  a = f.alloc->Allocate(1000);
  s = f.Stats();
  EXPECT_EQ(s.inactive_split[allocation::kAggregate].current, 1);
  EXPECT_EQ(s.inactive_split[allocation::kAggregate].allocated, 2);
  EXPECT_EQ(s.inactive_split_bytes[allocation::kAggregate].current, tail);
  EXPECT_EQ(s.inactive_split_bytes[allocation::kAggregate].allocated, 2 * tail);
  ExpectConsistent(f);
  // A block that is the whole chunk is never a split, parked or not: nothing changes.
  AllocationPtr w = f.alloc->Allocate(4 * kMiB);
  const MemoryStats before = f.Stats();
  w.reset();
  for (int i = 0; i < 2; ++i) {
    s = f.Stats();
    for (auto [now, then] : {std::pair{&s.inactive_split, &before.inactive_split},
                             std::pair{&s.inactive_split_bytes, &before.inactive_split_bytes}}) {
      for (int p = 0; p < allocation::kNumStatPools; ++p) {
        EXPECT_EQ((*now)[p].current, (*then)[p].current);
        EXPECT_EQ((*now)[p].allocated, (*then)[p].allocated);
        EXPECT_EQ((*now)[p].freed, (*then)[p].freed);
      }
    }
    if (i == 0) w = f.alloc->Allocate(4 * kMiB);
  }
  ExpectConsistent(f);
}

TEST_P(AutoGrowthReuseTest, ChunksEmptiedByParkedFreesGoIdleInFreeOrder) {
  Options o = ReuseOptions();
  o.small_size = 0;
  o.memory_limit = 16 * kMiB;
  o.garbage_collection_threshold = 0.5;  // 8 MiB
  Fixture f(o);
  AllocationPtr a = f.alloc->Allocate(2 * kMiB);  // chunk A, the whole of it
  AllocationPtr b1 = f.alloc->Allocate(kMiB);     // chunk B ...
  AllocationPtr b2 = f.alloc->Allocate(kMiB);     // ... filled by b1 and b2
  AllocationPtr c = f.alloc->Allocate(2 * kMiB);  // chunk C
  void* a_ptr = P(a);
  void* b_ptr = P(b1);
  void* c_ptr = P(c);
  ASSERT_EQ(P(b2), P(b1) + kMiB);
  a.reset();   // A's last block: waits for reuse
  b2.reset();  // waits too
  b1.reset();  // cannot wait (its next does): A goes idle, then B
  c.reset();   // C's last block: waits
  EXPECT_EQ(f.alloc->reserved_bytes(), 6 * kMiB);
  EXPECT_TRUE(f.log->freed().empty());
  AllocationPtr d = f.alloc->Allocate(3 * kMiB);  // 6 + 4 > 8: the longest idle goes, A
  EXPECT_THAT(f.log->freed(), ::testing::ElementsAre(a_ptr));
  AllocationPtr e = f.alloc->Allocate(3 * kMiB);  // 8 + 4 > 8: B, then C
  EXPECT_THAT(f.log->freed(), ::testing::ElementsAre(a_ptr, b_ptr, c_ptr));
  EXPECT_EQ(f.alloc->reserved_bytes(), 8 * kMiB);
  ExpectConsistent(f);
}

TEST_P(AutoGrowthReuseTest, ParkedLastBlockIsSeenIdleByEveryRelease) {
  {  // Release
    Fixture f(ReuseOptions());
    f.alloc->Allocate(1000).reset();
    ExpectReleasesEverything(f, 2 * kMiB);
    EXPECT_EQ(f.alloc->num_chunks(), 0u);
  }
  {  // free_idle_chunk: released at the free, every time
    Fixture f(ReuseOptionsWith(&Options::free_idle_chunk));
    for (int i = 0; i < 3; ++i) {
      f.alloc->Allocate(1000).reset();
      EXPECT_EQ(f.recording->live_blocks(), 0u);
      EXPECT_EQ(f.alloc->reserved_bytes(), 0u);
      f.alloc->Allocate(2 * kMiB).reset();
      EXPECT_EQ(f.recording->live_blocks(), 0u);
    }
    EXPECT_EQ(f.recording->num_allocs(), 6u);
  }
  {  // free_when_no_cache_hit
    Fixture f(ReuseOptionsWith(&Options::free_when_no_cache_hit));
    AllocationPtr a = f.alloc->Allocate(2 * kMiB);
    void* a_ptr = P(a);
    a.reset();
    AllocationPtr miss = f.alloc->Allocate(4 * kMiB);
    EXPECT_THAT(f.log->freed(), ::testing::ElementsAre(a_ptr));
    EXPECT_EQ(f.recording->live_blocks(), 1u);
  }
  {  // release_idle_before_new_peak
    Fixture f(ReuseOptionsWith(&Options::release_idle_before_new_peak));
    AllocationPtr a = f.alloc->Allocate(2 * kMiB);
    AllocationPtr x = f.alloc->Allocate(2 * kMiB);
    void* a_ptr = P(a);
    a.reset();
    AllocationPtr y = f.alloc->Allocate(4 * kMiB);  // 4 + 4 > 4: a's chunk goes first
    EXPECT_THAT(f.log->freed(), ::testing::ElementsAre(a_ptr));
    EXPECT_EQ(f.alloc->reserved_bytes(), 6 * kMiB);
  }
  {  // destruction: the parked block's chunk is idle, not reported as still allocated
    auto recording = std::make_shared<testing::RecordingAllocator>();
    {
      AutoGrowthBestFitAllocator alloc(recording, platform::CPUPlace(), ReuseOptions());
      alloc.Allocate(1000).reset();
      alloc.Allocate(3 * kMiB).reset();
      EXPECT_EQ(recording->live_blocks(), 2u);
    }
    EXPECT_EQ(recording->live_blocks(), 0u);
  }
}

// ---- randomized and concurrent ----------------------------------------------------------------

std::size_t RandomSize(std::mt19937_64& rng) {
  switch (rng() % 4) {
    case 0:
      return rng() % 4096;
    case 1:
      return rng() % kMiB;
    case 2:
      return rng() % (4 * kMiB);
    default:
      return rng() % (24 * kMiB);
  }
}

void Fill(const AllocationPtr& a, std::uint64_t tag) {
  // Pattern at the start, the end and (cheaply) a few places between.
  const std::size_t n = a->size();
  auto* p = static_cast<unsigned char*>(a->ptr());
  for (std::size_t off : {std::size_t{0}, n / 3, n / 2, n - 8}) {
    std::memcpy(p + (off & ~std::size_t{7}), &tag, sizeof(tag));
  }
}

bool Check(const AllocationPtr& a, std::uint64_t tag) {
  const std::size_t n = a->size();
  auto* p = static_cast<unsigned char*>(a->ptr());
  for (std::size_t off : {std::size_t{0}, n / 3, n / 2, n - 8}) {
    std::uint64_t got;
    std::memcpy(&got, p + (off & ~std::size_t{7}), sizeof(got));
    if (got != tag) return false;
  }
  return true;
}

TEST_P(AutoGrowthReuseTest, RandomizedAgainstModel) {
  for (int variant = 0; variant < 4; ++variant) {
    Options o = ReuseOptions();
    if (variant == 1) {
      o.max_split_size = 8 * kMiB;
      o.roundup_power2_divisions = AutoGrowthBestFitAllocator::UniformRoundup(4);
      o.release_idle_before_new_peak = true;
    }
    if (variant == 2) {
      o.chunk_size = 32 * kMiB;
      o.free_when_no_cache_hit = true;
      o.small_size = 0;
    }
    if (variant == 3) {
      o.memory_limit = 2048 * kMiB;
      o.garbage_collection_threshold = 0.1;
      o.free_idle_chunk = false;
      o.alignment = 256;
    }
    Fixture f(o, 512);
    std::mt19937_64 rng(1234 + variant);
    std::map<std::uintptr_t, std::pair<AllocationPtr, std::uint64_t>> live;  // by address
    std::uint64_t next_tag = 1;
    std::size_t model_allocated = 0;
    for (int step = 0; step < 4000; ++step) {
      if (live.empty() || (live.size() < 64 && rng() % 100 < 55)) {
        const std::size_t size = RandomSize(rng);
        AllocationPtr a = f.alloc->Allocate(size);
        ASSERT_GE(a->size(), size);
        ASSERT_EQ(a->size() % o.alignment, 0u);
        const auto addr = reinterpret_cast<std::uintptr_t>(a->ptr());
        // No overlap with the neighbours in address order.
        auto it = live.lower_bound(addr);
        if (it != live.end()) {
          ASSERT_GE(it->first, addr + a->size());
        }
        if (it != live.begin()) {
          auto prev = std::prev(it);
          ASSERT_LE(prev->first + prev->second.first->size(), addr);
        }
        model_allocated += a->size();
        Fill(a, next_tag);
        live.emplace(addr, std::make_pair(std::move(a), next_tag++));
      } else {
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        ASSERT_TRUE(Check(it->second.first, it->second.second));
        model_allocated -= it->second.first->size();
        live.erase(it);
      }
      ASSERT_EQ(f.alloc->allocated_bytes(), model_allocated);
      if (step % 500 == 0) {
        ExpectConsistent(f);
        if (step % 1000 == 0) f.alloc->Release(platform::CUDAPlace(0));
      }
    }
    for (auto& [addr, entry] : live) ASSERT_TRUE(Check(entry.first, entry.second));
    live.clear();
    ExpectConsistent(f);
    EXPECT_EQ(f.Stats().inactive_split[0].current, 0);
    f.alloc->Release(platform::CUDAPlace(0));
    EXPECT_EQ(f.recording->live_blocks(), 0u) << variant;
    EXPECT_EQ(f.alloc->reserved_bytes(), 0u);
  }
}

TEST_P(AutoGrowthReuseTest, DestructionFreesEveryChunk) {
  auto recording = std::make_shared<testing::RecordingAllocator>();
  {
    AutoGrowthBestFitAllocator alloc(recording, platform::CPUPlace(), ReuseOptions());
    AllocationPtr a = alloc.Allocate(1000);
    AllocationPtr b = alloc.Allocate(5 * kMiB);
    b.reset();
    a.reset();
  }
  EXPECT_EQ(recording->live_blocks(), 0u);
}

// The same random sequence with quick reuse off and on: the same placement (offset within the
// same chunk), the same device traffic and the same statistics after every step.
TEST(AutoGrowthBestFitAllocatorTest, QuickReuseIsInvisible) {
  // Two pools with small chunks; the production options (20 MiB chunks: blocks of more than half
  // a chunk before a small free rest); and those with max_split_size. Several seeds each: a
  // divergence may show thousands of steps after its cause (a bucket's order).
  for (int seed = 0; seed < 8; ++seed)
    for (int variant = 0; variant < 3; ++variant) {
      Options off = variant == 0 ? TwoPoolOptions() : Options();
      if (variant == 2) off.max_split_size = 22 * kMiB;
      off.quick_reuse = false;
      Options on = off;
      on.quick_reuse = true;
      Fixture a(off, 512), b(on, 512);
      std::map<void*, void*> chunk_of_a;  // chunk base in a -> the same chunk's base in b
      std::vector<std::pair<AllocationPtr, AllocationPtr>> live;
      std::mt19937_64 rng(99 + variant + 7919 * seed);
      std::size_t last_size = 0;
      for (int step = 0; step < 6000; ++step) {
        if (live.empty() || (live.size() < 40 && rng() % 100 < 50)) {
          // Often the size freed last, as a loop would.
          const std::size_t size = rng() % 3 == 0 && last_size != 0 ? last_size : RandomSize(rng);
          const std::size_t grown_a = a.recording->num_allocs();
          const std::size_t grown_b = b.recording->num_allocs();
          AllocationPtr x = a.alloc->Allocate(size);
          AllocationPtr y = b.alloc->Allocate(size);
          ASSERT_EQ(a.recording->num_allocs() - grown_a, b.recording->num_allocs() - grown_b);
          if (a.recording->num_allocs() != grown_a) {
            chunk_of_a[x->base_ptr()] = y->base_ptr();  // a new chunk (the device may reuse bases)
          }
          ASSERT_EQ(chunk_of_a[x->base_ptr()], y->base_ptr()) << step;
          ASSERT_EQ(P(x) - static_cast<char*>(x->base_ptr()),
                    P(y) - static_cast<char*>(y->base_ptr()))
              << step;
          ASSERT_EQ(x->size(), y->size());
          live.emplace_back(std::move(x), std::move(y));
        } else {
          const std::size_t k = rng() % live.size();
          last_size = live[k].first->size();
          std::swap(live[k], live.back());
          live.pop_back();
        }
        if (step % 1500 == 1499) {
          ASSERT_EQ(a.alloc->Release(platform::CUDAPlace(0)),
                    b.alloc->Release(platform::CUDAPlace(0)));
        }
        const MemoryStats sa = a.Stats(), sb = b.Stats();
        for (auto [x, y] : {std::pair{&sa.segment, &sb.segment},
                            std::pair{&sa.reserved_bytes, &sb.reserved_bytes},
                            std::pair{&sa.inactive_split, &sb.inactive_split},
                            std::pair{&sa.inactive_split_bytes, &sb.inactive_split_bytes}}) {
          for (int p = 0; p < allocation::kNumStatPools; ++p) {
            ASSERT_EQ((*x)[p].current, (*y)[p].current) << step;
            ASSERT_EQ((*x)[p].peak, (*y)[p].peak) << step;
            ASSERT_EQ((*x)[p].allocated, (*y)[p].allocated) << step;
            ASSERT_EQ((*x)[p].freed, (*y)[p].freed) << step;
          }
        }
        ASSERT_EQ(sa.num_device_alloc, sb.num_device_alloc);
        ASSERT_EQ(sa.num_device_free, sb.num_device_free);
        ASSERT_EQ(a.alloc->allocated_bytes(), b.alloc->allocated_bytes());
      }
      live.clear();
      ExpectConsistent(a);
      ExpectConsistent(b);
    }
}

}  // namespace
}  // namespace strata::strategies::auto_growth_test
