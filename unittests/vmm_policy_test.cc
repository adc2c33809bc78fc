#include "strategies/vmm/policy.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <deque>
#include <map>

#include "strategies/tlsf_index.h"

namespace strata::strategies::vmm {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

TEST(VmmPolicyTest, RegionsSplitAtTheSmallBlockSize) {
  EXPECT_EQ(RegionFor(512, kMiB), kSmallRegion);
  EXPECT_EQ(RegionFor(kMiB, kMiB), kSmallRegion);
  EXPECT_EQ(RegionFor(kMiB + 512, kMiB), kLargeRegion);
  EXPECT_EQ(SmallRegionBytes(64 * kMiB, 2 * kMiB, 8), 8 * kMiB);
  EXPECT_EQ(SmallRegionBytes(66 * kMiB, 2 * kMiB, 8), 10 * kMiB);  // rounded up to a page
  EXPECT_EQ(SmallRegionBytes(14 * kMiB, 2 * kMiB, 8), 0u);         // too small to split
  EXPECT_EQ(SmallRegionBytes(64 * kMiB, 2 * kMiB, 0), 0u);         // one region
}

TEST(VmmPolicyTest, StitchesPastTheSlackOrTheLimit) {
  PhysicalFigures f;
  f.page = 2 * kMiB;
  f.live_peak_bytes = 1000 * kMiB;
  f.stitch_slack_permille = 31;
  f.physical = 1000 * kMiB;
  // Slack: 1000 MiB / 1000 * 31 = 31 MiB, plus two pages.
  EXPECT_FALSE(ShouldStitch(f, 35 * kMiB));
  EXPECT_TRUE(ShouldStitch(f, 36 * kMiB));
  f.memory_limit = 1010 * kMiB;
  EXPECT_TRUE(ShouldStitch(f, 12 * kMiB));  // within the slack, past the limit
  EXPECT_FALSE(ShouldStitch(f, 10 * kMiB));
}

TEST(VmmPolicyTest, SlackGrowsOnlyForRemappingAtASteadyPeak) {
  const SlackRule rule{8, 125};
  SlackWindow w{1000 * kMiB, 500, 3};
  EXPECT_EQ(SlackAfter(31, w, 500, rule), 39u);  // remapped, peak steady: one step
  EXPECT_EQ(SlackAfter(31, w, 501, rule), 31u);  // the peak grew: not churn
  w.remaps = 0;
  EXPECT_EQ(SlackAfter(31, w, 500, rule), 31u);  // no remapping
  w.remaps = 1;
  EXPECT_EQ(SlackAfter(120, w, 500, rule), 125u);  // capped
  EXPECT_EQ(SlackAfter(125, w, 500, rule), 125u);
  EXPECT_EQ(SlackAfter(200, w, 500, rule), 200u);  // a first slack above the ceiling stays
  EXPECT_EQ(WindowBytes(500, 2 * kMiB, 8), 8000 * kMiB);
  EXPECT_EQ(WindowBytes(0, 2 * kMiB, 8), 16 * kMiB);  // at least a page
}

TEST(VmmPolicyTest, ExtentsAtSetUpAndAtANewPeakAfterASteadyOneWhenGrowthMayTakeEveryPage) {
  const ExtentRequest setup{.missing = 2, .max_extent_pages = 16};
  EXPECT_TRUE(UseExtents(setup));
  auto with = [&](auto change) {
    ExtentRequest r = setup;
    r.missing = 4;
    change(r);
    return UseExtents(r);
  };
  EXPECT_FALSE(UseExtents({.missing = 1, .max_extent_pages = 16}));      // one page: no run
  EXPECT_FALSE(with([](ExtentRequest& r) { r.max_extent_pages = 1; }));  // extents off
  EXPECT_FALSE(with([](ExtentRequest& r) { r.freed_large = true; }));    // a large block was freed
  EXPECT_TRUE(with([](ExtentRequest& r) {  // a new peak after a steady one
    r.freed_large = true;
    r.new_peak_after_steady = true;
  }));
  EXPECT_FALSE(with([](ExtentRequest& r) {  // spares first
    r.freed_large = true;
    r.new_peak_after_steady = true;
    r.have_spares = true;
  }));
  EXPECT_FALSE(with([](ExtentRequest& r) {  // stitching instead
    r.freed_large = true;
    r.new_peak_after_steady = true;
    r.should_stitch = true;
  }));
  EXPECT_FALSE(with([](ExtentRequest& r) { r.have_spares = true; }));    // spares first
  EXPECT_FALSE(with([](ExtentRequest& r) { r.should_stitch = true; }));  // stitching instead
  EXPECT_FALSE(with([](ExtentRequest& r) { r.capped = true; }));         // under a memory cap
  EXPECT_FALSE(with([](ExtentRequest& r) {  // under a cap, not even for a new peak
    r.freed_large = true;
    r.new_peak_after_steady = true;
    r.capped = true;
  }));
}

TEST(VmmPolicyTest, ANewPeaksExtentsLeaveHeadroom) {
  EXPECT_TRUE(RoomForExtents(10, 30, 160, 8));   // 20 left, 20 needed
  EXPECT_FALSE(RoomForExtents(11, 30, 160, 8));  // 19 left
  EXPECT_FALSE(RoomForExtents(40, 30, 160, 8));  // more than is free
  EXPECT_FALSE(RoomForExtents(1, 30, 160, 0));   // never
}

TEST(VmmPolicyTest, FencesEveryNFreesAndWithOneStreamOnlyAtPageSizedFrees) {
  EXPECT_FALSE(FenceDue(31, 2, false, 32));
  EXPECT_TRUE(FenceDue(32, 2, false, 32));
  EXPECT_FALSE(FenceDue(40, 1, false, 32));
  EXPECT_TRUE(FenceDue(40, 1, true, 32));
}

struct FakeBlock : TlsfHook<FakeBlock> {
  std::size_t bytes = 0;
  std::size_t size() const { return bytes; }
};

// Costs by block, as the pool would give them.
struct FakeView {
  std::map<const FakeBlock*, std::size_t> start, clear, at;
  int start_calls = 0;
  std::size_t StartCost(FakeBlock* b) {
    ++start_calls;
    return start.count(b) != 0 ? start[b] : 0;
  }
  std::size_t ClearOffset(FakeBlock* b) { return clear.count(b) != 0 ? clear[b] : kBlocked; }
  std::size_t CostAt(FakeBlock* b, std::size_t) { return at.count(b) != 0 ? at[b] : kBlocked; }
};

class VmmPlacementTest : public ::testing::Test {
 protected:
  FakeBlock* Add(std::size_t bytes) {
    blocks_.emplace_back();
    blocks_.back().bytes = bytes;
    index_.Insert(&blocks_.back());
    return &blocks_.back();
  }
  std::deque<FakeBlock> blocks_;
  TlsfIndex<FakeBlock> index_;
  FakeView view_;
};

TEST_F(VmmPlacementTest, TheBestFitWhenItNeedsNoPages) {
  FakeBlock* small = Add(4 * kMiB);
  Add(8 * kMiB);
  auto p = ChoosePlacement<FakeBlock>(index_, 3 * kMiB, 64, view_);
  EXPECT_EQ(p.block, small);
  EXPECT_EQ(p.missing, 0u);
  EXPECT_EQ(view_.start_calls, 1) << "no scan when the best fit is mapped";
}

TEST_F(VmmPlacementTest, FewestPagesToMapThenTheSmallerBlock) {
  FakeBlock* best = Add(4 * kMiB);
  FakeBlock* b8 = Add(8 * kMiB);
  FakeBlock* b16 = Add(16 * kMiB);
  view_.start = {{best, 2}, {b8, 1}, {b16, 1}};
  auto p = ChoosePlacement<FakeBlock>(index_, 3 * kMiB, 64, view_);
  EXPECT_EQ(p.block, b8);
  EXPECT_EQ(p.missing, 1u);
  EXPECT_FALSE(p.every_fit_blocked);
}

TEST_F(VmmPlacementTest, TheScanIsBounded) {
  FakeBlock* best = Add(4 * kMiB);
  Add(8 * kMiB);
  FakeBlock* far = Add(16 * kMiB);
  view_.start = {{best, 2}, {far, 0}};
  view_.start[&blocks_[1]] = 2;
  auto p = ChoosePlacement<FakeBlock>(index_, 3 * kMiB, 1, view_);  // weighs one fit beyond
  EXPECT_NE(p.block, far);
  p = ChoosePlacement<FakeBlock>(index_, 3 * kMiB, 64, view_);
  EXPECT_EQ(p.block, far);
}

TEST_F(VmmPlacementTest, EveryFitBlockedTriesTheFirstClearOffset) {
  FakeBlock* a = Add(4 * kMiB);
  FakeBlock* b = Add(8 * kMiB);
  view_.start = {{a, kBlocked}, {b, kBlocked}};
  view_.clear = {{b, 2 * kMiB}};
  view_.at = {{b, 1}};
  auto p = ChoosePlacement<FakeBlock>(index_, 3 * kMiB, 64, view_);
  EXPECT_TRUE(p.every_fit_blocked);
  EXPECT_EQ(p.block, b);
  EXPECT_EQ(p.offset, 2 * kMiB);
  EXPECT_EQ(p.missing, 1u);
  view_.clear.clear();  // no clear offset anywhere: nothing placed
  p = ChoosePlacement<FakeBlock>(index_, 3 * kMiB, 64, view_);
  EXPECT_EQ(p.block, nullptr);
  EXPECT_EQ(p.missing, kBlocked);
}

// A fit that starts on a blocked mapping is weighed past it, before every fit is blocked: a
// device behind the host would otherwise steer requests onto ranges with pages to map.
TEST_F(VmmPlacementTest, ABlockedFitIsWeighedFromItsFirstClearOffset) {
  FakeBlock* blocked = Add(8 * kMiB);
  FakeBlock* unmapped = Add(16 * kMiB);
  view_.start = {{blocked, kBlocked}, {unmapped, 2}};
  view_.clear = {{blocked, 2 * kMiB}};
  view_.at = {{blocked, 0}};
  auto p = ChoosePlacement<FakeBlock>(index_, 3 * kMiB, 64, view_);
  EXPECT_FALSE(p.every_fit_blocked);
  EXPECT_EQ(p.block, blocked);
  EXPECT_EQ(p.offset, 2 * kMiB);
  EXPECT_EQ(p.missing, 0u);
  // As many pages either way: at a fit's start, whatever the blocks' sizes.
  view_.at = {{blocked, 2}};
  p = ChoosePlacement<FakeBlock>(index_, 3 * kMiB, 64, view_);
  EXPECT_EQ(p.block, unmapped);
  EXPECT_EQ(p.offset, 0u);
  EXPECT_EQ(p.missing, 2u);
  // Fewer past the blocked mapping than at any start.
  view_.at = {{blocked, 1}};
  p = ChoosePlacement<FakeBlock>(index_, 3 * kMiB, 64, view_);
  EXPECT_EQ(p.block, blocked);
  EXPECT_EQ(p.missing, 1u);
}

TEST_F(VmmPlacementTest, NothingFits) {
  Add(kMiB);
  auto p = ChoosePlacement<FakeBlock>(index_, 3 * kMiB, 64, view_);
  EXPECT_EQ(p.block, nullptr);
}

}  // namespace
}  // namespace strata::strategies::vmm
