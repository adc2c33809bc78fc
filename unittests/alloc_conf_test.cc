#include "flags/alloc_conf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ostream>
#include <stdexcept>
#include <string>

namespace strata::flags {
namespace {

using Entry = AllocConf::Entry;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(AllocConfTest, EmptyOrBlankHasNoEntries) {
  EXPECT_TRUE(AllocConf::Parse("").entries().empty());
  EXPECT_TRUE(AllocConf::Parse("  \t ").entries().empty());
}

TEST(AllocConfTest, SplitsPairsAndTrimsWhitespace) {
  AllocConf conf = AllocConf::Parse(" max_split_size_mb : 128 ,garbage_collection_threshold:0.6");
  EXPECT_THAT(conf.entries(), ElementsAre(Entry{"max_split_size_mb", "128"},
                                          Entry{"garbage_collection_threshold", "0.6"}));
}

TEST(AllocConfTest, BracketedValueKeepsItsCommasAndColons) {
  AllocConf conf =
      AllocConf::Parse("roundup_power2_divisions:[256:1,512:2,>:8],max_split_size_mb:128");
  EXPECT_THAT(conf.entries(), ElementsAre(Entry{"roundup_power2_divisions", "[256:1,512:2,>:8]"},
                                          Entry{"max_split_size_mb", "128"}));
}

TEST(AllocConfTest, ValueIsEverythingAfterTheFirstColon) {
  EXPECT_THAT(AllocConf::Parse("a:b:c").entries(), ElementsAre(Entry{"a", "b:c"}));
}

TEST(AllocConfTest, RepeatedKeysAreKeptInOrder) {
  EXPECT_THAT(AllocConf::Parse("a:1,b:2,a:3").entries(),
              ElementsAre(Entry{"a", "1"}, Entry{"b", "2"}, Entry{"a", "3"}));
}

TEST(AllocConfTest, ToStringParsesBackToTheSameEntries) {
  AllocConf conf = AllocConf::Parse("a : 1, roundup_power2_divisions:[256:1, >:8] ,b:true");
  EXPECT_EQ(conf.ToString(), "a:1,roundup_power2_divisions:[256:1, >:8],b:true");
  EXPECT_EQ(AllocConf::Parse(conf.ToString()).entries(), conf.entries());
}

struct Malformed {
  const char* text;
  const char* reason;  // a substring the message must contain
};

void PrintTo(const Malformed& b, std::ostream* os) { *os << '"' << b.text << '"'; }

class AllocConfMalformedTest : public ::testing::TestWithParam<Malformed> {};

TEST_P(AllocConfMalformedTest, ThrowsNamingTheStringAndTheProblem) {
  const Malformed& m = GetParam();
  try {
    AllocConf::Parse(m.text);
    FAIL() << "parsed '" << m.text << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr(std::string("'") + m.text + "'"));
    EXPECT_THAT(e.what(), HasSubstr(m.reason));
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, AllocConfMalformedTest,
    ::testing::Values(Malformed{"garbage", "entry 'garbage' has no ':'"},
                      Malformed{":5", "empty key"},
                      Malformed{"max_split_size_mb:", "key 'max_split_size_mb' has an empty value"},
                      Malformed{"max_split_size_mb:  ", "empty value"},
                      Malformed{"a:1,,b:2", "empty entry"}, Malformed{"a:1,", "empty entry"},
                      Malformed{",a:1", "empty entry"},
                      Malformed{"roundup_power2_divisions:[256:1,>:8", "never closed"},
                      Malformed{"roundup_power2_divisions:256:1]", "']' without '['"},
                      Malformed{"roundup_power2_divisions:[[256:1]]", "nested '['"},
                      Malformed{"bad key:1", "key 'bad key'"}, Malformed{"a-b:1", "key 'a-b'"},
                      Malformed{"[a:1]", "is not a name"}));

}  // namespace
}  // namespace strata::flags
