#include "allocation/reuse_credit.h"

#include <gtest/gtest.h>

namespace strata::allocation {
namespace {

TEST(ReuseCreditTest, ParksUntilUnusedBlocksOutweighHits) {
  ReuseCredit c;
  EXPECT_TRUE(c.parks());
  EXPECT_EQ(c.credit(), ReuseCredit::kMaxCredit);
  c.Hit();  // capped
  EXPECT_EQ(c.credit(), ReuseCredit::kMaxCredit);
  c.Unused(ReuseCredit::kMaxCredit - 1);
  EXPECT_TRUE(c.parks());
  c.Hit();
  EXPECT_EQ(c.credit(), 1 + ReuseCredit::kHitCredit);
  c.Unused(3);
  EXPECT_FALSE(c.parks());
}

TEST(ReuseCreditTest, AMissedHitOfTheSizeRefusedLastTurnsParkingOnAgain) {
  ReuseCredit c;
  c.Unused(ReuseCredit::kMaxCredit + 10);
  EXPECT_FALSE(c.parks());
  c.Refused(4096);
  c.Missed(8192);  // another size: not a hit parking would have made
  EXPECT_FALSE(c.parks());
  c.Missed(4096);
  EXPECT_TRUE(c.parks());
  EXPECT_EQ(c.credit(), 1);
  c.Missed(4096);  // while parking is on, a miss changes nothing
  EXPECT_EQ(c.credit(), 1);
  c.Reset();
  EXPECT_EQ(c.credit(), ReuseCredit::kMaxCredit);
}

}  // namespace
}  // namespace strata::allocation
