#include "flags/roundup_power2_divisions.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ostream>
#include <random>
#include <stdexcept>
#include <string>

#include "absl/flags/marshalling.h"
#include "absl/strings/str_cat.h"

namespace strata::flags {
namespace {

using ::testing::HasSubstr;
constexpr std::size_t kMB = std::size_t{1} << 20;

std::vector<std::uint32_t> Table(const RoundupPower2Divisions& d) {
  std::vector<std::uint32_t> out;
  for (int i = 0; i < RoundupPower2Divisions::kIntervals; ++i) out.push_back(d.divisions(i));
  return out;
}

TEST(RoundupPower2DivisionsTest, DefaultIsOff) {
  RoundupPower2Divisions d;
  EXPECT_FALSE(d.enabled());
  EXPECT_EQ(Table(d), std::vector<std::uint32_t>(16, 0));
  EXPECT_EQ(d.ToString(), "0");
  EXPECT_EQ(RoundupPower2Divisions::FromString("0"), d);
}

TEST(RoundupPower2DivisionsTest, SingleValueAppliesToEveryInterval) {
  RoundupPower2Divisions d = RoundupPower2Divisions::FromString("4");
  EXPECT_TRUE(d.enabled());
  EXPECT_EQ(Table(d), std::vector<std::uint32_t>(16, 4));
  EXPECT_EQ(d.ToString(), "4");
  EXPECT_EQ(d, RoundupPower2Divisions::Uniform(4));
  EXPECT_THROW(RoundupPower2Divisions::Uniform(3), std::invalid_argument);
  EXPECT_FALSE(RoundupPower2Divisions::FromString("1").enabled());  // 1 division: no rounding
}

TEST(RoundupPower2DivisionsTest, PyTorchListMapsToIntervals) {
  RoundupPower2Divisions d = RoundupPower2Divisions::FromString("[256:1,512:2,>:8]");
  // Intervals 0..8 (< 512 MB) from the first key, 9 = [512 MB, 1 GB), 10..15 from '>'.
  std::vector<std::uint32_t> expected(16, 8);
  for (int i = 0; i <= 8; ++i) expected[i] = 1;
  expected[9] = 2;
  EXPECT_EQ(Table(d), expected);
  EXPECT_EQ(d.ToString(), "[256:1,512:2,>:8]");
  EXPECT_EQ(d.DivisionsFor(100), 1u);
  EXPECT_EQ(d.DivisionsFor(300 * kMB), 1u);
  EXPECT_EQ(d.DivisionsFor(512 * kMB), 2u);
  EXPECT_EQ(d.DivisionsFor(1024 * kMB - 1), 2u);
  EXPECT_EQ(d.DivisionsFor(1024 * kMB), 8u);
  EXPECT_EQ(d.DivisionsFor(std::size_t{1} << 40), 8u);
}

TEST(RoundupPower2DivisionsTest, KeysCoverOnlyTheirOwnIntervalAndGapsStayOff) {
  RoundupPower2Divisions d = RoundupPower2Divisions::FromString("[1:4,64:2]");
  std::vector<std::uint32_t> expected(16, 0);
  expected[0] = 4;
  expected[6] = 2;
  EXPECT_EQ(Table(d), expected);
  EXPECT_EQ(d.ToString(), "[1:4,2:0,4:0,8:0,16:0,32:0,64:2,>:0]");
  EXPECT_EQ(RoundupPower2Divisions::FromString(d.ToString()), d);
}

TEST(RoundupPower2DivisionsTest, WhitespaceAndLoneRestEntry) {
  EXPECT_EQ(RoundupPower2Divisions::FromString(" [ 256 : 1 , > : 8 ] "),
            RoundupPower2Divisions::FromString("[256:1,>:8]"));
  EXPECT_EQ(RoundupPower2Divisions::FromString("[>:8]"), RoundupPower2Divisions::Uniform(8));
  EXPECT_EQ(RoundupPower2Divisions::FromString("[32768:2]"), RoundupPower2Divisions::Uniform(2));
}

TEST(RoundupPower2DivisionsTest, IntervalBoundaries) {
  EXPECT_EQ(RoundupPower2Divisions::IntervalOf(0), 0);
  EXPECT_EQ(RoundupPower2Divisions::IntervalOf(2 * kMB - 1), 0);
  EXPECT_EQ(RoundupPower2Divisions::IntervalOf(2 * kMB), 1);
  EXPECT_EQ(RoundupPower2Divisions::IntervalOf(256 * kMB), 8);
  EXPECT_EQ(RoundupPower2Divisions::IntervalOf(32768 * kMB - 1), 14);
  EXPECT_EQ(RoundupPower2Divisions::IntervalOf(32768 * kMB), 15);
  EXPECT_EQ(RoundupPower2Divisions::IntervalOf(~std::size_t{0}), 15);
}

TEST(RoundupPower2DivisionsTest, RandomTablesRoundTripThroughText) {
  std::mt19937 rng(42);
  const std::uint32_t choices[] = {0, 1, 2, 4, 8, 1024};
  for (int round = 0; round < 500; ++round) {
    std::string list = "[";
    for (int i = 0; i < 16; ++i) {
      absl::StrAppend(&list, i ? "," : "", std::uint64_t{1} << i, ":", choices[rng() % 6]);
    }
    list += "]";
    RoundupPower2Divisions d = RoundupPower2Divisions::FromString(list);
    EXPECT_EQ(RoundupPower2Divisions::FromString(d.ToString()), d)
        << list << " -> " << d.ToString();
    // Through Abseil's marshalling too, as the flag does.
    RoundupPower2Divisions back;
    std::string error;
    ASSERT_TRUE(absl::ParseFlag(absl::UnparseFlag(d), &back, &error)) << error;
    EXPECT_EQ(back, d);
  }
}

struct Invalid {
  const char* text;
  const char* reason;
};

void PrintTo(const Invalid& b, std::ostream* os) { *os << '"' << b.text << '"'; }

class RoundupPower2DivisionsInvalidTest : public ::testing::TestWithParam<Invalid> {};

TEST_P(RoundupPower2DivisionsInvalidTest, RejectedWithTheTextAndTheReason) {
  const Invalid& c = GetParam();
  RoundupPower2Divisions d = RoundupPower2Divisions::Uniform(2);
  std::string error;
  EXPECT_FALSE(RoundupPower2Divisions::Parse(c.text, &d, &error));
  EXPECT_EQ(d, RoundupPower2Divisions::Uniform(2)) << "output changed on failure";
  EXPECT_THAT(error, HasSubstr(std::string("'") + c.text + "'"));
  EXPECT_THAT(error, HasSubstr(c.reason));
  EXPECT_THAT(error, HasSubstr("roundup_power2_divisions"));
  EXPECT_THROW(RoundupPower2Divisions::FromString(c.text), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(
    All, RoundupPower2DivisionsInvalidTest,
    ::testing::Values(Invalid{"", "empty value"}, Invalid{"3", "neither 0 nor a power of two"},
                      Invalid{"-4", "not a non-negative integer"},
                      Invalid{"abc", "not a non-negative integer"},
                      Invalid{"2097152", "neither 0 nor a power of two <= 65536"},
                      Invalid{"131072", "neither 0 nor a power of two <= 65536"},
                      Invalid{"[256:1,512:2", "must end with ']'"}, Invalid{"[]", "empty list"},
                      Invalid{"[256]", "not key:divisions"},
                      Invalid{"[256:3]", "divisions 3 is neither 0 nor a power of two"},
                      Invalid{"[300:1]", "key 300 MB is not a power of two"},
                      Invalid{"[0:1]", "key 0 MB is not a power of two"},
                      Invalid{"[65536:2]", "above 32768"},
                      Invalid{"[512:1,256:2]", "keys must increase, but 256 follows 512"},
                      Invalid{"[256:1,256:2]", "keys must increase"},
                      Invalid{"[>:2,256:1]", "'>' must be the last entry"},
                      Invalid{"[256:1,,>:2]", "empty list entry"},
                      Invalid{"[x:1]", "key 'x' is neither a size in MB nor '>'"},
                      Invalid{"[256:-1]", "divisions '-1' is not a non-negative integer"}));

}  // namespace
}  // namespace strata::flags
