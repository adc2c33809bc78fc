#include "tools/trace.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocation/byte_format.h"
#include "support/test_files.h"
#include "support/test_paths.h"
#include "support/trace_samples.h"

namespace strata::tools {
namespace {

using testing::kRecording;

using ::strata::testing::BundledTracesDir;
using ::strata::testing::ReadFile;
using ::strata::testing::SharedTracesDir;
using ::strata::testing::TempPath;
using ::strata::testing::WriteFile;

void WriteGzip(const std::string& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())),
            static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

// Loads `path`, expecting a TraceError; returns its message ("" and a failure if none).
std::string LoadError(const std::string& path) {
  try {
    Trace::Load(path);
  } catch (const TraceError& e) {
    return e.what();
  }
  ADD_FAILURE() << path << " loaded without error";
  return "";
}

// A valid trace of `n` allocations, each freed two events later, with a header.
std::string SyntheticTrace(int n) {
  std::string text = absl::StrCat("# {\"workload\": \"synthetic\", \"events\": ", 2 * n,
                                  ", \"allocs\": ", n, "}\n");
  for (int i = 0; i < n; ++i) {
    absl::StrAppend(&text, "a ", 1000 + i, " ", 512 * (i % 7 + 1), " 0\n");
    if (i >= 1) absl::StrAppend(&text, "f ", 1000 + i - 1, " 0\n");
  }
  absl::StrAppend(&text, "f ", 1000 + n - 1, " 0\n");
  return text;
}

// ---- parsing and the figures computed from the events ----------------------------------------

TEST(TraceTest, EventsUseDenseIndicesAndFreesCarryTheirBytes) {
  const Trace t = Trace::Parse(
      "# {\"workload\": \"tiny\", \"torch_peak_requested\": 300, \"gpu\": \"X\"}\n"
      "a 70 100 0\n"
      "# a comment\n"
      "\n"
      "a 5 200 1\n"
      "f 70 1\n"
      "a 9 50 0\n",
      "tiny.trace");
  EXPECT_TRUE(t.header().present);
  EXPECT_EQ(t.header().workload, "tiny");
  EXPECT_EQ(t.header().gpu, "X");
  EXPECT_EQ(t.header().torch_peak_requested, 300u);
  ASSERT_EQ(t.num_events(), 4u);
  ASSERT_EQ(t.num_allocations(), 3u);
  const auto& e = t.events();
  EXPECT_TRUE(e[0].is_alloc());
  EXPECT_EQ(e[0].index, 0u);
  EXPECT_EQ(e[1].index, 1u);
  EXPECT_EQ(e[1].stream, 1u);
  // The free of id 70 names allocation 0, carries its 100 bytes and the free's own stream.
  EXPECT_FALSE(e[2].is_alloc());
  EXPECT_EQ(e[2].index, 0u);
  EXPECT_EQ(e[2].bytes, 100u);
  EXPECT_EQ(e[2].stream, 1u);
  EXPECT_EQ(e[3].index, 2u);
  EXPECT_EQ(t.original_id(0), 70u);
  EXPECT_EQ(t.original_id(1), 5u);
  EXPECT_EQ(t.original_id(2), 9u);
  EXPECT_EQ(t.num_streams(), 2u);
  EXPECT_EQ(t.stream_table_size(), 2u);
  EXPECT_EQ(t.peak_requested_bytes(), 300u);
  EXPECT_EQ(t.peak_event(), 1u);
  EXPECT_EQ(t.live_at_end(), 2u);
  EXPECT_EQ(t.live_bytes_at_end(), 250u);
  EXPECT_EQ(t.max_request_bytes(), 200u);
}

TEST(TraceTest, MissingHeaderIsToleratedWithZeros) {
  const Trace t = Trace::Parse("a 1 10 0\r\nf 1 0\r\n", "dir/plain_run.trace.gz");
  EXPECT_FALSE(t.header().present);
  EXPECT_EQ(t.header().torch_peak_requested, 0u);
  EXPECT_EQ(t.workload(), "plain_run");
  EXPECT_EQ(t.num_events(), 2u);
  EXPECT_EQ(t.live_at_end(), 0u);
  EXPECT_EQ(t.peak_requested_bytes(), 10u);
}

TEST(TraceTest, HeaderKeepsKnownKeysAndIgnoresUnknownOnes) {
  const Trace t = Trace::Parse(
      "#{\"workload\": \"w\\\"\\u00e9\\ud83d\\ude00\", \"extra\": {\"nested\": [1, 2.5e3, null]}, "
      "\"flag\": true, \"torch_num_alloc_retries\": 3, \"seconds\": 4.25, "
      "\"torch_version\": \"2.11.0+cu130\"}\n",
      "h");
  EXPECT_EQ(t.header().workload, "w\"\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(t.header().torch_num_alloc_retries, 3u);
  EXPECT_DOUBLE_EQ(t.header().seconds, 4.25);
  EXPECT_EQ(t.header().torch_version, "2.11.0+cu130");
  EXPECT_EQ(t.num_events(), 0u);
}

TEST(TraceTest, LoadsPlainAndGzipFilesAlike) {
  const std::string text = SyntheticTrace(5000);
  const std::string plain = TempPath("plain.trace");
  const std::string gz = TempPath("same.trace.gz");
  WriteFile(plain, text);
  WriteGzip(gz, text);
  const Trace a = Trace::Load(plain);
  const Trace b = Trace::Load(gz);
  EXPECT_EQ(a.num_events(), 10000u);
  EXPECT_EQ(b.num_events(), 10000u);
  EXPECT_EQ(a.peak_requested_bytes(), b.peak_requested_bytes());
  EXPECT_EQ(b.name(), gz);
  for (std::size_t i = 0; i < a.num_events(); i += 997) {
    EXPECT_EQ(a.events()[i].bytes, b.events()[i].bytes);
    EXPECT_EQ(a.events()[i].index, b.events()[i].index);
  }
  std::remove(plain.c_str());
  std::remove(gz.c_str());
}

// ---- a recording: attributes and the other kinds (docs/HISTORY.md) ---------------------------

TEST(TraceRecordingTest, HeaderKeysOfARecording) {
  const Trace t = Trace::Parse(kRecording, "rec.trace");
  EXPECT_EQ(t.header().recorded_by, "strata");
  EXPECT_EQ(t.header().place, "gpu:0");
  EXPECT_EQ(t.header().max_entries, 100u);
  EXPECT_EQ(t.header().recorded, 9u);
  EXPECT_EQ(t.header().dropped, 2u);
}

TEST(TraceRecordingTest, EventsHoldOnlyAllocsAndFrees) {
  const Trace t = Trace::Parse(kRecording, "rec.trace");
  ASSERT_EQ(t.num_events(), 4u);
  EXPECT_EQ(t.num_allocations(), 2u);
  EXPECT_EQ(t.num_streams(), 2u);
  EXPECT_EQ(t.peak_requested_bytes(), 1500u);
  EXPECT_EQ(t.live_at_end(), 0u);
  EXPECT_TRUE(t.events()[0].is_alloc());
  EXPECT_FALSE(t.events()[2].is_alloc());
  EXPECT_EQ(t.events()[2].stream, 1u);
}

TEST(TraceRecordingTest, AttributesAreParallelToEvents) {
  const Trace t = Trace::Parse(kRecording, "rec.trace");
  ASSERT_TRUE(t.has_attributes());
  ASSERT_EQ(t.event_attributes().size(), t.num_events());
  const EventAttributes& a = t.event_attributes()[0];
  EXPECT_TRUE(a.has(EventAttributes::kTime));
  EXPECT_EQ(a.time_ns, 10u);
  EXPECT_EQ(a.thread, 1u);
  EXPECT_EQ(a.context, 7u);
  EXPECT_EQ(a.addr, 0x7f0000000000u);
  EXPECT_FALSE(a.has(EventAttributes::kCount));
  EXPECT_EQ(t.event_attributes()[1].present, 0);  // `a 2 500 1` has none
  EXPECT_EQ(t.event_attributes()[2].time_ns, 20u);
  EXPECT_EQ(t.event_attributes()[2].thread, 2u);
  EXPECT_EQ(t.event_attributes()[3].present, 0);  // after the last attributed event: padded
}

TEST(TraceRecordingTest, OtherKindsKeepTheirPositionAndFields) {
  const Trace t = Trace::Parse(kRecording, "rec.trace");
  using K = OtherEvent::Kind;
  const auto& o = t.other_events();
  ASSERT_EQ(o.size(), 10u);
  EXPECT_EQ(o[0].kind, K::kSegMalloc);
  EXPECT_EQ(o[0].position, 0u);
  EXPECT_EQ(o[0].addr, 0x7f0000000000u);
  EXPECT_EQ(o[0].bytes, 2097152u);
  EXPECT_EQ(o[0].attributes.time_ns, 5u);
  EXPECT_EQ(o[1].kind, K::kPending);
  EXPECT_EQ(o[1].position, 3u);
  EXPECT_EQ(o[1].index, 0u);  // id 1 is allocation 0
  EXPECT_EQ(o[1].stream, 1u);
  EXPECT_EQ(o[1].attributes.count, 1u);
  EXPECT_EQ(o[2].kind, K::kOom);
  EXPECT_EQ(o[2].bytes, 4096u);
  EXPECT_EQ(o[2].stream, 1u);
  EXPECT_EQ(o[2].attributes.context, 7u);
  EXPECT_EQ(o[3].kind, K::kReclaim);
  EXPECT_EQ(o[3].index, 0u);
  EXPECT_EQ(o[4].kind, K::kEmptyCache);
  EXPECT_EQ(o[4].position, 4u);
  EXPECT_EQ(o[5].kind, K::kSegFree);
  EXPECT_EQ(o[6].kind, K::kSegCreate);
  EXPECT_EQ(o[6].addr, 1u);
  EXPECT_EQ(o[7].kind, K::kSegMap);
  EXPECT_EQ(o[8].kind, K::kSegUnmap);
  EXPECT_EQ(o[9].kind, K::kSegRelease);
  ASSERT_EQ(t.contexts().size(), 1u);
  EXPECT_EQ(t.contexts().at(7), "train.py:12 step\nmodel.py:3 = forward");
}

TEST(TraceRecordingTest, OldTracesHaveEmptySideTablesAndParseAsBefore) {
  const Trace t = Trace::Load(BundledTracesDir() + "/resnet50_train.trace.gz");
  EXPECT_FALSE(t.has_attributes());
  EXPECT_TRUE(t.event_attributes().empty());
  EXPECT_TRUE(t.other_events().empty());
  EXPECT_TRUE(t.contexts().empty());
  EXPECT_TRUE(t.header().recorded_by.empty());
  // The same events with and without attributes and other kinds: identical events().
  const std::string plain = "a 1 100 0\na 2 50 1\nf 1 1\nf 2 1\n";
  const std::string rich =
      "a 1 100 0 t=1\nseg malloc 0x10 4096\na 2 50 1 th=3\nf 1 1\np 1 1\nr 1\nf 2 1 t=9\n";
  const Trace a = Trace::Parse(plain);
  const Trace b = Trace::Parse(rich);
  ASSERT_EQ(a.num_events(), b.num_events());
  for (std::size_t i = 0; i < a.num_events(); ++i) {
    EXPECT_EQ(a.events()[i].bytes, b.events()[i].bytes);
    EXPECT_EQ(a.events()[i].index, b.events()[i].index);
    EXPECT_EQ(a.events()[i].stream, b.events()[i].stream);
    EXPECT_EQ(a.events()[i].kind, b.events()[i].kind);
  }
  EXPECT_EQ(a.peak_requested_bytes(), b.peak_requested_bytes());
  EXPECT_EQ(a.num_streams(), b.num_streams());
}

// ---- the real traces -------------------------------------------------------------------------

void ExpectConsistentWithHeader(const Trace& t) {
  const TraceHeader& h = t.header();
  ASSERT_TRUE(h.present) << t.name();
  EXPECT_FALSE(h.workload.empty());
  EXPECT_EQ(t.num_events(), h.events);
  EXPECT_EQ(t.num_allocations(), h.allocs);
  EXPECT_EQ(t.num_streams(), h.streams);
  EXPECT_EQ(t.peak_requested_bytes(), h.trace_peak_live);
  // Measured on all four traces: the events' peak equals PyTorch's peak requested bytes exactly.
  EXPECT_EQ(t.peak_requested_bytes(), h.torch_peak_requested);
  EXPECT_LE(h.torch_peak_requested, h.torch_peak_allocated);
  EXPECT_LE(h.torch_peak_allocated, h.torch_peak_reserved);
  EXPECT_GT(h.torch_segments_peak, 0u);
  EXPECT_FALSE(h.torch_version.empty());
  EXPECT_FALSE(h.gpu.empty());
  // Every free names a live allocation, so live allocations at the end = allocs - frees.
  std::size_t frees = 0;
  for (const TraceEvent& e : t.events()) frees += e.is_alloc() ? 0 : 1;
  EXPECT_EQ(t.live_at_end(), t.num_allocations() - frees);
  ::testing::Test::RecordProperty("peak_requested", std::to_string(t.peak_requested_bytes()));
  std::printf(
      "%s: %zu events, %zu allocations, %zu stream(s), peak requested %llu (%s), live at end "
      "%zu; torch: requested %llu allocated %llu reserved %llu segments %llu retries %llu, %s on "
      "%s\n",
      t.workload().c_str(), t.num_events(), t.num_allocations(), t.num_streams(),
      static_cast<unsigned long long>(t.peak_requested_bytes()),
      allocation::FormatBytes(t.peak_requested_bytes()).c_str(), t.live_at_end(),
      static_cast<unsigned long long>(h.torch_peak_requested),
      static_cast<unsigned long long>(h.torch_peak_allocated),
      static_cast<unsigned long long>(h.torch_peak_reserved),
      static_cast<unsigned long long>(h.torch_segments_peak),
      static_cast<unsigned long long>(h.torch_num_alloc_retries), h.torch_version.c_str(),
      h.gpu.c_str());
}

TEST(TraceTest, BundledResnetTraceParses) {
  ASSERT_FALSE(BundledTracesDir().empty()) << "repository root not found from the test binary";
  const Trace t = Trace::Load(BundledTracesDir() + "/resnet50_train.trace.gz");
  EXPECT_EQ(t.workload(), "resnet50_train");
  EXPECT_EQ(t.num_events(), 7101u);
  EXPECT_EQ(t.num_allocations(), 3552u);
  EXPECT_EQ(t.live_at_end(), 3u);
  ExpectConsistentWithHeader(t);
}

class SharedTraceTest : public ::testing::TestWithParam<const char*> {};

TEST_P(SharedTraceTest, ParsesAndMatchesItsHeader) {
  std::string why;
  const std::string dir = SharedTracesDir(&why);
  if (dir.empty()) GTEST_SKIP() << why;
  const std::string path = absl::StrCat(dir, "/", GetParam(), ".trace.gz");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const Trace t = Trace::Load(path);
  EXPECT_EQ(t.workload(), GetParam());
  ExpectConsistentWithHeader(t);
}

INSTANTIATE_TEST_SUITE_P(AllTraces, SharedTraceTest,
                         ::testing::Values("resnet50_train", "gpt2_train", "bert_infer_dynamic",
                                           "multistream_prefetch"),
                         [](const auto& info) { return std::string(info.param); });

TEST(TraceTest, MultistreamTraceUsesBothStreams) {
  std::string why;
  const std::string dir = SharedTracesDir(&why);
  if (dir.empty()) GTEST_SKIP() << why;
  const std::string path = dir + "/multistream_prefetch.trace.gz";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const Trace t = Trace::Load(path);
  ASSERT_EQ(t.stream_table_size(), 2u);
  std::size_t allocs[2] = {0, 0}, frees[2] = {0, 0}, cross = 0;
  std::vector<std::uint16_t> alloc_stream(t.num_allocations());
  for (const TraceEvent& e : t.events()) {
    if (e.is_alloc()) {
      alloc_stream[e.index] = e.stream;
      ++allocs[e.stream];
    } else {
      ++frees[e.stream];
      cross += alloc_stream[e.index] != e.stream ? 1 : 0;
    }
  }
  EXPECT_GT(allocs[0], 0u);
  EXPECT_GT(allocs[1], 0u);
  // Observed: stream 0 2245 allocs / 2242 frees, stream 1 8 / 8, no free on another stream than
  // its allocation (record_stream shows up as delayed frees, not as cross-stream ones).
  std::printf("multistream_prefetch: stream 0 %zu/%zu, stream 1 %zu/%zu allocs/frees, %zu cross\n",
              allocs[0], frees[0], allocs[1], frees[1], cross);
}

// ---- malformed input -------------------------------------------------------------------------

struct BadCase {
  const char* name;
  const char* text;
  std::size_t line;
  const char* message;  // a substring of the error
};

class MalformedTraceTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(MalformedTraceTest, ThrowsTraceErrorNamingFileAndLine) {
  const BadCase& c = GetParam();
  const std::string path = TempPath(absl::StrCat(c.name, ".trace"));
  WriteFile(path, c.text);
  const std::string error = LoadError(path);
  EXPECT_EQ(error.rfind(absl::StrCat(path, ":", c.line, ": "), 0), 0u) << error;
  EXPECT_NE(error.find(c.message), std::string::npos) << error;
  try {
    Trace::Load(path);
  } catch (const TraceError& e) {
    EXPECT_EQ(e.file(), path);
    EXPECT_EQ(e.line(), c.line);
  }
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MalformedTraceTest,
    ::testing::Values(
        BadCase{"bad_kind", "# {\"workload\": \"bad\"}\na 1 10 0\nx 1 0\n", 3,
                "unknown event kind \"x\""},
        BadCase{"missing_field", "a 1 10\n", 1, "has 2 field(s)"},
        BadCase{"extra_field", "a 1 10 0 0\n", 1, "or more fields"},
        BadCase{"free_missing_field", "a 1 10 0\nf 1\n", 2, "'f <id> <stream>'"},
        BadCase{"free_extra_field", "a 1 10 0\nf 1 0 3\n", 2, "'f <id> <stream>'"},
        BadCase{"non_numeric", "a 1 1O0 0\n", 1, "bytes is not a number: \"1O0\""},
        BadCase{"negative", "a 1 -100 0\n", 1, "bytes is negative: -100"},
        BadCase{"negative_id", "a -1 100 0\n", 1, "id is negative"},
        BadCase{"out_of_range", "a 99999999999999999999999 1 0\n", 1, "id is out of range"},
        BadCase{"bad_stream", "a 1 10 70000\n", 1, "stream 70000 is out of range"},
        BadCase{"unknown_id", "a 1 10 0\nf 2 0\n", 2, "free of unknown id 2"},
        BadCase{"double_free", "a 1 10 0\nf 1 0\n\nf 1 0\n", 4,
                "double free of id 1 (allocated at line 1, already freed at line 2)"},
        BadCase{"duplicate_id", "a 1 10 0\nf 1 0\na 1 20 0\n", 3,
                "id 1 is allocated again (first allocated at line 1"},
        BadCase{"header_malformed",
                "# {\"workload\": \"w\", \"torch_peak_requested\": }\na 1 1 0\n", 1,
                "malformed header JSON"},
        BadCase{"header_unterminated", "# {\"workload\": \"w\"\n", 1, "malformed header JSON"},
        BadCase{"header_trailing", "# {\"workload\": \"w\"} x\n", 1, "unexpected text after"},
        BadCase{"header_duplicate_key", "# {\"gpu\": \"a\", \"gpu\": \"b\"}\n", 1, "duplicate key"},
        BadCase{"header_wrong_type", "# {\"torch_peak_requested\": \"big\"}\n", 1,
                "\"torch_peak_requested\" must be a non-negative integer"},
        BadCase{"header_fraction", "# {\"torch_peak_reserved\": 1.5}\n", 1,
                "must be a non-negative integer, got 1.5"},
        BadCase{"header_count_mismatch", "# {\"events\": 3}\na 1 1 0\nf 1 0\n", 3,
                "the header says events = 3 but the events give 2"},
        // A recording's lines (docs/HISTORY.md).
        BadCase{"bare_token_after_attributes", "a 1 10 0 t=1 x\n", 1, "extra field \"x\""},
        BadCase{"bad_time", "a 1 10 0\nf 1 0 t=soon\n", 2, "attribute t is not a number"},
        BadCase{"negative_time", "a 1 10 0 t=-3\n", 1, "attribute t is negative"},
        BadCase{"thread_too_large", "a 1 10 0 th=4294967296\n", 1, "attribute th is out of range"},
        BadCase{"bad_addr", "a 1 10 0 addr=1234\n", 1, "attribute addr is not hexadecimal"},
        BadCase{"bad_addr_digits", "a 1 10 0 addr=0xzz\n", 1, "not hexadecimal"},
        BadCase{"duplicate_attribute", "a 1 10 0 t=1 t=2\n", 1, "attribute t given twice"},
        BadCase{"pending_unknown_id", "a 1 10 0\np 2 0\n", 2, "'p' of id 2 that was not allocated"},
        BadCase{"reclaim_unknown_id", "a 1 10 0\nr 5\n", 2, "'r' of id 5 that was not allocated"},
        BadCase{"reclaim_extra_field", "a 1 10 0\nr 1 0\n", 2, "'r <id>'"},
        BadCase{"pending_missing_stream", "a 1 10 0\np 1\n", 2, "'p <id> <stream>'"},
        BadCase{"unknown_seg_op", "seg grow 0x10 20\n", 1, "unknown seg op \"grow\""},
        BadCase{"seg_decimal_addr", "seg malloc 16 20\n", 1, "addr is not hexadecimal"},
        BadCase{"seg_missing_bytes", "seg malloc 0x10\n", 1, "'seg <op> <addr> <bytes>'"},
        BadCase{"oom_bad_bytes", "oom lots 0\n", 1, "bytes is not a number"},
        BadCase{"empty_cache_extra", "empty_cache 1 2\n", 1, "'empty_cache <bytes>'"},
        BadCase{"ctx_not_json", "ctx 1 not json\n", 1, "context 1: the text is not a JSON string"},
        BadCase{"ctx_not_string", "ctx 1 [1, 2]\n", 1, "not a JSON string but array"},
        BadCase{"ctx_no_text", "ctx 1\n", 1, "'ctx <id> <json string>'"},
        BadCase{"ctx_duplicate", "ctx 1 \"a\"\nctx 1 \"b\"\n", 2,
                "context 1 given again (first at line 1)"},
        BadCase{"recording_count_mismatch",
                "# {\"events\": 3, \"allocs\": 1}\na 1 1 0\np 1 0\nseg malloc 0x1 2\nf 1 0\n", 5,
                "the header says events = 3 but the events give 2"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(TraceTest, NulByteIsAnError) {
  // Binary junk must not be cut silently at a NUL (C-string line handling would).
  const std::string path = TempPath("nul.trace");
  WriteFile(path, std::string("a 1 1 0\na 2\0 1 0\n", 17));
  const std::string error = LoadError(path);
  EXPECT_NE(error.find(":2: NUL byte"), std::string::npos) << error;
  std::remove(path.c_str());
}

TEST(TraceTest, MissingFileNamesThePath) {
  const std::string path = TempPath("does_not_exist.trace.gz");
  const std::string error = LoadError(path);
  EXPECT_EQ(error.rfind(path + ": cannot open", 0), 0u) << error;
}

TEST(TraceTest, TruncatedGzipIsDetected) {
  const std::string full = TempPath("full.trace.gz");
  WriteGzip(full, SyntheticTrace(20000));
  std::string bytes = ReadFile(full);
  ASSERT_GT(bytes.size(), 1000u);
  EXPECT_EQ(Trace::Load(full).num_events(), 40000u);
  // Cut in the middle, and just before the 8-byte trailer (all data there, CRC/size missing).
  for (std::size_t keep : {bytes.size() / 2, bytes.size() - 4}) {
    const std::string cut = TempPath(absl::StrCat("cut_", keep, ".trace.gz"));
    WriteFile(cut, bytes.substr(0, keep));
    const std::string error = LoadError(cut);
    EXPECT_EQ(error.rfind(cut + ":", 0), 0u) << error;
    EXPECT_NE(error.find("truncated gzip"), std::string::npos) << error;
    std::remove(cut.c_str());
  }
  std::remove(full.c_str());
}

TEST(TraceTest, CorruptGzipIsAnErrorNotACrash) {
  const std::string full = TempPath("corrupt.trace.gz");
  WriteGzip(full, SyntheticTrace(5000));
  std::string bytes = ReadFile(full);
  for (std::size_t i = bytes.size() / 3; i < bytes.size() / 3 + 64; ++i) bytes[i] ^= 0x5a;
  WriteFile(full, bytes);
  const std::string error = LoadError(full);
  EXPECT_EQ(error.rfind(full + ":", 0), 0u) << error;
  std::remove(full.c_str());
}

TEST(TraceTest, ParseReportsTheGivenName) {
  try {
    Trace::Parse("a 1 1 0\nz\n", "mem.trace");
    FAIL() << "no error";
  } catch (const TraceError& e) {
    EXPECT_STREQ(
        e.what(),
        "mem.trace:2: unknown event kind \"z\" (expected 'a' or 'f', or a recording's p, r, "
        "seg, oom, empty_cache, ctx)");
  }
}

}  // namespace
}  // namespace strata::tools
