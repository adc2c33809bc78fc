#include "strategies/growth_policy.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

namespace strata::strategies {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

AutoGrowthOptions Plain() {
  AutoGrowthOptions o;
  o.chunk_size = 0;
  o.release_idle_before_new_peak = false;
  return o;
}

GrowthRequest Request(std::size_t size, std::size_t reserved = 0, std::size_t high_water = 0,
                      bool small = false) {
  return GrowthRequest{small, size, reserved, high_water};
}

// `plan` releases `release_idle` idle chunks, then grows by `grow` bytes (it does not fail).
void ExpectGrowth(const GrowthPlan& plan, std::size_t release_idle, std::size_t grow) {
  EXPECT_EQ(plan.release_idle, release_idle);
  EXPECT_EQ(plan.grow, grow);
  EXPECT_FALSE(plan.over_limit);
}

TEST(GrowthPolicyTest, GrowthBytes) {
  AutoGrowthOptions o = Plain();
  EXPECT_EQ(GrowthBytes(o, false, 512), 2 * kMiB);  // rounded to the granularity
  EXPECT_EQ(GrowthBytes(o, false, 3 * kMiB), 4 * kMiB);
  o.chunk_size = 20 * kMiB;
  EXPECT_EQ(GrowthBytes(o, false, 512), 20 * kMiB);
  EXPECT_EQ(GrowthBytes(o, false, 21 * kMiB), 22 * kMiB);
  o.chunk_size = 19 * kMiB + 1;  // rounded up too
  EXPECT_EQ(GrowthBytes(o, false, 512), 20 * kMiB);
  // A chunk meant for splitting stays below max_split_size; oversize requests get their size.
  o.chunk_size = 20 * kMiB;
  o.max_split_size = 8 * kMiB;
  EXPECT_EQ(GrowthBytes(o, false, kMiB), 6 * kMiB);
  EXPECT_EQ(GrowthBytes(o, false, 7 * kMiB), 8 * kMiB);  // never below the request
  EXPECT_EQ(GrowthBytes(o, false, 9 * kMiB), 10 * kMiB);
  // Small pool: small_chunk_size, whatever chunk_size says.
  EXPECT_EQ(GrowthBytes(o, true, 4096), 2 * kMiB);
  o.small_chunk_size = 4 * kMiB;
  EXPECT_EQ(GrowthBytes(o, true, 4096), 4 * kMiB);
  EXPECT_EQ(MinimalGrowthBytes(o, 4096), 2 * kMiB);
  EXPECT_EQ(MinimalGrowthBytes(o, 5 * kMiB + 1), 6 * kMiB);
}

TEST(GrowthPolicyTest, NothingToReleaseByDefaultBelowThePeak) {
  const AutoGrowthOptions o;  // production: 20 MiB chunks, release before a new peak
  const std::vector<std::size_t> idle = {20 * kMiB, 20 * kMiB};
  const GrowthRequest r = Request(kMiB, 60 * kMiB, 100 * kMiB);  // 60 + 20 <= 100
  EXPECT_FALSE(MayReleaseIdle(o, r));
  const GrowthPlan plan = PlanGrowth(o, r, idle);
  ExpectGrowth(plan, 0u, 20 * kMiB);
}

TEST(GrowthPolicyTest, ReleaseIdleBeforeNewPeakReleasesLongestIdleUntilItFits) {
  AutoGrowthOptions o = Plain();
  o.release_idle_before_new_peak = true;
  const std::vector<std::size_t> idle = {2 * kMiB, 4 * kMiB, 8 * kMiB};  // longest idle first
  // 20 reserved, peak 20, growing 4: 24 > 20, so release 2 (22 > 20), then 4 (18 <= 20).
  GrowthRequest r = Request(4 * kMiB, 20 * kMiB, 20 * kMiB);
  EXPECT_TRUE(MayReleaseIdle(o, r));
  GrowthPlan plan = PlanGrowth(o, r, idle);
  EXPECT_EQ(plan.release_idle, 2u);
  EXPECT_EQ(plan.grow, 4 * kMiB);
  EXPECT_EQ(plan.gc_bytes, 0u);
  // Under the peak: nothing.
  r.high_water = 30 * kMiB;
  EXPECT_FALSE(MayReleaseIdle(o, r));
  EXPECT_EQ(PlanGrowth(o, r, idle).release_idle, 0u);
  // Not enough idle to stay under it: everything goes, and it grows anyway.
  r = Request(40 * kMiB, 20 * kMiB, 20 * kMiB);
  plan = PlanGrowth(o, r, idle);
  ExpectGrowth(plan, 3u, 40 * kMiB);
}

TEST(GrowthPolicyTest, FreeWhenNoCacheHitReleasesEverything) {
  AutoGrowthOptions o = Plain();
  o.free_when_no_cache_hit = true;
  const std::vector<std::size_t> idle = {2 * kMiB, 4 * kMiB};
  const GrowthRequest r = Request(kMiB);
  EXPECT_TRUE(MayReleaseIdle(o, r));
  const GrowthPlan plan = PlanGrowth(o, r, idle);
  EXPECT_EQ(plan.release_idle, 2u);
  EXPECT_EQ(plan.grow, 2 * kMiB);
  EXPECT_EQ(PlanGrowth(o, r, {}).release_idle, 0u);
}

TEST(GrowthPolicyTest, GarbageCollectionReleasesDownToTheThreshold) {
  AutoGrowthOptions o = Plain();
  o.memory_limit = 100 * kMiB;
  o.garbage_collection_threshold = 0.5;  // 50 MiB
  EXPECT_EQ(GcTargetBytes(o), 50 * kMiB);
  const std::vector<std::size_t> idle = {4 * kMiB, 8 * kMiB, 16 * kMiB};
  // 48 + 4 > 50: release 4 (48 <= 50).
  GrowthRequest r = Request(4 * kMiB, 48 * kMiB);
  EXPECT_TRUE(MayReleaseIdle(o, r));
  GrowthPlan plan = PlanGrowth(o, r, idle);
  EXPECT_EQ(plan.release_idle, 1u);
  EXPECT_EQ(plan.gc_bytes, 4 * kMiB);
  EXPECT_EQ(plan.grow, 4 * kMiB);
  // 40 + 4 <= 50: nothing.
  r.reserved = 40 * kMiB;
  EXPECT_FALSE(MayReleaseIdle(o, r));
  EXPECT_EQ(PlanGrowth(o, r, idle).release_idle, 0u);
}

// The target is the device's: what the other pools of the device hold counts against it, and
// when this pool's idle chunks are not enough the plan asks for a collection elsewhere.
TEST(GrowthPolicyTest, GarbageCollectionJudgesTheDevicesTotal) {
  AutoGrowthOptions o = Plain();
  o.memory_limit = 100 * kMiB;
  o.garbage_collection_threshold = 0.5;  // 50 MiB
  const std::vector<std::size_t> idle = {4 * kMiB, 8 * kMiB};
  GrowthRequest r = Request(4 * kMiB, 20 * kMiB);
  r.others = 30 * kMiB;  // 30 + 20 + 4 > 50: release 4 (30 + 16 + 4 = 50)
  EXPECT_TRUE(MayReleaseIdle(o, r));
  GrowthPlan plan = PlanGrowth(o, r, idle);
  EXPECT_EQ(plan.release_idle, 1u);
  EXPECT_FALSE(plan.collect_elsewhere);
  r.others = 45 * kMiB;  // even with both idle chunks gone, 45 + 8 + 4 > 50
  plan = PlanGrowth(o, r, idle);
  EXPECT_EQ(plan.release_idle, 2u);
  EXPECT_TRUE(plan.collect_elsewhere);
  r.others = 0;  // this pool alone: 20 + 4 <= 50
  EXPECT_FALSE(MayReleaseIdle(o, r));
  EXPECT_FALSE(PlanGrowth(o, r, idle).collect_elsewhere);
}

TEST(GrowthPolicyTest, MemoryLimitShrinksToTheBareRequestThenReleasesThenFails) {
  AutoGrowthOptions o = Plain();
  o.chunk_size = 20 * kMiB;
  o.memory_limit = 30 * kMiB;
  const std::vector<std::size_t> idle = {2 * kMiB, 4 * kMiB};
  // 16 + 20 > 30: shrink to the bare 2 MiB (18 <= 30), nothing released.
  GrowthRequest r = Request(kMiB, 16 * kMiB);
  GrowthPlan plan = PlanGrowth(o, r, idle);
  ExpectGrowth(plan, 0u, 2 * kMiB);
  // 26 + 6 > 30 even shrunk: release every idle chunk (20 + 6 <= 30), not just enough.
  r = Request(5 * kMiB, 26 * kMiB);
  plan = PlanGrowth(o, r, idle);
  ExpectGrowth(plan, 2u, 6 * kMiB);
  // Still too much after releasing everything: fail without growing.
  r = Request(12 * kMiB, 26 * kMiB);
  plan = PlanGrowth(o, r, idle);
  EXPECT_EQ(plan.release_idle, 2u);
  EXPECT_TRUE(plan.over_limit);
  EXPECT_TRUE(MayReleaseIdle(o, r));
}

TEST(GrowthPolicyTest, RulesApplyInOrder) {
  // release_idle_before_new_peak releases first; garbage collection then continues from there.
  AutoGrowthOptions o = Plain();
  o.release_idle_before_new_peak = true;
  o.memory_limit = 64 * kMiB;
  o.garbage_collection_threshold = 0.25;  // 16 MiB
  const std::vector<std::size_t> idle = {2 * kMiB, 2 * kMiB, 2 * kMiB, 2 * kMiB, 2 * kMiB};
  // reserved 22, peak 23, grow 2: the peak rule releases one (22 <= 23); gc wants 20 + 2 <= 16:
  // three more (14 + 2 <= 16).
  const GrowthPlan plan = PlanGrowth(o, Request(2 * kMiB, 22 * kMiB, 23 * kMiB), idle);
  EXPECT_EQ(plan.release_idle, 4u);
  EXPECT_EQ(plan.gc_bytes, 6 * kMiB);
  EXPECT_EQ(plan.grow, 2 * kMiB);
}

}  // namespace
}  // namespace strata::strategies
