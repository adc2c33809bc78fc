// A bounded fuzz test of the trace reader (tools/trace.h), header included: the shipped traces
// and a recording with every line kind, mutated (byte flips, truncations, header edits with huge
// numbers, wrong types, missing and repeated keys, line edits, corrupt gzip files). The reader
// must either succeed or throw TraceError: any other exception is a failure that names the
// input's seed, so that it can be replayed alone. Fixed seeds and counts: the same inputs every
// run, a few seconds in all.
#include <gtest/gtest.h>
#include <zlib.h>

#include <unistd.h>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include "support/test_files.h"
#include "support/test_paths.h"
#include "support/trace_samples.h"
#include "tools/trace.h"

namespace strata::tools {
namespace {

using testing::kRecording;
using testing::ReadFile;

constexpr std::uint64_t kSeed = 0x5eed'7ace;
// Lines of each shipped trace kept (after its header): enough to reach every event kind of
// them, few enough to parse thousands of inputs in a few seconds.
constexpr std::size_t kLinesKept = 400;

std::string Gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return "";
  std::string text;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
  gzclose(f);
  return text;
}

// The header line and the first `lines` lines after it.
std::string Head(const std::string& text, std::size_t lines) {
  std::size_t pos = 0;
  for (std::size_t i = 0; i <= lines && pos != std::string::npos; ++i) {
    pos = text.find('\n', pos);
    if (pos != std::string::npos) ++pos;
  }
  return pos == std::string::npos ? text : text.substr(0, pos);
}

// Drops the header's count keys, which a truncated body contradicts: without them a mutated
// input can also parse successfully, and the event lines are checked too.
std::string WithoutCounts(std::string text) {
  for (const char* key : {"\"events\"", "\"allocs\"", "\"streams\"", "\"trace_peak_live\""}) {
    const std::size_t eol = text.find('\n');
    const std::size_t k = text.find(key);
    if (k == std::string::npos || k > eol) continue;
    std::size_t end = text.find_first_of(",}", k);
    if (text[end] == ',') ++end;
    text.erase(k, end - k);
  }
  return text;
}

using Rng = std::mt19937_64;

std::size_t Pick(Rng& rng, std::size_t n) { return n == 0 ? 0 : rng() % n; }

void FlipBytes(std::string& s, Rng& rng) {
  static constexpr char kInteresting[] = "\n\r\0 #-0123456789ax{}[]\",:=.\\";
  const int flips = 1 + static_cast<int>(Pick(rng, 8));
  for (int i = 0; i < flips && !s.empty(); ++i) {
    char& c = s[Pick(rng, s.size())];
    c = rng() % 2 ? static_cast<char>(rng()) : kInteresting[Pick(rng, sizeof kInteresting - 1)];
  }
}

void Truncate(std::string& s, Rng& rng) { s.resize(Pick(rng, s.size() + 1)); }

// Replaces the value of one header key, removes it, or repeats it.
void EditHeader(std::string& s, Rng& rng) {
  static const std::vector<std::string> kValues = {
      "18446744073709551616",
      "18446744073709551615",
      "99999999999999999999999999999",
      "1e400",
      "-1e400",
      "-1",
      "-0",
      "1.5",
      "0x10",
      "\"12\"",
      "null",
      "true",
      "[]",
      "{}",
      "[1, 2]",
      "{\"a\": 1}",
      "\"\"",
      "\"\\u0000\"",
      "\"\\ud800\"",
      "NaN",
      "Infinity",
      "1e-400",
      "4294967296",
      "65536",
      "9223372036854775808",
      "-9223372036854775809",
      "0",
  };
  const std::size_t eol = s.find('\n');
  if (s.rfind("# {", 0) != 0 || eol == std::string::npos) return;
  // The positions of the header's keys: a quote followed by text, a quote and a colon.
  std::vector<std::pair<std::size_t, std::size_t>> keys;  // [key start, value start)
  for (std::size_t q = s.find('"'); q < eol; q = s.find('"', q + 1)) {
    const std::size_t close = s.find('"', q + 1);
    if (close >= eol) break;
    std::size_t v = close + 1;
    while (v < eol && s[v] == ' ') ++v;
    if (v < eol && s[v] == ':') keys.emplace_back(q, v + 1);
    q = close;
  }
  if (keys.empty()) return;
  const auto [key, value] = keys[Pick(rng, keys.size())];
  // The value runs to the next top-level ',' or '}' (string values: to their closing quote).
  std::size_t end = value;
  while (end < eol && s[end] == ' ') ++end;
  if (end < eol && s[end] == '"') {
    end = s.find('"', end + 1);
    end = end < eol ? end + 1 : eol;
  } else {
    while (end < eol && s[end] != ',' && s[end] != '}') ++end;
  }
  switch (Pick(rng, 4)) {
    case 0:
    case 1:
      s.replace(value, end - value, " " + kValues[Pick(rng, kValues.size())]);
      break;
    case 2: {  // remove the key and its value
      std::size_t stop = end;
      if (stop < eol && s[stop] == ',') ++stop;
      s.erase(key, stop - key);
      break;
    }
    default:  // the key again, with another value
      s.insert(end, ", " + s.substr(key, value - key) + " " + kValues[Pick(rng, kValues.size())]);
      break;
  }
}

// Deletes, repeats or swaps lines, or inserts an event line with extreme fields.
void EditLines(std::string& s, Rng& rng) {
  std::vector<std::string> lines;
  for (std::size_t pos = 0; pos < s.size();) {
    std::size_t eol = s.find('\n', pos);
    if (eol == std::string::npos) eol = s.size();
    lines.push_back(s.substr(pos, eol - pos));
    pos = eol + 1;
  }
  if (lines.empty()) return;
  static const std::vector<std::string> kLines = {
      "a 18446744073709551615 1 0",
      "a 1 18446744073709551616 0",
      "a 99 1 65536",
      "a 99 1 4294967296",
      "a -1 1 0",
      "f 1 0",
      "f 1 0 t=1 t=2",
      "a 100 1 0 n=99999999999",
      "p 0 0",
      "r 0",
      "ctx 1 \"unterminated",
      "ctx 1 not-json",
      "seg malloc 0xffffffffffffffffff 1",
      "oom 18446744073709551616 0",
      "empty_cache -1",
      "a 5 5",
      "f",
      "a 7 8 0 addr=0x",
      "a 7 8 0 th=-1",
      "# {\"events\": 1}",
      "",
      "\r",
  };
  const std::size_t i = Pick(rng, lines.size());
  switch (Pick(rng, 4)) {
    case 0:
      lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    case 1:
      lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(i), lines[i]);
      break;
    case 2:
      std::swap(lines[i], lines[Pick(rng, lines.size())]);
      break;
    default:
      lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(i),
                   kLines[Pick(rng, kLines.size())]);
      break;
  }
  s.clear();
  for (const std::string& l : lines) s += l + '\n';
}

// Runs `read`; returns "" when it succeeded or threw TraceError, else what it threw.
std::string OtherThanTraceError(const std::function<void()>& read) {
  try {
    read();
  } catch (const TraceError&) {
  } catch (const std::exception& e) {
    return std::string(typeid(e).name()) + ": " + e.what();
  } catch (...) {
    return "an exception of unknown type";
  }
  return "";
}

class TraceFuzzTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = testing::BundledTracesDir();
    ASSERT_FALSE(dir.empty()) << "tools/traces not found";
    for (const char* name : {"resnet50_train.trace.gz", "multi_model_streams.trace.gz"}) {
      const std::string text = Gunzip(dir + "/" + name);
      ASSERT_GT(text.size(), 1000u) << name;
      // The whole trace parses as shipped: the mutations start from valid inputs.
      ASSERT_NO_THROW(Trace::Parse(text, name));
      bases_.push_back(Head(text, kLinesKept));
      bases_.push_back(WithoutCounts(Head(text, kLinesKept)));
      gz_paths_.push_back(dir + "/" + name);
    }
    ASSERT_NO_THROW(Trace::Parse(kRecording, "recording"));
    bases_.emplace_back(kRecording);
    bases_.push_back(WithoutCounts(kRecording));
  }

  std::vector<std::string> bases_;
  std::vector<std::string> gz_paths_;
};

// Mutated text through Trace::Parse: 4,000 inputs, each from its own seed.
TEST_F(TraceFuzzTest, MutatedTextParsesOrThrowsTraceError) {
  constexpr int kInputs = 4000;
  int parsed = 0, rejected = 0;
  for (int i = 0; i < kInputs; ++i) {
    const std::uint64_t seed = kSeed + static_cast<std::uint64_t>(i);
    Rng rng(seed);
    std::string input = bases_[Pick(rng, bases_.size())];
    const int mutations = 1 + static_cast<int>(Pick(rng, 3));
    for (int m = 0; m < mutations; ++m) {
      switch (Pick(rng, 4)) {
        case 0:
          FlipBytes(input, rng);
          break;
        case 1:
          Truncate(input, rng);
          break;
        case 2:
          EditHeader(input, rng);
          break;
        default:
          EditLines(input, rng);
          break;
      }
    }
    bool ok = false;
    const std::string other = OtherThanTraceError([&] {
      Trace::Parse(input, "fuzz.trace");
      ok = true;
    });
    EXPECT_EQ(other, "") << "input of seed " << seed
                         << " (first 200 bytes: " << input.substr(0, 200) << ")";
    (ok ? parsed : rejected) += 1;
  }
  // Both outcomes occur: the mutations neither always break the input nor never do.
  EXPECT_GT(parsed, kInputs / 20);
  EXPECT_GT(rejected, kInputs / 20);
}

// Corrupt gzip files through Trace::Load: flipped and truncated compressed bytes.
TEST_F(TraceFuzzTest, CorruptGzipFilesLoadOrThrowTraceError) {
  constexpr int kInputs = 60;
  char tmpl[] = "/tmp/strata_trace_fuzz_XXXXXX";
  const int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::string path = tmpl;
  std::vector<std::string> files;
  for (const std::string& p : gz_paths_) files.push_back(ReadFile(p));
  int rejected = 0;
  for (int i = 0; i < kInputs; ++i) {
    const std::uint64_t seed = kSeed + 1'000'000 + static_cast<std::uint64_t>(i);
    Rng rng(seed);
    std::string bytes = files[Pick(rng, files.size())];
    if (rng() % 2) {
      FlipBytes(bytes, rng);
    } else {
      Truncate(bytes, rng);
    }
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
    bool ok = false;
    const std::string other = OtherThanTraceError([&] {
      Trace::Load(path);
      ok = true;
    });
    EXPECT_EQ(other, "") << "gzip input of seed " << seed;
    rejected += ok ? 0 : 1;
  }
  std::remove(path.c_str());
  EXPECT_GT(rejected, kInputs / 2);
}

}  // namespace
}  // namespace strata::tools
