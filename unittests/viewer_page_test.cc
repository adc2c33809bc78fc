#include "tools/viewer_page.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "support/test_files.h"
#include "support/test_paths.h"

namespace strata::tools {
namespace {

using ::strata::testing::BundledTracesDir;
using ::strata::testing::ReadFile;
using ::strata::testing::RepoRoot;
using ::strata::testing::TempPath;
using ::strata::testing::WriteFile;
using Json = nlohmann::json;

// The JSON a page embeds, read back from the page.
Json EmbeddedData(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"data\">";
  const std::size_t start = page.find(open);
  EXPECT_NE(start, std::string::npos);
  const std::size_t end = page.find("</script>", start);
  return Json::parse(page.substr(start + open.size(), end - start - open.size()));
}

// A small recording: two segments, timed events, a context, an oom and an empty_cache.
constexpr char kRecording[] =
    "# {\"recorded_by\": \"strata\", \"place\": \"gpu:0\", \"recorded\": 12, \"dropped\": 3}\n"
    "seg malloc 0x1000 2097152 t=1\n"
    "a 1 1000000 0 t=10 c=1 addr=0x1000\n"
    "a 2 500000 1 t=20\n"
    "seg malloc 0x300000 2097152 t=25\n"
    "a 3 1500000 0 t=30 c=2\n"
    "f 1 0 t=40\n"
    "oom 9000000 0 t=45 c=2\n"
    "f 3 0 t=50\n"
    "empty_cache 2097152 t=55\n"
    "seg free 0x300000 2097152 t=55\n"
    "ctx 1 \"train.py:3 </script><b>x</b>\"\n"
    "ctx 2 \"model.py:9\"\n";

TEST(ViewerPageTest, TimelineDataOfARecording) {
  const Trace trace = Trace::Parse(kRecording, "rec.trace");
  const Json data = ViewerData(&trace, nullptr, ViewerOptions{});
  const Json& t = data["timeline"];
  ASSERT_TRUE(t.is_object());
  EXPECT_TRUE(data["segments"].is_null());
  EXPECT_EQ(t["num_events"], 5);
  EXPECT_EQ(t["peak_requested"], 3000000);
  EXPECT_EQ(t["peak_reserved"], 4194304);
  ASSERT_EQ(t["bands"].size(), 3u);
  // Bands in allocation order: [alloc event, free event, bytes, stream, id, ctx, addr, t alloc,
  // t free]; one never freed ends at num_events.
  EXPECT_EQ(t["bands"][0], Json::parse("[0, 3, 1000000, 0, 1, 1, \"0x1000\", 10, 40]"));
  EXPECT_EQ(t["bands"][1], Json::parse("[1, 5, 500000, 1, 2, null, null, 20, null]"));
  EXPECT_EQ(t["bands"][2][5], 2);
  // Reserved per event: 2 MiB, then 4 MiB from the third event on.
  EXPECT_EQ(t["series"]["reserved"], Json::parse("[2097152, 2097152, 4194304, 4194304, 4194304]"));
  EXPECT_EQ(t["series"]["requested"], Json::parse("[1000000, 1500000, 3000000, 2000000, 500000]"));
  EXPECT_EQ(t["series"]["time"], Json::parse("[10, 20, 30, 40, 50]"));
  ASSERT_EQ(t["markers"].size(), 2u);
  EXPECT_EQ(t["markers"][0][1], "oom");
  EXPECT_EQ(t["markers"][0][0], 4);
  EXPECT_EQ(t["markers"][1][1], "empty_cache");
  EXPECT_EQ(t["contexts"]["1"], "train.py:3 </script><b>x</b>");
  EXPECT_EQ(t["contexts"]["2"], "model.py:9");
  const std::string figures = data["figures"].dump();
  EXPECT_NE(figures.find("[\"recorded / dropped events\",\"12 / 3\"]"), std::string::npos)
      << figures;
  EXPECT_NE(figures.find("[\"place\",\"gpu:0\"]"), std::string::npos) << figures;
}

TEST(ViewerPageTest, PageIsSelfContainedAndItsDataCannotCloseTheScript) {
  const Trace trace = Trace::Parse(kRecording, "rec.trace");
  ViewerOptions options;
  options.title = "a <title> & more";
  const std::string page = RenderViewerPage(&trace, nullptr, options);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("<div id=\"status\""), std::string::npos);
  EXPECT_NE(page.find("window.onerror"), std::string::npos);
  EXPECT_NE(page.find("<title>a &lt;title&gt; &amp; more - strata memory viewer</title>"),
            std::string::npos);
  // Nothing from the network.
  EXPECT_EQ(page.find("http://"), std::string::npos);
  EXPECT_EQ(page.find("https://"), std::string::npos);
  EXPECT_EQ(page.find("src="), std::string::npos);
  // The context's "</script>" is escaped inside the JSON, so exactly two scripts close.
  std::size_t closes = 0;
  for (std::size_t p = page.find("</script>"); p != std::string::npos;
       p = page.find("</script>", p + 1)) {
    ++closes;
  }
  EXPECT_EQ(closes, 2u);
  const Json data = EmbeddedData(page);
  EXPECT_EQ(data["title"], "a <title> & more");
  EXPECT_EQ(data["timeline"]["contexts"]["1"], "train.py:3 </script><b>x</b>");
}

TEST(ViewerPageTest, BundledTraceKeepsTheLargestAllocationsAsBands) {
  const Trace trace = Trace::Load(BundledTracesDir() + "/resnet50_train.trace.gz");
  ViewerOptions options;
  options.max_bands = 500;
  options.max_points = 1000;
  const std::string page = RenderViewerPage(&trace, nullptr, options);
  EXPECT_LT(page.size(), std::size_t{1} << 20);
  const Json data = EmbeddedData(page);
  const Json& t = data["timeline"];
  EXPECT_EQ(t["bands"].size(), 500u);
  EXPECT_EQ(t["small_count"], trace.num_allocations() - 500);
  EXPECT_EQ(t["peak_requested"], trace.peak_requested_bytes());
  EXPECT_LE(t["series"]["x"].size(), 1000u);
  EXPECT_FALSE(t["series"].contains("reserved"));  // no seg lines: no reserved series
  EXPECT_FALSE(t["series"].contains("time"));
  // The bucketed maxima keep the exact peak.
  std::uint64_t max = 0;
  for (const Json& v : t["series"]["requested"]) max = std::max(max, v.get<std::uint64_t>());
  EXPECT_EQ(max, trace.peak_requested_bytes());
  // Every band is at least as large as any allocation left out.
  std::uint64_t smallest_band = UINT64_MAX;
  for (const Json& b : t["bands"])
    smallest_band = std::min(smallest_band, b[2].get<std::uint64_t>());
  std::vector<std::uint64_t> sizes;
  for (const TraceEvent& e : trace.events()) {
    if (e.is_alloc()) sizes.push_back(e.bytes);
  }
  std::sort(sizes.rbegin(), sizes.rend());
  EXPECT_EQ(smallest_band, sizes[499]);
  // PyTorch's peak reserved from the header is drawn as a reference line.
  ASSERT_EQ(t["references"].size(), 1u);
  EXPECT_EQ(t["references"][0][1], trace.header().torch_peak_reserved);
}

TEST(ViewerPageTest, ReplaySeriesAndReferenceLinesAreEmbedded) {
  const Trace trace = Trace::Parse("a 1 100 0\na 2 200 0\nf 1 0\nf 2 0\n", "t.trace");
  ViewerOptions options;
  options.max_points = 2;
  options.references.push_back({"PyTorch peak reserved", 4096});
  for (std::uint64_t i = 0; i < 4; ++i) options.series.push_back({i, i, 100 * i, 512 * i, 2048});
  const Json data = ViewerData(&trace, nullptr, options);
  const Json& e = data["timeline"]["external"];
  EXPECT_EQ(e["x"], Json::parse("[0, 2]"));
  EXPECT_EQ(e["allocated"], Json::parse("[512, 1536]"));
  EXPECT_EQ(e["reserved"], Json::parse("[2048, 2048]"));
  EXPECT_EQ(data["timeline"]["references"], Json::parse("[[\"PyTorch peak reserved\", 4096]]"));
  options.series.push_back({1, 1, 0, 0, 0});
  EXPECT_THROW(ViewerData(&trace, nullptr, options), std::invalid_argument);
}

TEST(ViewerPageTest, ASeriesAloneMakesATimelineWithoutBands) {
  ViewerOptions options;
  options.title = "replay";
  for (std::uint64_t i = 0; i < 10; ++i) options.series.push_back({i, i, i, 2 * i, 4 * i});
  const Json data = ViewerData(nullptr, nullptr, options);
  EXPECT_EQ(data["timeline"]["num_events"], 10);
  EXPECT_TRUE(data["timeline"]["bands"].empty());
  EXPECT_EQ(data["timeline"]["external"]["reserved"].size(), 10u);
  EXPECT_TRUE(data["segments"].is_null());
  EXPECT_TRUE(ViewerData(nullptr, nullptr, ViewerOptions{})["timeline"].is_null());
}

TEST(ViewerPageTest, SnapshotBecomesASegmentMap) {
  ASSERT_FALSE(RepoRoot().empty());
  const Json snapshot = LoadSnapshot(RepoRoot() + "/unittests/testdata/viewer_snapshot.json");
  const Json data = ViewerData(nullptr, &snapshot, ViewerOptions{});
  EXPECT_TRUE(data["timeline"].is_null());
  EXPECT_EQ(data["title"], "gpu:0");
  const Json& s = data["segments"];
  ASSERT_EQ(s["list"].size(), 4u);
  EXPECT_EQ(s["total"], 20971520 + 2097152 + 67108864 + 41943040);
  EXPECT_EQ(s["max_size"], 67108864);
  // [address, size, pool, mapped, blocks]; blocks: [offset, size, requested, state, stream].
  const Json& first = s["list"][0];
  EXPECT_EQ(first[0], "0x7f0000000000");
  EXPECT_EQ(first[2], "stream 0");
  ASSERT_EQ(first[4].size(), 5u);
  EXPECT_EQ(first[4][1], Json::parse("[1048576, 4194304, 4194304, 0, 0]"));
  EXPECT_EQ(first[4][2], Json::parse("[5242880, 2097152, 0, 1, null]"));
  EXPECT_EQ(first[4][3][3], 2);          // pending_events
  EXPECT_EQ(s["list"][2][3], 33554432);  // mapped bytes
  EXPECT_EQ(s["list"][2][4][1][3], 3);   // named_cache
  EXPECT_EQ(s["list"][3][4][0][3], 4);   // graph_pool
  EXPECT_EQ(s["state_bytes"][0], 1048576 + 4194304 + 512 + 1024 + 16777216);
}

TEST(ViewerPageTest, SnapshotSchemaErrorsNameThePointer) {
  auto error = [](const char* text) {
    try {
      CheckSnapshot(Json::parse(text));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("[]"), "snapshot: the top level must be a JSON object");
  EXPECT_EQ(error("{}"), "snapshot: the top level has no \"segments\"");
  EXPECT_EQ(error("{\"segments\": [{\"address\": 1}]}"), "snapshot: /segments/0 has no \"size\"");
  EXPECT_EQ(error("{\"segments\": [{\"address\": 1, \"size\": -2}]}"),
            "snapshot: /segments/0/size must be a non-negative integer");
  EXPECT_EQ(error("{\"segments\": [{\"address\": 1, \"size\": 2, \"blocks\": [{\"address\": 1, "
                  "\"size\": 2}]}]}"),
            "snapshot: /segments/0/blocks/0 has no \"state\"");
  EXPECT_EQ(error("{\"segments\": []}"), "no error");
}

// ---- a comparison of two recordings ---------------------------------------------------------

TEST(ViewerPageTest, ComparisonDrawsBothCurvesTheGapAndTheMoments) {
  const Trace trace =
      Trace::Parse("a 1 100 0 t=5\na 2 200 1 t=6\nf 1 0 t=7\nf 2 1 t=8\n", "w.trace");
  ViewerOptions options;
  options.max_points = 2;  // buckets of two events
  options.comparison =
      ViewerComparison{.a = MemoryCurve{"base", {1000, 1000, 1000, 500}, {100, 300, 200, 0}},
                       .b = MemoryCurve{"other", {1000, 3000, 1000, 0}, {}},
                       .top = 1};
  const Json data = ViewerData(&trace, nullptr, options);
  EXPECT_TRUE(data["timeline"].is_null());
  EXPECT_EQ(data["title"], "w: base vs other");
  const Json& c = data["comparison"];
  ASSERT_TRUE(c.is_object());
  EXPECT_EQ(c["labels"], Json::parse("[\"base\", \"other\"]"));
  EXPECT_EQ(c["num_events"], 4);
  const Json& s = c["series"];
  EXPECT_EQ(s["x"], Json::parse("[0, 2]"));
  EXPECT_EQ(s["requested"], Json::parse("[300, 200]"));
  EXPECT_EQ(s["reserved"], Json::parse("[[1000, 1000], [3000, 1000]]"));
  EXPECT_EQ(s["allocated"], Json::parse("[[300, 200], null]"));  // b's allocated is unknown
  // Per event the gap is 0, +2000, 0, -500: a bucket keeps its largest magnitude, signed.
  EXPECT_EQ(s["gap"], Json::parse("[2000, -500]"));
  EXPECT_EQ(s["time"], Json::parse("[5, 7]"));
  EXPECT_EQ(c["peaks"], Json::parse("[[1000, 0], [3000, 1]]"));
  EXPECT_EQ(c["widest"], Json::parse("[2000, 1]"));
  ASSERT_EQ(c["moments"].size(), 1u);  // top = 1
  const Json& m = c["moments"][0];
  EXPECT_EQ(m["event"], 1);
  EXPECT_EQ(m["kind"], "alloc");
  EXPECT_EQ(m["bytes"], 200);
  EXPECT_EQ(m["stream"], 1);
  EXPECT_EQ(m["id"], 2);
  EXPECT_EQ(m["requested"], 300);
  EXPECT_EQ(m["reserved"], Json::parse("[1000, 3000]"));
  EXPECT_EQ(m["change"], Json::parse("[0, 2000]"));
  EXPECT_EQ(m["gap_before"], 0);
  EXPECT_EQ(m["gap_after"], 2000);
  EXPECT_EQ(m["time"], 6);
  const std::string figures = data["figures"].dump();
  EXPECT_NE(figures.find("[\"widest gap\",\"+1.95 KiB at event 1\"]"), std::string::npos)
      << figures;
  EXPECT_NE(figures.find("[\"the gap grows most at\",\"event 1 (alloc of 200 B on stream 1): A "
                         "+0 B, B +1.95 KiB\"]"),
            std::string::npos)
      << figures;
  EXPECT_NE(figures.find("[\"peak reserved B - A\",\"+1.95 KiB (+200.0%)\"]"), std::string::npos)
      << figures;
}

TEST(ViewerPageTest, ComparisonNeedsATraceAndOneFigurePerEvent) {
  const Trace trace = Trace::Parse("a 1 100 0\nf 1 0\n", "w.trace");
  ViewerOptions options;
  options.comparison =
      ViewerComparison{.a = MemoryCurve{"a", {1, 2}, {}}, .b = MemoryCurve{"b", {1, 2, 3}, {}}};
  EXPECT_THROW(ViewerData(&trace, nullptr, options), std::invalid_argument);
  EXPECT_THROW(ViewerData(nullptr, nullptr, options), std::invalid_argument);
  options.comparison->b.reserved.pop_back();
  options.comparison->a.allocated = {1};
  EXPECT_THROW(ViewerData(&trace, nullptr, options), std::invalid_argument);
  options.comparison->a.allocated.clear();
  EXPECT_TRUE(ViewerData(&trace, nullptr, options)["comparison"].is_object());
  // Without a comparison there is none.
  EXPECT_TRUE(ViewerData(&trace, nullptr, ViewerOptions{})["comparison"].is_null());
}

// ---- the tool ------------------------------------------------------------------------------

struct ToolRun {
  int status;
  std::string out, err;
};

ToolRun RunTool(std::vector<std::string> args) {
  args.insert(args.begin(), "strata-viz");
  std::ostringstream out, err;
  const int status = RunViewerTool(args, out, err);
  return {status, out.str(), err.str()};
}

TEST(ViewerToolTest, WritesAPageFromATraceAndASnapshot) {
  const std::string page = TempPath("page.html");
  const ToolRun r =
      RunTool({"--trace=" + BundledTracesDir() + "/resnet50_train.trace.gz",
               "--snapshot=" + RepoRoot() + "/unittests/testdata/viewer_snapshot.json",
               "--out=" + page, "--title=resnet"});
  ASSERT_EQ(r.status, 0) << r.err;
  const Json data = EmbeddedData(ReadFile(page));
  EXPECT_EQ(data["title"], "resnet");
  EXPECT_EQ(data["timeline"]["bands"].size(), 3000u);
  EXPECT_EQ(data["segments"]["list"].size(), 4u);
  std::remove(page.c_str());
}

// The tool refuses `args` with status 2 and an error that says `message`.
void ExpectRefused(const std::vector<std::string>& args, const std::string& message) {
  const ToolRun r = RunTool(args);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
}

TEST(ViewerToolTest, RejectsMissingAndMalformedInputsWithStatus2) {
  const std::string page = TempPath("never.html");
  const std::string missing = TempPath("missing.trace");
  ExpectRefused({"--trace=" + missing, "--out=" + page}, missing + ": cannot open");

  const std::string bad_trace = TempPath("bad.trace");
  WriteFile(bad_trace, "a 1 10 0\nq 1\n");
  ExpectRefused({"--trace=" + bad_trace, "--out=" + page}, bad_trace + ":2: unknown event kind");

  const std::string bad_json = TempPath("bad.json");
  WriteFile(bad_json, "{\"segments\": [\n  {\"address\": 1,, }\n]}\n");
  ExpectRefused({"--snapshot=" + bad_json, "--out=" + page},
                bad_json + ": malformed JSON at line 2");

  const std::string bad_schema = TempPath("schema.json");
  WriteFile(bad_schema, "{\"segments\": [{\"address\": 1, \"size\": \"big\"}]}");
  ExpectRefused({"--snapshot=" + bad_schema, "--out=" + page},
                bad_schema + ": snapshot: /segments/0/size must be");

  ExpectRefused({"--out=" + page}, "give --trace=FILE and/or --snapshot=FILE");
  ExpectRefused({"--trace=x.trace"}, "--out=FILE.html is required");
  ExpectRefused({"--trace=x.trace", "--out=y.html", "extra"}, "unexpected argument 'extra'");
  for (const char* bad : {"--max_bands=0", "--max_bands=-1", "--max_bands=12x", "--max_bands="}) {
    EXPECT_EQ(RunTool({"--trace=x.trace", "--out=y.html", bad}).status, 2) << bad;
  }
  EXPECT_EQ(std::fopen(page.c_str(), "r"), nullptr);  // nothing written
  for (const std::string& p : {bad_trace, bad_json, bad_schema}) std::remove(p.c_str());
}

TEST(ViewerToolTest, ComparesTwoReplaysOfABundledTrace) {
  const std::string page = TempPath("compare.html");
  const ToolRun r = RunTool({"--trace=" + BundledTracesDir() + "/resnet50_train.trace.gz",
                             "--compare=strata:expandable_segments:False", "--out=" + page});
  ASSERT_EQ(r.status, 0) << r.err;
  const Json data = EmbeddedData(ReadFile(page));
  EXPECT_EQ(data["title"],
            "resnet50_train: strata (default flags) vs strata "
            "expandable_segments:False");
  const Json& c = data["comparison"];
  ASSERT_TRUE(c.is_object());
  EXPECT_EQ(c["num_events"], 7101);
  EXPECT_FALSE(c["series"]["allocated"][0].is_null());
  EXPECT_FALSE(c["series"]["allocated"][1].is_null());
  EXPECT_EQ(c["moments"].size(), 10u);
  // PyTorch's own peak, from the converted trace's header, is drawn on the same axis.
  EXPECT_EQ(c["references"][0][0], "PyTorch peak reserved");
  std::remove(page.c_str());
}

TEST(ViewerToolTest, RejectsBadComparisonsWithAMessage) {
  const std::string page = TempPath("never_compare.html");
  const std::string trace = "--trace=" + BundledTracesDir() + "/resnet50_train.trace.gz";
  auto expect_error = [&](std::vector<std::string> args, int status, const std::string& message) {
    args.push_back("--out=" + page);
    const ToolRun r = RunTool(args);
    EXPECT_EQ(r.status, status) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  };
  expect_error({trace, "--compare=strata:nope:1"}, 2,
               "strata-viz: --compare=strata:nope:1: unknown key 'nope'");
  expect_error({trace, "--compare=strata", "--base=strata:thread_cache_mb:x"}, 2,
               "strata-viz: --base=strata:thread_cache_mb:x: entry 'thread_cache_mb:x': invalid "
               "value");
  expect_error({trace, "--compare=strata:expandable_segments"}, 2, "has no ':'");
  expect_error({trace, "--compare=vmm"}, 2, "--compare=vmm: expected strata, strata:CONF");
  expect_error({trace, "--base=strata"}, 2, "--base=SIDE needs --compare=SIDE");
  expect_error(
      {"--snapshot=" + RepoRoot() + "/unittests/testdata/viewer_snapshot.json", "--compare=strata"},
      2, "--compare needs --trace=FILE");
  expect_error({trace, "--compare=strata",
                "--snapshot=" + RepoRoot() + "/unittests/testdata/viewer_snapshot.json"},
               2, "cannot be combined with --compare");
  expect_error({trace, "--compare=recorded"}, 2, "--compare=recorded: ");
  expect_error({trace, "--compare=trace:" + TempPath("missing.trace")}, 2,
               TempPath("missing.trace") + ": cannot open");
  // Two traces of different lengths.
  const std::string other = TempPath("other.trace");
  WriteFile(other, "seg malloc 0x1000 4096\na 1 100 0\nf 1 0\n");
  expect_error({trace, "--compare=trace:" + other}, 2,
               other + " has 2 allocation/free events where ");
  expect_error({"--trace=" + other, "--base=recorded",
                "--compare=trace:" + BundledTracesDir() + "/resnet50_train.trace.gz"},
               2, "has 7101 allocation/free events where " + other + " has 2");
  // A replay that runs out of memory under a limit.
  expect_error({trace, "--compare=strata:gpu_memory_limit_mb:1000,gpu_allocator_retry_time:0"}, 1,
               "--compare=strata:gpu_memory_limit_mb:1000,gpu_allocator_retry_time:0: the replay "
               "ran out of memory at event ");
  EXPECT_EQ(std::fopen(page.c_str(), "r"), nullptr);  // nothing written
  std::remove(other.c_str());
}

TEST(ViewerToolTest, UnwritableOutputIsStatus1NamingThePath) {
  const std::string page = TempPath("no_such_dir/page.html");
  const ToolRun r = RunTool(
      {"--snapshot=" + RepoRoot() + "/unittests/testdata/viewer_snapshot.json", "--out=" + page});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("cannot write to " + page + ":"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace strata::tools
