#include "tools/compare_sides.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flags/allocator_flags.h"
#include "platform/emulated_runtime.h"
#include "support/error_of.h"
#include "support/test_paths.h"
#include "tools/replay.h"
#include "tools/trace.h"

namespace strata::tools {
namespace {

using testing::ErrorOf;

using flags::AllocatorFlags;

Trace Bundled() { return Trace::Load(testing::BundledTracesDir() + "/resnet50_train.trace.gz"); }

// ---- flags from a config -----------------------------------------------------------------------

TEST(FlagsFromConfTest, ChangesTheDefaultsByTheEntriesInOrder) {
  EXPECT_EQ(FlagsFromConf(""), AllocatorFlags::Defaults());
  const AllocatorFlags f = FlagsFromConf(
      "expandable_segments:True, thread_cache_mb:4,thread_cache_mb:8,"
      "allocator_strategy:thread_local,roundup_power2_divisions:[256:1,>:8]");
  AllocatorFlags expected = AllocatorFlags::Defaults();
  expected.use_virtual_memory_auto_growth = true;  // PyTorch's key for it
  expected.thread_cache_mb = 8;                    // the later entry wins
  expected.allocator_strategy = flags::AllocatorStrategy::kThreadLocal;
  expected.roundup_power2_divisions = f.roundup_power2_divisions;
  EXPECT_EQ(f, expected);
  EXPECT_NE(f.roundup_power2_divisions, AllocatorFlags::Defaults().roundup_power2_divisions);
}

TEST(FlagsFromConfTest, LeavesTheLiveFlagsAlone) {
  const AllocatorFlags before = AllocatorFlags::ReadLive();
  FlagsFromConf("gpu_memory_limit_mb:100,expandable_segments:true");
  EXPECT_EQ(AllocatorFlags::ReadLive(), before);
}

TEST(FlagsFromConfTest, RefusesUnknownKeysBadValuesAndBrokenConstraints) {
  const std::string unknown = ErrorOf([] { FlagsFromConf("thread_cache_mb:4,nope:1"); });
  EXPECT_EQ(unknown.rfind("unknown key 'nope' (in entry 'nope:1'); supported keys: "
                          "allocator_strategy, ",
                          0),
            0u)
      << unknown;
  EXPECT_NE(unknown.find("expandable_segments"), std::string::npos) << unknown;
  EXPECT_EQ(ErrorOf([] { FlagsFromConf("thread_cache_mb:lots"); }),
            "entry 'thread_cache_mb:lots': invalid value; expected a non-negative integer");
  EXPECT_NE(ErrorOf([] { FlagsFromConf("allocator_strategy:fastest"); }).find("fastest"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { FlagsFromConf("max_split_size_mb:5"); }).find("max_split_size_mb=5"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { FlagsFromConf("expandable_segments"); }).find("has no ':'"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { FlagsFromConf(std::string(70000, 'x')); }).find("70000 bytes long"),
            std::string::npos);
}

// ---- side specs --------------------------------------------------------------------------------

TEST(ParseCompareSideTest, ReadsEachKindOfSide) {
  CompareSide s = ParseCompareSide("strata");
  EXPECT_EQ(s.kind, CompareSide::Kind::kStrata);
  EXPECT_EQ(s.conf, "");
  EXPECT_EQ(s.flags, AllocatorFlags::Defaults());

  s = ParseCompareSide("strata:expandable_segments:True,thread_cache_mb:0");
  EXPECT_EQ(s.kind, CompareSide::Kind::kStrata);
  EXPECT_EQ(s.conf, "expandable_segments:True,thread_cache_mb:0");
  EXPECT_TRUE(s.flags.use_virtual_memory_auto_growth);
  EXPECT_EQ(s.flags.thread_cache_mb, 0u);
  EXPECT_EQ(s.spec, "strata:expandable_segments:True,thread_cache_mb:0");

  EXPECT_EQ(ParseCompareSide("recorded").kind, CompareSide::Kind::kRecorded);
  s = ParseCompareSide("trace:runs/b.trace.gz");
  EXPECT_EQ(s.kind, CompareSide::Kind::kRecording);
  EXPECT_EQ(s.path, "runs/b.trace.gz");
}

TEST(ParseCompareSideTest, RefusesWhatIsNoSide) {
  const std::string expected =
      "expected strata, strata:CONF (e.g. strata:expandable_segments:True), recorded or "
      "trace:FILE";
  for (const char* spec : {"", "Strata", "trace:", "recorded:x", "pytorch", "strata_vmm"}) {
    EXPECT_EQ(ErrorOf([&] { ParseCompareSide(spec); }), expected) << spec;
  }
  EXPECT_NE(ErrorOf([] { ParseCompareSide("strata:no_such_flag:1"); }).find("no_such_flag"),
            std::string::npos);
}

// ---- curves ------------------------------------------------------------------------------------

TEST(CurveOfSideTest, AReplayGivesReservedAndAllocatedAfterEveryEvent) {
  const Trace trace = Bundled();
  const MemoryCurve c = CurveOfSide(ParseCompareSide("strata"), trace);
  EXPECT_EQ(c.label, "strata (default flags)");
  ASSERT_EQ(c.reserved.size(), trace.num_events());
  ASSERT_EQ(c.allocated.size(), trace.num_events());
  for (std::size_t i = 0; i < c.reserved.size(); ++i) {
    ASSERT_GE(c.reserved[i], c.allocated[i]) << "event " << i;
  }
  // The same peak as strata-replay's.
  platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = 144ull << 30});
  Replayer::Options options;
  options.timed_pass = false;
  const ReplayResult r =
      Replayer(&runtime, "emulated", AllocatorFlags::Defaults()).Run(trace, options);
  EXPECT_EQ(*std::max_element(c.reserved.begin(), c.reserved.end()), r.peak_reserved_bytes);
  EXPECT_EQ(*std::max_element(c.allocated.begin(), c.allocated.end()), r.peak_allocated_bytes);
}

// A replay's own recording, read back from its seg lines, gives the replay's reserved bytes at
// every event: the two ways of getting a side agree on which event a device call belongs to.
TEST(CurveOfSideTest, ARecordingsSegLinesMatchTheReplayThatWroteIt) {
  const Trace trace = Bundled();
  for (const char* conf : {"", "expandable_segments:True", "allocator_strategy:thread_local"}) {
    SCOPED_TRACE(conf);
    const AllocatorFlags flags = FlagsFromConf(conf);
    platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = 144ull << 30});
    std::string history;
    std::vector<ViewerSample> series;
    Replayer::Options options;
    options.timed_pass = false;
    options.history = &history;
    options.series = &series;
    Replayer(&runtime, "emulated", flags).Run(trace, options);
    const Trace recording = Trace::Parse(history, "replay.trace");
    // The recording goes on with the frees of what the trace left live, made after the trace.
    ASSERT_EQ(recording.num_events(), trace.num_events() + trace.live_at_end());
    const MemoryCurve from_recording = CurveOfSide(ParseCompareSide("recorded"), recording);
    EXPECT_EQ(from_recording.label, "replay.trace (recorded)");
    ASSERT_EQ(series.size(), trace.num_events());
    for (std::size_t i = 0; i < series.size(); ++i) {
      ASSERT_EQ(from_recording.reserved[i], series[i].reserved) << "event " << i;
    }
  }
}

TEST(CurveOfSideTest, SidesWithoutReservedFiguresOrOfOtherEventsAreRefused) {
  const Trace trace = Bundled();
  EXPECT_NE(ErrorOf([&] {
              CurveOfSide(ParseCompareSide("recorded"), trace);
            }).find("resnet50_train.trace.gz has no seg lines"),
            std::string::npos);

  const std::string path =
      absl::StrCat(::testing::TempDir(), "/strata_compare_sides_test_", ::getpid(), ".trace");
  std::FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("seg malloc 0x1000 4096\na 1 100 0\nf 1 0\n", f);
  std::fclose(f);
  EXPECT_NE(ErrorOf([&] {
              CurveOfSide(ParseCompareSide("trace:" + path), trace);
            }).find(absl::StrCat(path, " has 2 allocation/free events where ")),
            std::string::npos);
  // The same two events: accepted, its seg lines give the curve.
  const Trace two = Trace::Parse("a 5 100 2\nf 5 2\n", "two.trace");
  const MemoryCurve c = CurveOfSide(ParseCompareSide("trace:" + path), two);
  EXPECT_EQ(c.reserved, (std::vector<std::uint64_t>{4096, 4096}));
  EXPECT_TRUE(c.allocated.empty());
  std::remove(path.c_str());

  EXPECT_NE(ErrorOf<TraceError>([&] {
              CurveOfSide(ParseCompareSide("trace:" + path), trace);
            }).find(path + ": cannot open"),
            std::string::npos);
}

TEST(CurveOfSideTest, AReplayOutOfMemorySaysWhere) {
  const std::string what = ErrorOf<std::runtime_error>([] {
    CurveOfSide(ParseCompareSide("strata:gpu_memory_limit_mb:1000,gpu_allocator_retry_time:0"),
                Bundled());
  });
  EXPECT_EQ(what.rfind("the replay ran out of memory at event ", 0), 0u) << what;
}

}  // namespace
}  // namespace strata::tools
