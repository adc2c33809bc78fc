// Tests of the flag definitions (flags.h), the snapshot (allocator_flags.h) and the sources
// (flag_sources.h): precedence, validation, error messages, rollback.
#include "flags/flags.h"

#include <gflags/gflags.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "flags/allocator_flags.h"
#include "flags/flag_sources.h"
#include "support/error_of.h"

DECLARE_int32(v);  // glog's

namespace strata::flags {
namespace {

using testing::ErrorOf;
using ::testing::HasSubstr;

// Every test starts with no FLAGS_<ours>/STRATA_ALLOC_CONF in the environment and restores
// both the environment and every flag afterwards.
class FlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (std::string_view name : kFlagNames) Unset(absl::StrCat("FLAGS_", std::string(name)));
    Unset("STRATA_ALLOC_CONF");
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_env_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

  void SetEnv(const std::string& name, const std::string& value) {
    Remember(name);
    setenv(name.c_str(), value.c_str(), 1);
  }
  void Unset(const std::string& name) {
    Remember(name);
    unsetenv(name.c_str());
  }

  // Runs ParseCommandLine over `args` (argv[0] added); returns the positional arguments.
  std::vector<std::string> ParseArgs(std::vector<std::string> args) {
    args.insert(args.begin(), "strata_test");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> positional = ParseCommandLine(static_cast<int>(args.size()), argv.data());
    return std::vector<std::string>(positional.begin(), positional.end());
  }

 private:
  void Remember(const std::string& name) {
    if (saved_env_.count(name)) return;
    const char* value = std::getenv(name.c_str());
    saved_env_[name] = value ? std::optional<std::string>(value) : std::nullopt;
  }

  absl::FlagSaver flag_saver_;
  std::map<std::string, std::optional<std::string>> saved_env_;
};

TEST_F(FlagsTest, DefaultsArePaddlesAndPyTorchs) {
  AllocatorFlags f = Current();
  EXPECT_EQ(f, AllocatorFlags::Defaults());
  EXPECT_EQ(f.allocator_strategy, AllocatorStrategy::kAutoGrowth);
  EXPECT_FALSE(f.use_system_allocator);
  EXPECT_TRUE(f.use_stream_safe_cuda_allocator);
  EXPECT_EQ(f.gpu_allocator_retry_time, 10000);
  EXPECT_DOUBLE_EQ(f.fraction_of_gpu_memory_to_use, 0.92);
  EXPECT_EQ(f.initial_gpu_memory_in_mb, 0u);
  EXPECT_EQ(f.reallocate_gpu_memory_in_mb, 0u);
  EXPECT_EQ(f.gpu_memory_limit_mb, 0u);
  EXPECT_EQ(f.auto_growth_chunk_size_in_mb, 0u);
  EXPECT_FALSE(f.free_idle_chunk);
  EXPECT_FALSE(f.free_when_no_cache_hit);
  EXPECT_DOUBLE_EQ(f.fraction_of_cpu_memory_to_use, 1.0);
  EXPECT_EQ(f.initial_cpu_memory_in_mb, 500u);
  EXPECT_DOUBLE_EQ(f.fraction_of_cuda_pinned_memory_to_use, 0.5);
  EXPECT_FALSE(f.init_allocated_mem);
  EXPECT_EQ(f.max_split_size_mb, 0u);
  EXPECT_EQ(f.roundup_power2_divisions, RoundupPower2Divisions());
  EXPECT_EQ(f.garbage_collection_threshold, 0.0);
  EXPECT_NO_THROW(f.Validate());
}

TEST_F(FlagsTest, EveryFlagIsRegisteredOnceWithHelp) {
  for (std::string_view name : kFlagNames) {
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(std::string(name));
    ASSERT_NE(flag, nullptr) << name;
    EXPECT_GT(flag->Help().size(), 40u) << name;
    EXPECT_TRUE(absl::EndsWith(flag->Filename(), "flags/flags.cc")) << flag->Filename();
  }
  // kFlagNames lists every flag flags.cc defines.
  int defined_in_flags_cc = 0;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::EndsWith(flag->Filename(), "flags/flags.cc")) {
      ++defined_in_flags_cc;
      EXPECT_TRUE(IsStrataFlag(std::string_view(name.data(), name.size()))) << name;
    }
  }
  EXPECT_EQ(defined_in_flags_cc, static_cast<int>(kFlagNames.size()));
  // The snapshot names every flag.
  std::string debug = Current().DebugString();
  for (std::string_view name : kFlagNames) {
    EXPECT_THAT(debug, HasSubstr(absl::StrCat(std::string(name), "="))) << name;
  }
}

TEST_F(FlagsTest, DefaultsAreTheAbseilFlagsDefaults) {
  // Defaults() and the Abseil flags both take their defaults from flag_list.h; check they agree
  // value by value, in Abseil's own spelling of each default.
  std::string defaults = absl::StrCat(" ", AllocatorFlags::Defaults().DebugString(), " ");
  for (std::string_view name : kFlagNames) {
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(std::string(name));
    ASSERT_NE(flag, nullptr) << name;
    EXPECT_THAT(defaults,
                HasSubstr(absl::StrCat(" ", std::string(name), "=", flag->DefaultValue(), " ")));
  }
}

TEST_F(FlagsTest, NamesDoNotCollideWithGlogsGflags) {
  google::CommandLineFlagInfo info;
  ASSERT_TRUE(google::GetCommandLineFlagInfo("v", &info));  // the check below can fail
  for (std::string_view name : kFlagNames) {
    EXPECT_FALSE(google::GetCommandLineFlagInfo(std::string(name).c_str(), &info)) << name;
  }
}

TEST_F(FlagsTest, EnvironmentOverridesDefaults) {
  SetEnv("FLAGS_allocator_strategy", "naive_best_fit");
  SetEnv("FLAGS_free_idle_chunk", "true");
  SetEnv("FLAGS_max_split_size_mb", "64");
  SetEnv("FLAGS_gpu_allocator_retry_time", "-1");
  SetEnv("FLAGS_fraction_of_gpu_memory_to_use", "0.5");
  SetEnv("FLAGS_roundup_power2_divisions", "[256:1,512:2,>:8]");
  SetEnv("FLAGS_check_nan_inf", "1");  // another Paddle flag: not ours, not an error
  LoadFromEnvironment();
  AllocatorFlags f = Current();
  EXPECT_EQ(f.allocator_strategy, AllocatorStrategy::kNaiveBestFit);
  EXPECT_TRUE(f.free_idle_chunk);
  EXPECT_EQ(f.max_split_size_mb, 64u);
  EXPECT_EQ(f.gpu_allocator_retry_time, -1);
  EXPECT_DOUBLE_EQ(f.fraction_of_gpu_memory_to_use, 0.5);
  EXPECT_EQ(f.roundup_power2_divisions, RoundupPower2Divisions::FromString("[256:1,512:2,>:8]"));
  EXPECT_EQ(f.initial_cpu_memory_in_mb, 500u);  // untouched
}

TEST_F(FlagsTest, AllocConfOverridesEnvironment) {
  SetEnv("FLAGS_max_split_size_mb", "64");
  SetEnv("FLAGS_free_idle_chunk", "true");
  SetEnv("STRATA_ALLOC_CONF",
         "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:8],"
         "garbage_collection_threshold:0.6,allocator_strategy:thread_local");
  LoadFromEnvironment();
  AllocatorFlags f = Current();
  EXPECT_EQ(f.max_split_size_mb, 128u);
  EXPECT_TRUE(f.free_idle_chunk);  // from the environment, not overridden
  EXPECT_DOUBLE_EQ(f.garbage_collection_threshold, 0.6);
  EXPECT_EQ(f.allocator_strategy, AllocatorStrategy::kThreadLocal);
  EXPECT_EQ(f.roundup_power2_divisions.DivisionsFor(std::size_t{600} << 20), 2u);
  EXPECT_EQ(f.roundup_power2_divisions.DivisionsFor(std::size_t{4} << 30), 8u);
}

TEST_F(FlagsTest, CommandLineOverridesAllocConf) {
  SetEnv("FLAGS_max_split_size_mb", "64");
  SetEnv("FLAGS_free_idle_chunk", "true");
  SetEnv("STRATA_ALLOC_CONF", "max_split_size_mb:128,garbage_collection_threshold:0.6");
  // Loads the environment unless an earlier test of this process did; then the command line.
  EnsureLoadedFromEnvironment();
  LoadFromEnvironment();
  std::vector<std::string> positional =
      ParseArgs({"--max_split_size_mb=256", "input.bin", "--allocator_strategy=naive_best_fit"});
  EXPECT_EQ(positional, (std::vector<std::string>{"strata_test", "input.bin"}));
  AllocatorFlags f = Current();
  EXPECT_EQ(f.max_split_size_mb, 256u);
  EXPECT_EQ(f.allocator_strategy, AllocatorStrategy::kNaiveBestFit);
  EXPECT_DOUBLE_EQ(f.garbage_collection_threshold, 0.6);  // from the conf
  EXPECT_TRUE(f.free_idle_chunk);                         // from the environment
}

TEST_F(FlagsTest, CommandLineValuesAreValidatedToo) {
  std::string error = ErrorOf([&] { ParseArgs({"--garbage_collection_threshold=1.0"}); });
  EXPECT_THAT(error, HasSubstr("command line"));
  EXPECT_THAT(error, HasSubstr("garbage_collection_threshold=1"));
  EXPECT_THAT(error, HasSubstr("strictly between 0 and 1"));
}

TEST_F(FlagsTest, BadCommandLineValueExitsWithAbslMessage) {
  EXPECT_EXIT(ParseArgs({"--allocator_strategy=buddy"}), ::testing::ExitedWithCode(1),
              "allocator_strategy");
}

TEST_F(FlagsTest, HelpFlagsStayWithAbseil) {
  // gflags has --helpfull too; it must not swallow Abseil's (which prints usage and exits).
  EXPECT_EXIT(ParseArgs({"--helpfull"}), ::testing::ExitedWithCode(1), "");
}

TEST_F(FlagsTest, GlogFlagsOnTheCommandLineGoToGflags) {
  google::FlagSaver glog_saver;
  ParseArgs({"--v=3", "--max_split_size_mb=64", "--nologtostderr", "--vmodule", "foo=2"});
  EXPECT_EQ(FLAGS_v, 3);
  EXPECT_EQ(Current().max_split_size_mb, 64u);
  std::string vmodule;
  ASSERT_TRUE(google::GetCommandLineOption("vmodule", &vmodule));
  EXPECT_EQ(vmodule, "foo=2");
  std::string error = ErrorOf([&] { ParseArgs({"--v=lots"}); });
  EXPECT_THAT(error, HasSubstr("'lots'"));
  EXPECT_THAT(error, HasSubstr("--v"));
}

TEST_F(FlagsTest, EnsureLoadedFromEnvironmentDoesNotUndoLaterChanges) {
  EnsureLoadedFromEnvironment();
  SetEnv("FLAGS_max_split_size_mb", "64");
  SetFlag("max_split_size_mb", "512");
  EnsureLoadedFromEnvironment();
  EXPECT_EQ(Current().max_split_size_mb, 512u);
  LoadFromEnvironment();  // an explicit reload does re-read it
  EXPECT_EQ(Current().max_split_size_mb, 64u);
}

TEST_F(FlagsTest, SetFlagAndApplyAllocConf) {
  SetFlag("free_when_no_cache_hit", "true");
  ApplyAllocConf("gpu_memory_limit_mb:4096, initial_gpu_memory_in_mb : 1024");
  AllocatorFlags f = Current();
  EXPECT_TRUE(f.free_when_no_cache_hit);
  EXPECT_EQ(f.gpu_memory_limit_mb, 4096u);
  EXPECT_EQ(f.initial_gpu_memory_in_mb, 1024u);
  ApplyAllocConf("max_split_size_mb:100,max_split_size_mb:200");  // later wins
  EXPECT_EQ(Current().max_split_size_mb, 200u);
  ApplyAllocConf("");  // nothing to do
  EXPECT_EQ(Current().max_split_size_mb, 200u);
}

// --- invalid values ---------------------------------------------------------------------

struct BadValue {
  const char* flag;
  const char* value;
  const char* reason;  // a substring of what is allowed / what is wrong
};

void PrintTo(const BadValue& b, std::ostream* os) { *os << '"' << b.flag << "=" << b.value << '"'; }

class FlagsBadValueTest : public FlagsTest, public ::testing::WithParamInterface<BadValue> {};

void ExpectNamesFlagAndValue(const std::string& error, const BadValue& bad) {
  EXPECT_THAT(error, HasSubstr(bad.flag));
  EXPECT_THAT(error, HasSubstr(absl::StrCat("'", bad.value, "'")));
  EXPECT_THAT(error, HasSubstr(bad.reason));
}

TEST_P(FlagsBadValueTest, EnvironmentRejectsItAndChangesNothing) {
  const BadValue& bad = GetParam();
  AllocatorFlags before = Current();
  SetEnv("FLAGS_max_split_size_mb", "64");  // valid, set in the same step: must be rolled back
  SetEnv(absl::StrCat("FLAGS_", bad.flag), bad.value);
  std::string error = ErrorOf([] { LoadFromEnvironment(); });
  ExpectNamesFlagAndValue(error, bad);
  EXPECT_THAT(error, HasSubstr(absl::StrCat("FLAGS_", bad.flag)));
  EXPECT_EQ(Current(), before);
}

TEST_P(FlagsBadValueTest, AllocConfRejectsItAndChangesNothing) {
  const BadValue& bad = GetParam();
  AllocatorFlags before = Current();
  SetEnv("STRATA_ALLOC_CONF", absl::StrCat("max_split_size_mb:64,", bad.flag, ":", bad.value));
  std::string error = ErrorOf([] { LoadFromEnvironment(); });
  if (std::string_view(bad.value).empty()) {
    EXPECT_THAT(error, HasSubstr(absl::StrCat("key '", bad.flag, "' has an empty value")));
  } else if (absl::StrContains(bad.value, '[') && !absl::StrContains(bad.value, ']')) {
    // The conf syntax itself is broken: the whole string is quoted.
    EXPECT_THAT(error, HasSubstr(absl::StrCat(bad.flag, ":", bad.value, "'")));
    EXPECT_THAT(error, HasSubstr("'[' is never closed"));
  } else {
    ExpectNamesFlagAndValue(error, bad);
  }
  EXPECT_THAT(error, HasSubstr("STRATA_ALLOC_CONF"));
  EXPECT_EQ(Current(), before);
}

TEST_P(FlagsBadValueTest, SetFlagRejectsItAndChangesNothing) {
  const BadValue& bad = GetParam();
  AllocatorFlags before = Current();
  std::string error = ErrorOf([&] { SetFlag(bad.flag, bad.value, "strata_set_flags"); });
  ExpectNamesFlagAndValue(error, bad);
  EXPECT_THAT(error, HasSubstr("strata_set_flags"));
  EXPECT_EQ(Current(), before);
}

INSTANTIATE_TEST_SUITE_P(
    All, FlagsBadValueTest,
    ::testing::Values(
        BadValue{"use_system_allocator", "maybe", "expected true or false"},
        BadValue{"free_idle_chunk", "", "expected true or false"},
        BadValue{"init_allocated_mem", "2", "Illegal value"},
        BadValue{"initial_gpu_memory_in_mb", "-5", "expected a non-negative integer"},
        BadValue{"gpu_memory_limit_mb", "12abc", "Illegal value"},
        BadValue{"max_split_size_mb", "-1", "Illegal value"},
        BadValue{"max_split_size_mb", "20", "must be 0 (unlimited) or > 20"},
        BadValue{"initial_cpu_memory_in_mb", "99999999999999999999999", "Illegal value"},
        BadValue{"auto_growth_chunk_size_in_mb", "17592186044416", "larger than any allocation"},
        BadValue{"thread_cache_mb", "18446744073709551615", "larger than any allocation"},
        BadValue{"virtual_memory_stitch_slack_permille", "1001", "must be <= 1000"},
        BadValue{"virtual_memory_stitch_slack_permille", "-1", "Illegal value"},
        BadValue{"gpu_allocator_retry_time", "1e3", "expected an integer"},
        BadValue{"fraction_of_gpu_memory_to_use", "0", "must be in (0, 1]"},
        BadValue{"fraction_of_gpu_memory_to_use", "1.5", "must be in (0, 1]"},
        BadValue{"fraction_of_gpu_memory_to_use", "nan", "must be in (0, 1]"},
        BadValue{"fraction_of_gpu_memory_to_use", "most", "expected a decimal number"},
        BadValue{"fraction_of_cpu_memory_to_use", "-0.1", "must be in (0, 1]"},
        BadValue{"fraction_of_cuda_pinned_memory_to_use", "1.01", "must be in (0, 1]"},
        BadValue{"garbage_collection_threshold", "1.0", "strictly between 0 and 1"},
        BadValue{"garbage_collection_threshold", "-0.5", "strictly between 0 and 1"},
        BadValue{"allocator_strategy", "buddy", "naive_best_fit | auto_growth | thread_local"},
        BadValue{"allocator_strategy", "AUTO_GROWTH", "allowed"},
        BadValue{"roundup_power2_divisions", "[256:1,512:2", "must end with ']'"},
        BadValue{"roundup_power2_divisions", "[256:3]", "power of two"},
        BadValue{"roundup_power2_divisions", "6", "power of two"},
        BadValue{"roundup_power2_divisions", "[300:1]", "key 300 MB is not a power of two"},
        BadValue{"roundup_power2_divisions", "[512:1,256:2]", "keys must increase"}));

TEST_F(FlagsTest, UnknownAndUnsupportedConfKeysListTheSupportedOnes) {
  std::string error = ErrorOf([] { ApplyAllocConf("max_split_size_mb:64,foo:1"); });
  EXPECT_THAT(error, HasSubstr("unknown key 'foo'"));
  EXPECT_THAT(error, HasSubstr("supported keys: allocator_strategy, "));
  EXPECT_THAT(error, HasSubstr("garbage_collection_threshold"));
  EXPECT_EQ(Current().max_split_size_mb, 0u);  // rolled back

  SetEnv("STRATA_ALLOC_CONF", "backend:cudaMallocAsync");
  error = ErrorOf([] { LoadFromEnvironment(); });
  EXPECT_THAT(error, HasSubstr("STRATA_ALLOC_CONF"));
  EXPECT_THAT(error, HasSubstr("'backend' is a PyTorch allocator option"));
  EXPECT_THAT(error, HasSubstr("supported keys: "));
}

// PyTorch's expandable_segments is strata's virtual-memory pool.
TEST_F(FlagsTest, ExpandableSegmentsSelectsTheVirtualMemoryPool) {
  ApplyAllocConf("expandable_segments:True");
  EXPECT_TRUE(Current().use_virtual_memory_auto_growth);
  ApplyAllocConf("expandable_segments:False");
  EXPECT_FALSE(Current().use_virtual_memory_auto_growth);
  EXPECT_THAT(ErrorOf([] { ApplyAllocConf("expandable_segments:maybe"); }),
              HasSubstr("expandable_segments"));
}

TEST_F(FlagsTest, MalformedConfNamesTheProblem) {
  struct Case {
    const char* conf;
    const char* reason;
  };
  for (const Case& c : {Case{"garbage", "'garbage' has no ':'"}, Case{":5", "empty key"},
                        Case{"max_split_size_mb:", "empty value"},
                        Case{"max_split_size_mb:64,,free_idle_chunk:true", "empty entry"},
                        Case{"roundup_power2_divisions:[256:1", "never closed"}}) {
    std::string error = ErrorOf([&] { ApplyAllocConf(c.conf, "strata_set_flags"); });
    EXPECT_THAT(error, HasSubstr("strata_set_flags")) << c.conf;
    EXPECT_THAT(error, HasSubstr(c.conf));
    EXPECT_THAT(error, HasSubstr(c.reason));
  }
  EXPECT_EQ(Current(), AllocatorFlags::Defaults());
}

TEST_F(FlagsTest, CrossFieldConstraintNamesBothFlags) {
  std::string error =
      ErrorOf([] { ApplyAllocConf("gpu_memory_limit_mb:1024,initial_gpu_memory_in_mb:2048"); });
  EXPECT_THAT(error, HasSubstr("initial_gpu_memory_in_mb=2048 exceeds gpu_memory_limit_mb=1024"));
  EXPECT_THAT(error, HasSubstr("'2048'"));
  EXPECT_EQ(Current(), AllocatorFlags::Defaults());
  // Fine in order: a limit alone, then a chunk under it.
  ApplyAllocConf("gpu_memory_limit_mb:1024");
  ApplyAllocConf("initial_gpu_memory_in_mb:512");
  EXPECT_EQ(Current().initial_gpu_memory_in_mb, 512u);
}

// Values the allocator would refuse at its first allocation, or never return from, are refused
// when set, naming the flag.
TEST_F(FlagsTest, ValuesTheAllocatorCannotHonourAreRefusedWhenSet) {
  for (const char* conf :
       {"max_split_size_mb:1099511627777", "auto_growth_chunk_size_in_mb:2199023255552",
        "gpu_memory_limit_mb:17592186044415", "gpu_allocator_retry_time:9223372036854775807",
        "gpu_allocator_retry_time:3600001"}) {
    const std::string error = ErrorOf([&] { ApplyAllocConf(conf, "strata_set_flags"); });
    const std::string key(conf, std::string(conf).find(':'));
    EXPECT_THAT(error, HasSubstr(key + "=")) << conf;
  }
  EXPECT_EQ(Current(), AllocatorFlags::Defaults());
  ApplyAllocConf("max_split_size_mb:1099511627776,gpu_allocator_retry_time:3600000");
  EXPECT_EQ(Current().max_split_size_mb, AllocatorFlags::kMaxMb);
}

TEST_F(FlagsTest, CurrentValidatesValuesSetAroundTheApi) {
  absl::SetFlag(&FLAGS_garbage_collection_threshold, 2.0);
  absl::SetFlag(&FLAGS_fraction_of_gpu_memory_to_use, 0.0);
  std::string error = ErrorOf([] { Current(); });
  EXPECT_THAT(error, HasSubstr("garbage_collection_threshold=2"));
  EXPECT_THAT(error, HasSubstr("fraction_of_gpu_memory_to_use=0"));
  EXPECT_EQ(AllocatorFlags::ReadLive().Problems().size(), 2u);
}

TEST_F(FlagsTest, VirtualMemoryPageMustBeAPowerOfTwo) {
  for (const char* conf : {"virtual_memory_page_mb:3", "virtual_memory_page_mb:24"}) {
    const std::string error = ErrorOf([&] { ApplyAllocConf(conf, "strata_set_flags"); });
    EXPECT_THAT(error, HasSubstr("not a power of two")) << conf;
  }
  ApplyAllocConf("virtual_memory_page_mb:16");
  EXPECT_EQ(Current().virtual_memory_page_mb, 16u);
}

TEST_F(FlagsTest, StrategyNamesRoundTrip) {
  for (AllocatorStrategy s : {AllocatorStrategy::kNaiveBestFit, AllocatorStrategy::kAutoGrowth,
                              AllocatorStrategy::kThreadLocal}) {
    EXPECT_EQ(ParseAllocatorStrategy(AllocatorStrategyName(s)), s);
    SetFlag("allocator_strategy", AllocatorStrategyName(s));
    EXPECT_EQ(Current().allocator_strategy, s);
  }
  std::string error = ErrorOf([] { ParseAllocatorStrategy("buddy"); });
  EXPECT_THAT(error, HasSubstr("'buddy'"));
  EXPECT_THAT(error, HasSubstr("naive_best_fit | auto_growth | thread_local"));
}

}  // namespace
}  // namespace strata::flags
