#include "layers/stat_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "allocation/bad_alloc.h"
#include "allocation/decorating_allocator.h"
#include "support/stats.h"
#include "support/test_allocators.h"
#include "support/threads.h"

namespace strata::layers {

using allocation::Allocation;
using allocation::AllocationPtr;
using allocation::Allocator;
using allocation::BadAlloc;
using allocation::DecoratingAllocator;
using allocation::kAggregate;
using allocation::kLargePool;
using allocation::kNumStatPools;
using allocation::kSmallPool;
using allocation::MemoryStats;
using allocation::PoolOf;
using allocation::StatArray;
using allocation::StatValue;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Rounds every request up to a multiple of 512, as a pooling strategy would, so that
// allocated_bytes (rounded) and requested_bytes differ.
class RoundingAllocator : public DecoratingAllocator {
 public:
  explicit RoundingAllocator(std::shared_ptr<Allocator> u)
      : DecoratingAllocator(std::move(u), "RoundingAllocator") {}
  const char* Name() const override { return "rounding"; }
  static std::size_t Round(std::size_t n) { return (n + 511) / 512 * 512; }

 protected:
  Allocation* AllocateImpl(std::size_t size) override {
    return underlying().Allocate(Round(size)).release();
  }
};

// Reports fixed figures of its own and counts the resets it receives.
class StatsSource : public DecoratingAllocator {
 public:
  explicit StatsSource(std::shared_ptr<Allocator> u)
      : DecoratingAllocator(std::move(u), "StatsSource") {}
  const char* Name() const override { return "stats_source"; }
  void CollectStats(MemoryStats* stats) const override {
    stats->segment[kAggregate].current += 7;
    stats->active[kAggregate].current += 3;  // e.g. pending frees of a lower layer
    stats->num_alloc_retries += 5;
  }
  void ResetPeakStats() override { ++peak_resets; }
  void ResetAccumulatedStats() override { ++accumulated_resets; }
  int peak_resets = 0;
  int accumulated_resets = 0;

 protected:
  std::uint64_t ReleaseImpl(const platform::Place&) override { return 42; }
};

void ExpectIdentity(const StatArray& arr, const char* what) {
  for (int p = 0; p < kNumStatPools; ++p) {
    EXPECT_EQ(arr[p].allocated - arr[p].freed, arr[p].current) << what << " pool " << p;
    EXPECT_GE(arr[p].peak, arr[p].current) << what << " pool " << p;
  }
  EXPECT_EQ(arr[kSmallPool].current + arr[kLargePool].current, arr[kAggregate].current) << what;
  EXPECT_EQ(arr[kSmallPool].allocated + arr[kLargePool].allocated, arr[kAggregate].allocated)
      << what;
}

TEST(StatAllocatorTest, KnownSingleThreadSequence) {
  auto rec = std::make_shared<testing::RecordingAllocator>();
  auto stat = std::make_shared<StatAllocator>(std::make_shared<RoundingAllocator>(rec));

  AllocationPtr a = stat->Allocate(100);           // 512, small
  AllocationPtr b = stat->Allocate(2 * kMiB + 1);  // 2 MiB + 512, large
  AllocationPtr c = stat->Allocate(1000);          // 1024, small
  EXPECT_EQ(a->requested_size(), 100u);
  EXPECT_EQ(b->size(), 2 * kMiB + 512);

  MemoryStats s = testing::StatsOf(*stat);
  EXPECT_EQ(s.allocation[kAggregate].current, 3);
  EXPECT_EQ(s.allocation[kSmallPool].current, 2);
  EXPECT_EQ(s.allocation[kLargePool].current, 1);
  EXPECT_EQ(s.allocated_bytes[kAggregate].current, static_cast<std::int64_t>(2 * kMiB + 2048));
  EXPECT_EQ(s.allocated_bytes[kSmallPool].current, 1536);
  EXPECT_EQ(s.allocated_bytes[kLargePool].current, static_cast<std::int64_t>(2 * kMiB + 512));
  EXPECT_EQ(s.requested_bytes[kAggregate].current, static_cast<std::int64_t>(2 * kMiB + 1101));
  EXPECT_EQ(s.requested_bytes[kSmallPool].current, 1100);
  EXPECT_EQ(s.active_bytes[kAggregate].current, s.allocated_bytes[kAggregate].current);
  EXPECT_EQ(s.active[kLargePool].current, 1);
  EXPECT_EQ(stat->allocated_bytes_current(), static_cast<std::int64_t>(rec->live_bytes()));

  b.reset();
  AllocationPtr d = stat->Allocate(300);  // 512, small
  s = testing::StatsOf(*stat);
  EXPECT_EQ(s.allocation[kAggregate].current, 3);
  EXPECT_EQ(s.allocation[kAggregate].peak, 3);
  EXPECT_EQ(s.allocation[kSmallPool].peak, 3);
  EXPECT_EQ(s.allocation[kLargePool].peak, 1);
  EXPECT_EQ(s.allocation[kLargePool].current, 0);
  EXPECT_EQ(s.allocated_bytes[kAggregate].peak, static_cast<std::int64_t>(2 * kMiB + 2048));
  EXPECT_EQ(s.allocated_bytes[kSmallPool].peak, 2048);
  EXPECT_EQ(s.allocated_bytes[kAggregate].current, 2048);
  EXPECT_EQ(s.allocated_bytes[kAggregate].allocated, static_cast<std::int64_t>(2 * kMiB + 2560));
  EXPECT_EQ(s.allocated_bytes[kAggregate].freed, static_cast<std::int64_t>(2 * kMiB + 512));
  EXPECT_EQ(s.requested_bytes[kAggregate].peak, static_cast<std::int64_t>(2 * kMiB + 1101));
  EXPECT_EQ(s.requested_bytes[kAggregate].current, 1400);
  EXPECT_EQ(stat->allocated_bytes_peak(), static_cast<std::int64_t>(2 * kMiB + 2048));

  a.reset();
  c.reset();
  d.reset();
  s = testing::StatsOf(*stat);
  for (const StatArray* arr :
       {&s.allocation, &s.allocated_bytes, &s.requested_bytes, &s.active, &s.active_bytes}) {
    for (int p = 0; p < kNumStatPools; ++p) EXPECT_EQ((*arr)[p].current, 0);
  }
  EXPECT_EQ(s.allocation[kAggregate].allocated, 4);
  EXPECT_EQ(s.allocation[kAggregate].freed, 4);
  EXPECT_EQ(s.allocation[kAggregate].peak, 3);
  EXPECT_EQ(rec->live_blocks(), 0u);
}

TEST(StatAllocatorTest, RandomWorkloadKeepsIdentitiesAndExactPeaks) {
  auto rec = std::make_shared<testing::RecordingAllocator>();
  auto stat = std::make_shared<StatAllocator>(std::make_shared<RoundingAllocator>(rec));
  std::mt19937_64 rng(1234);
  std::vector<AllocationPtr> live;
  // Expected figures, tracked independently: [aggregate, small, large].
  std::int64_t bytes[3] = {}, bytes_peak[3] = {}, count[3] = {}, count_peak[3] = {};
  std::int64_t req[3] = {}, req_peak[3] = {};
  auto account = [&](const Allocation& a, int sign) {
    const int pool = PoolOf(a.size());
    for (int p : {0, pool}) {
      bytes[p] += sign * static_cast<std::int64_t>(a.size());
      req[p] += sign * static_cast<std::int64_t>(a.requested_size());
      count[p] += sign;
      bytes_peak[p] = std::max(bytes_peak[p], bytes[p]);
      req_peak[p] = std::max(req_peak[p], req[p]);
      count_peak[p] = std::max(count_peak[p], count[p]);
    }
  };
  for (int step = 0; step < 4000; ++step) {
    if (live.empty() || rng() % 100 < 55) {
      // Mostly small, some large (up to 40 MiB, beyond the publishing slack).
      const std::size_t size = rng() % 10 == 0 ? rng() % (40 * kMiB) : rng() % (64 * 1024);
      live.push_back(stat->Allocate(size));
      account(*live.back(), +1);
    } else {
      const std::size_t i = rng() % live.size();
      account(*live[i], -1);
      live[i] = std::move(live.back());
      live.pop_back();
    }
    if (step % 97 == 0) {
      const MemoryStats s = testing::StatsOf(*stat);
      ExpectIdentity(s.allocation, "allocation");
      ExpectIdentity(s.allocated_bytes, "allocated_bytes");
      ExpectIdentity(s.requested_bytes, "requested_bytes");
      EXPECT_LE(s.allocated_bytes[kAggregate].current,
                static_cast<std::int64_t>(rec->live_bytes()));
      for (int p = 0; p < 3; ++p) {
        EXPECT_LE(s.requested_bytes[p].current, s.allocated_bytes[p].current);
        EXPECT_EQ(s.allocated_bytes[p].current, bytes[p]) << "step " << step;
        EXPECT_EQ(s.allocated_bytes[p].peak, bytes_peak[p]) << "step " << step;
        EXPECT_EQ(s.requested_bytes[p].peak, req_peak[p]) << "step " << step;
        EXPECT_EQ(s.allocation[p].current, count[p]) << "step " << step;
        EXPECT_EQ(s.allocation[p].peak, count_peak[p]) << "step " << step;
      }
    }
  }
  live.clear();
  const MemoryStats s = testing::StatsOf(*stat);
  for (int p = 0; p < kNumStatPools; ++p) {
    EXPECT_EQ(s.allocation[p].current, 0);
    EXPECT_EQ(s.allocated_bytes[p].current, 0);
    EXPECT_EQ(s.requested_bytes[p].current, 0);
    EXPECT_EQ(s.allocated_bytes[p].peak, bytes_peak[p]);
  }
  EXPECT_EQ(rec->live_bytes(), 0u);
}

TEST(StatAllocatorTest, ResetPeakAndAccumulated) {
  auto rec = std::make_shared<testing::RecordingAllocator>();
  auto source = std::make_shared<StatsSource>(rec);
  auto stat = std::make_shared<StatAllocator>(source);
  std::vector<AllocationPtr> v;
  for (int i = 0; i < 10; ++i) v.push_back(stat->Allocate(1000));
  v.resize(4);
  EXPECT_EQ(stat->allocated_bytes().peak, 10000);

  stat->ResetPeakStats();
  EXPECT_EQ(source->peak_resets, 1);
  EXPECT_EQ(stat->allocated_bytes().peak, 4000);
  EXPECT_EQ(stat->allocation(kSmallPool).peak, 4);
  EXPECT_EQ(stat->allocation(kLargePool).peak, 0);
  v.push_back(stat->Allocate(500));
  EXPECT_EQ(stat->allocated_bytes().peak, 4500);
  v.resize(2);
  EXPECT_EQ(stat->allocated_bytes().peak, 4500);
  EXPECT_EQ(stat->requested_bytes().peak, 4500);

  stat->ResetAccumulatedStats();
  EXPECT_EQ(source->accumulated_resets, 1);
  StatValue b = stat->allocated_bytes();
  EXPECT_EQ(b.allocated, 0);
  EXPECT_EQ(b.freed, 0);
  EXPECT_EQ(b.current, 2000);
  EXPECT_EQ(b.peak, 4500);  // peaks are not accumulated figures
  v.push_back(stat->Allocate(3000));
  v.erase(v.begin());
  b = stat->allocated_bytes();
  EXPECT_EQ(b.allocated, 3000);
  EXPECT_EQ(b.freed, 1000);
  EXPECT_EQ(b.current, 4000);
  EXPECT_EQ(stat->allocation().allocated, 1);
  EXPECT_EQ(stat->allocation().freed, 1);

  stat->ResetPeakStats();
  EXPECT_EQ(stat->allocated_bytes().peak, 4000);
  v.clear();
  EXPECT_EQ(stat->allocated_bytes().peak, 4000);
  EXPECT_EQ(stat->allocated_bytes().current, 0);
  stat->ResetPeakStats();
  EXPECT_EQ(stat->allocated_bytes().peak, 0);
}

TEST(StatAllocatorTest, CollectStatsAddsToUnderlyingFiguresAndForwards) {
  auto rec = std::make_shared<testing::RecordingAllocator>();
  auto stat = std::make_shared<StatAllocator>(std::make_shared<StatsSource>(rec));
  AllocationPtr a = stat->Allocate(100);
  const MemoryStats s = testing::StatsOf(*stat);
  EXPECT_EQ(s.segment[kAggregate].current, 7);
  EXPECT_EQ(s.num_alloc_retries, 5);
  EXPECT_EQ(s.active[kAggregate].current, 4);  // 3 below + 1 here
  EXPECT_EQ(s.active_bytes[kAggregate].current, 100);
  EXPECT_EQ(stat->Release(platform::CPUPlace()), 42u);
  EXPECT_STREQ(stat->Name(), "stat");
}

// Two layers over one counter set (two streams' chains of a device): one set of figures, reported
// once, with the peak of the set rather than the sum of each layer's peak.
TEST(StatAllocatorTest, SharedCountersAreReportedOnceWithTheSetsPeak) {
  auto rec = std::make_shared<testing::RecordingAllocator>();
  auto counters = StatAllocator::NewCounters();
  auto first = std::make_shared<StatAllocator>(std::make_shared<StatsSource>(rec), counters);
  auto second = std::make_shared<StatAllocator>(std::make_shared<StatsSource>(rec), counters);
  first->Allocate(1000).reset();
  second->Allocate(1000).reset();
  AllocationPtr a = first->Allocate(300);
  AllocationPtr b = second->Allocate(400);
  MemoryStats s = testing::StatsOf(*first);
  EXPECT_EQ(s.allocated_bytes[kAggregate].current, 700);
  EXPECT_EQ(s.allocated_bytes[kAggregate].peak, 1000);  // not 2000
  EXPECT_EQ(s.allocation[kAggregate].allocated, 4);
  EXPECT_EQ(s.segment[kAggregate].current, 7);  // its own underlying layer
  // The second reports its underlying layer only: summing both counts the set once.
  second->CollectStats(&s);
  EXPECT_EQ(s.allocated_bytes[kAggregate].current, 700);
  EXPECT_EQ(s.segment[kAggregate].current, 14);
  EXPECT_EQ(second->allocated_bytes().current, 700);  // the accessors read the whole set
  a.reset();
  b.reset();
  first->ResetPeakStats();
  EXPECT_EQ(testing::StatsOf(*first).allocated_bytes[kAggregate].peak, 0);
  // The set outlives the first layer; the second keeps counting into it.
  first.reset();
  second->Allocate(100).reset();
  EXPECT_EQ(second->allocation().allocated, 5);
}

TEST(StatAllocatorTest, CountsOutOfMemory) {
  auto rec = std::make_shared<testing::RecordingAllocator>();
  auto limited = std::make_shared<testing::LimitedAllocator>(rec, 1000);
  auto stat = std::make_shared<StatAllocator>(limited);
  AllocationPtr a = stat->Allocate(800);
  EXPECT_THROW(stat->Allocate(300), BadAlloc);
  EXPECT_THROW(stat->Allocate(5000), BadAlloc);
  EXPECT_EQ(stat->num_ooms(), 2);
  MemoryStats s = testing::StatsOf(*stat);
  EXPECT_EQ(s.num_ooms, 2);
  EXPECT_EQ(s.allocation[kAggregate].current, 1);
  EXPECT_EQ(s.allocation[kAggregate].allocated, 1);
  EXPECT_EQ(s.allocated_bytes[kAggregate].current, 800);
  a.reset();
  AllocationPtr b = stat->Allocate(1000);  // fits again
  EXPECT_EQ(stat->num_ooms(), 2);
  stat->ResetAccumulatedStats();
  EXPECT_EQ(stat->num_ooms(), 0);
}

// Throws something other than BadAlloc: not an OOM.
class ThrowingAllocator : public Allocator {
 public:
  const char* Name() const override { return "throwing"; }

 protected:
  Allocation* AllocateImpl(std::size_t) override { throw std::invalid_argument("too big"); }
  void FreeImpl(Allocation*) override {}
};

TEST(StatAllocatorTest, OtherExceptionsAreNotOoms) {
  auto stat = std::make_shared<StatAllocator>(std::make_shared<ThrowingAllocator>());
  EXPECT_THROW(stat->Allocate(10), std::invalid_argument);
  EXPECT_EQ(stat->num_ooms(), 0);
  EXPECT_EQ(stat->allocation_current(), 0);
}

// 8 threads allocate; half of each thread's blocks are freed by the next thread.
TEST(StatAllocatorTest, ConcurrentCountsAreExact) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 3;
  constexpr int kPerThread = 3000;
  auto rec = std::make_shared<testing::RecordingAllocator>();
  auto stat = std::make_shared<StatAllocator>(std::make_shared<RoundingAllocator>(rec));
  std::int64_t expected_bytes = 0, expected_large = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      const std::size_t size = (i % 50 == 0) ? 2 * kMiB + t : 64 * (1 + (i + t) % 100);
      expected_bytes += RoundingAllocator::Round(size);
      expected_large += PoolOf(RoundingAllocator::Round(size)) == kLargePool;
    }
  }
  for (int round = 0; round < kRounds; ++round) {  // later rounds reuse the exited shards
    absl::Mutex mu;
    std::vector<std::deque<AllocationPtr>> handoff(kThreads);
    testing::RunThreads(kThreads, [&](int t) {
      std::vector<AllocationPtr> mine;
      for (int i = 0; i < kPerThread; ++i) {
        const std::size_t size = (i % 50 == 0) ? 2 * kMiB + t : 64 * (1 + (i + t) % 100);
        AllocationPtr a = stat->Allocate(size);
        if (i % 2 == 0) {
          absl::MutexLock lock(&mu);
          handoff[(t + 1) % kThreads].push_back(std::move(a));
        } else {
          mine.push_back(std::move(a));
        }
        if (i % 3 == 0) {
          std::deque<AllocationPtr> theirs;
          {
            absl::MutexLock lock(&mu);
            theirs.swap(handoff[t]);
          }
          theirs.clear();  // frees blocks allocated by another thread
        }
        if (mine.size() > 64) mine.erase(mine.begin(), mine.begin() + 32);
      }
    });
    handoff.clear();  // what is left is freed on the main thread

    const MemoryStats s = testing::StatsOf(*stat);
    const std::int64_t n = static_cast<std::int64_t>(kThreads) * kPerThread * (round + 1);
    EXPECT_EQ(s.allocation[kAggregate].allocated, n);
    EXPECT_EQ(s.allocation[kAggregate].freed, n);
    EXPECT_EQ(s.allocation[kLargePool].allocated, expected_large * (round + 1));
    EXPECT_EQ(s.allocated_bytes[kAggregate].allocated, expected_bytes * (round + 1));
    for (const StatArray* arr : {&s.allocation, &s.allocated_bytes, &s.requested_bytes}) {
      for (int p = 0; p < kNumStatPools; ++p) {
        EXPECT_EQ((*arr)[p].current, 0) << "pool " << p;
        EXPECT_GE((*arr)[p].peak, 0);
      }
    }
    // Peaks are estimates under concurrency, but bounded by what could ever be live.
    EXPECT_GT(s.allocation[kAggregate].peak, 0);
    EXPECT_LE(s.allocation[kAggregate].peak, static_cast<std::int64_t>(kThreads) * kPerThread +
                                                 kThreads * StatAllocator::kCountSlack);
    EXPECT_EQ(rec->live_blocks(), 0u);
  }
}

// After other threads have exited, a single thread's peaks are exact again.
TEST(StatAllocatorTest, SingleThreadPeakExactAfterWorkersExit) {
  auto rec = std::make_shared<testing::RecordingAllocator>();
  auto stat = std::make_shared<StatAllocator>(rec);
  std::vector<AllocationPtr> from_workers(4);
  // Each worker leaves a drift of +1000 bytes behind, below the slack.
  testing::RunThreads(4, [&](int t) { from_workers[t] = stat->Allocate(1000); });
  from_workers.clear();  // main thread: drift -4000
  stat->ResetPeakStats();
  EXPECT_EQ(stat->allocated_bytes_peak(), 0);
  std::vector<AllocationPtr> v;
  for (int i = 0; i < 5; ++i) v.push_back(stat->Allocate(100));
  v.resize(2);
  v.push_back(stat->Allocate(50));
  EXPECT_EQ(stat->allocated_bytes_peak(), 500);
  EXPECT_EQ(stat->allocated_bytes_current(), 250);
}

// A block above the slack publishes at its allocation, into the primary counter when its thread
// holds the primary shard (the first thread to use the allocator) and into the shared one
// otherwise: either way another thread's estimate, hence the peak, includes it.
TEST(StatAllocatorTest, ABlockAboveTheSlackCountsInAnotherThreadsPeak) {
  const std::size_t big = 4 * static_cast<std::size_t>(StatAllocator::kBytesSlack);
  const std::size_t small = 1000;
  for (const bool main_first : {true, false}) {
    SCOPED_TRACE(main_first ? "the main thread holds the primary shard"
                            : "the worker holds the primary shard");
    auto rec = std::make_shared<testing::RecordingAllocator>();
    auto stat = std::make_shared<StatAllocator>(rec);
    AllocationPtr held;
    if (main_first) held = stat->Allocate(big);
    absl::Notification worker_holds, main_done;
    std::thread worker([&] {
      AllocationPtr mine = stat->Allocate(main_first ? small : big);
      worker_holds.Notify();
      main_done.WaitForNotification();  // the block stays live until the main thread has looked
    });
    worker_holds.WaitForNotification();
    if (!main_first) held = stat->Allocate(small);
    main_done.Notify();
    worker.join();  // frees the worker's block: the current figure alone no longer shows the peak
    EXPECT_EQ(stat->allocated_bytes_peak(), static_cast<std::int64_t>(big + small));
    held.reset();
    EXPECT_EQ(stat->allocated_bytes_current(), 0);
  }
}

// Threads come and go while allocating and freeing blocks above the slack, so that every one of
// them publishes and the primary shard passes from thread to thread. Published figures must not
// lose an update: afterwards a single thread's peak is exact again.
TEST(StatAllocatorTest, PublishingThreadsThatComeAndGoLoseNoUpdate) {
  constexpr int kThreads = 6;
  constexpr int kRounds = 4;
  constexpr int kPerThread = 400;
  const std::size_t big = 2 * static_cast<std::size_t>(StatAllocator::kBytesSlack);
  auto rec = std::make_shared<testing::RecordingAllocator>();
  auto stat = std::make_shared<StatAllocator>(std::make_shared<RoundingAllocator>(rec));
  for (int round = 0; round < kRounds; ++round) {
    testing::RunThreads(kThreads, [&](int t) {
      std::mt19937 rng(round * kThreads + t);
      std::vector<AllocationPtr> mine;
      for (int i = 0; i < kPerThread; ++i) {
        if (mine.size() < 3 && rng() % 2 == 0) {
          mine.push_back(stat->Allocate(big + 512 * (rng() % 64)));
        } else if (!mine.empty()) {
          mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(rng() % mine.size()));
        }
      }
      if (t % 2 == 0) mine.clear();  // the others free at thread exit
    });
    EXPECT_EQ(stat->allocated_bytes_current(), 0);
    stat->ResetPeakStats();
    AllocationPtr a = stat->Allocate(big);
    AllocationPtr b = stat->Allocate(1000);
    a.reset();
    EXPECT_EQ(stat->allocated_bytes_peak(),
              static_cast<std::int64_t>(big + RoundingAllocator::Round(1000)));
    EXPECT_EQ(stat->requested_bytes().peak, static_cast<std::int64_t>(big + 1000));
    b.reset();
  }
  EXPECT_EQ(rec->live_blocks(), 0u);
}

TEST(StatAllocatorTest, FreeDuringThreadExitIsCounted) {
  auto rec = std::make_shared<testing::RecordingAllocator>();
  auto stat = std::make_shared<StatAllocator>(rec);
  struct Holder {
    AllocationPtr a;
  };
  std::thread([&] {
    // Constructed before the allocator's per-thread state, so destroyed after it.
    thread_local Holder holder;
    holder.a = stat->Allocate(123);
  }).join();
  EXPECT_EQ(rec->live_blocks(), 0u);
  EXPECT_EQ(stat->allocated_bytes_current(), 0);
  EXPECT_EQ(stat->allocation().freed, 1);
}

TEST(StatAllocatorTest, ManyAllocatorsOnOneThread) {
  auto rec = std::make_shared<testing::RecordingAllocator>();
  for (int generation = 0; generation < 50; ++generation) {
    std::vector<std::shared_ptr<StatAllocator>> stats;
    for (int i = 0; i < 7; ++i) stats.push_back(std::make_shared<StatAllocator>(rec));
    std::vector<AllocationPtr> v;
    for (int r = 0; r < 3; ++r) {
      for (int i = 0; i < 7; ++i) v.push_back(stats[i]->Allocate(100 * (i + 1)));
    }
    for (int i = 0; i < 7; ++i) {
      EXPECT_EQ(stats[i]->allocated_bytes_current(), 300 * (i + 1));
      EXPECT_EQ(stats[i]->allocation_current(), 3);
    }
    v.clear();
    for (int i = 0; i < 7; ++i) EXPECT_EQ(stats[i]->allocated_bytes_current(), 0);
  }
  EXPECT_EQ(rec->live_blocks(), 0u);
}

}  // namespace
}  // namespace strata::layers
