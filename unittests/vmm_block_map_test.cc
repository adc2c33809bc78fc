#include "strategies/vmm/block_map.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "platform/emulated_runtime.h"
#include "strategies/vmm/policy.h"
#include "support/vmm_pool_fixture.h"

namespace strata::strategies::vmm {
namespace {

using platform::Stream;
using vmm_test::kMiB;
using vmm_test::kPlace;

struct Recorder : BlockMap::Listener {
  int splits = 0, merges = 0;
  void OnSplit(Block*, Block*) override { ++splits; }
  void OnMerge(Block*, Block*) override { ++merges; }
};

class VmmBlockMapTest : public ::testing::Test {
 protected:
  void SetUp() override { map_.Init(base_, 64 * kMiB, 8 * kMiB); }
  // Takes `size` bytes from the front of the large region's best fit, as the pool does.
  Block* Take(std::size_t size) {
    Block* b = map_.index(kLargeRegion).FindBestFit(size);
    map_.index(kLargeRegion).Remove(b);
    map_.Carve(b, size);
    b->free = false;
    return b;
  }
  void Free(Block* b, Stream s, std::uint64_t epoch) {
    b->stream = s;
    b->epoch = epoch;
    map_.InsertFree(b);
  }
  std::size_t LargestLarge() {
    Block* b = map_.index(kLargeRegion).FindBestFit(56 * kMiB);
    return b != nullptr ? b->size() : 0;
  }

  char* const base_ = reinterpret_cast<char*>(std::uintptr_t{1} << 40);  // never dereferenced
  platform::EmulatedRuntime runtime_{vmm_test::Lagging(4)};
  StreamClock clock_{&runtime_, kPlace};
  Recorder listener_;
  BlockMap map_{kPlace, &clock_, &listener_, 4};
  Stream a_ = runtime_.CreateStream(0);
  Stream b_ = runtime_.CreateStream(0);
};

TEST_F(VmmBlockMapTest, TwoRegionsThatNeverMerge) {
  EXPECT_EQ(map_.first()->size(), 8 * kMiB);
  EXPECT_EQ(map_.first()->region, kSmallRegion);
  EXPECT_EQ(map_.first()->next->size(), 56 * kMiB);
  EXPECT_EQ(map_.first()->next->region, kLargeRegion);
}

TEST_F(VmmBlockMapTest, SplitsAndMergesOfOneStreamTellTheListener) {
  Block* x = Take(4 * kMiB);
  Block* y = Take(4 * kMiB);
  EXPECT_EQ(listener_.splits, 2);
  EXPECT_EQ(LargestLarge(), 0u);
  Free(x, a_, 1);
  Free(y, a_, 2);
  EXPECT_EQ(listener_.merges, 2);
  EXPECT_EQ(LargestLarge(), 56 * kMiB);
  EXPECT_FALSE(map_.has_unmerged());
}

TEST_F(VmmBlockMapTest, PendingUsesOnTwoStreamsStayApartUntilARetry) {
  runtime_.LaunchHostTask(a_, [] {});
  runtime_.LaunchHostTask(b_, [] {});
  Block* x = Take(4 * kMiB);
  Block* y = Take(4 * kMiB);
  Block* rest = y->next;
  Free(x, a_, 1);  // pending: the device is behind and no fence covers it
  Free(y, b_, 1);  // merges with the free rest (no use), not with x
  EXPECT_EQ(listener_.merges, 1);
  EXPECT_TRUE(map_.has_unmerged());
  EXPECT_EQ(y->next, nullptr);
  EXPECT_NE(rest, y->next);
  EXPECT_TRUE(map_.RetryMerges());
  EXPECT_EQ(LargestLarge(), 56 * kMiB);
  Block* merged = x->prev != nullptr ? x->prev->next : map_.first()->next;
  EXPECT_TRUE(merged->epoch != 0 && merged->epoch2 != 0) << "keeps both streams' last uses";
  EXPECT_FALSE(map_.has_unmerged());
}

TEST_F(VmmBlockMapTest, UsesSeenDoneAreDroppedSoNeighboursMerge) {
  runtime_.LaunchHostTask(a_, [] {});
  Block* x = Take(4 * kMiB);
  Block* y = Take(4 * kMiB);
  const std::uint64_t e = clock_.NumberFree(a_, [](std::uint64_t, std::size_t) { return true; });
  for (int i = 0; i < 4; ++i) runtime_.LaunchHostTask(a_, [] {});
  runtime_.SynchronizeStream(a_);
  Free(x, a_, e);
  Free(y, b_, 0);
  EXPECT_EQ(LargestLarge(), 56 * kMiB);
  EXPECT_FALSE(map_.has_unmerged());
  clock_.DestroyEvents();
}

}  // namespace
}  // namespace strata::strategies::vmm
