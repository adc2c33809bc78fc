#include "tools/trace.h"

#include <zlib.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "glog/logging.h"

namespace strata::tools {

namespace {

// Debian's Abseil has its own string_view type.
absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string Location(const std::string& file, std::size_t line) {
  return line == 0 ? file : absl::StrCat(file, ":", line);
}

// ---- the header: one flat JSON object --------------------------------------------------------

// A top-level value of the header object. Nested objects/arrays are checked for syntax and kept
// only as kNested (no key we read is nested).
struct JsonScalar {
  enum class Type { kString, kNumber, kBool, kNull, kNested };
  Type type = Type::kNull;
  std::string text;  // kString: the decoded string; kNumber: the literal; kBool: "true"/"false"
};

// Minimal RFC 8259 parser for the header line. Throws std::invalid_argument with the column.
class HeaderJsonParser {
 public:
  explicit HeaderJsonParser(std::string_view text) : s_(text) {}

  absl::flat_hash_map<std::string, JsonScalar> ParseObject() {
    absl::flat_hash_map<std::string, JsonScalar> members;
    SkipSpace();
    Expect('{');
    SkipSpace();
    if (Peek() == '}') {
      ++pos_;
    } else {
      while (true) {
        SkipSpace();
        if (Peek() != '"') Fail("expected a string key");
        std::string key = ParseString();
        SkipSpace();
        Expect(':');
        SkipSpace();
        JsonScalar value = ParseValue(/*depth=*/1);
        if (!members.emplace(key, std::move(value)).second)
          Fail(absl::StrCat("duplicate key \"", key, "\""));
        SkipSpace();
        if (Peek() == ',') {
          ++pos_;
          continue;
        }
        Expect('}');
        break;
      }
    }
    SkipSpace();
    if (pos_ != s_.size()) Fail("unexpected text after the object");
    return members;
  }

 private:
  static constexpr int kMaxDepth = 32;

  [[noreturn]] void Fail(const std::string& what) const {
    throw std::invalid_argument(absl::StrCat(what, " at column ", pos_ + 1));
  }
  char Peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  bool AtEnd() const { return pos_ >= s_.size(); }
  void Expect(char c) {
    if (AtEnd() || s_[pos_] != c) {
      Fail(AtEnd() ? absl::StrCat("expected '", std::string(1, c), "' but the line ends")
                   : absl::StrCat("expected '", std::string(1, c), "' but found '",
                                  std::string(1, s_[pos_]), "'"));
    }
    ++pos_;
  }
  void SkipSpace() {
    while (!AtEnd() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r' || s_[pos_] == '\n')) {
      ++pos_;
    }
  }
  bool Consume(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  JsonScalar ParseValue(int depth) {
    if (depth > kMaxDepth) Fail("nesting too deep");
    JsonScalar v;
    const char c = Peek();
    if (c == '"') {
      v.type = JsonScalar::Type::kString;
      v.text = ParseString();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.type = JsonScalar::Type::kNumber;
      v.text = ParseNumber();
    } else if (Consume("true")) {
      v.type = JsonScalar::Type::kBool;
      v.text = "true";
    } else if (Consume("false")) {
      v.type = JsonScalar::Type::kBool;
      v.text = "false";
    } else if (Consume("null")) {
      v.type = JsonScalar::Type::kNull;
    } else if (c == '{' || c == '[') {
      SkipNested(depth);
      v.type = JsonScalar::Type::kNested;
    } else {
      Fail(AtEnd() ? std::string("expected a value but the line ends") : "expected a value");
    }
    return v;
  }

  // Validates an object or array we have no use for.
  void SkipNested(int depth) {
    const char close = Peek() == '{' ? '}' : ']';
    const bool object = close == '}';
    ++pos_;
    SkipSpace();
    if (Peek() == close) {
      ++pos_;
      return;
    }
    while (true) {
      SkipSpace();
      if (object) {
        if (Peek() != '"') Fail("expected a string key");
        ParseString();
        SkipSpace();
        Expect(':');
        SkipSpace();
      }
      ParseValue(depth + 1);
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      Expect(close);
      return;
    }
  }

  std::string ParseNumber() {
    const std::size_t start = pos_;
    auto digits = [&] {
      const std::size_t from = pos_;
      while (!AtEnd() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - from;
    };
    if (Peek() == '-') ++pos_;
    if (Peek() == '0') {
      ++pos_;
    } else if (digits() == 0) {
      Fail("malformed number");
    }
    if (Peek() == '.') {
      ++pos_;
      if (digits() == 0) Fail("malformed number");
    }
    if (Peek() == 'e' || Peek() == 'E') {
      ++pos_;
      if (Peek() == '+' || Peek() == '-') ++pos_;
      if (digits() == 0) Fail("malformed number");
    }
    return std::string(s_.substr(start, pos_ - start));
  }

  static void AppendUtf8(std::string* out, std::uint32_t cp) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }

  std::uint32_t ParseHex4() {
    if (pos_ + 4 > s_.size()) Fail("truncated \\u escape");
    std::uint32_t v = 0;
    auto [ptr, ec] = std::from_chars(s_.data() + pos_, s_.data() + pos_ + 4, v, 16);
    if (ec != std::errc() || ptr != s_.data() + pos_ + 4) Fail("malformed \\u escape");
    pos_ += 4;
    return v;
  }

  std::string ParseString() {
    Expect('"');
    std::string out;
    while (true) {
      if (AtEnd()) Fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) Fail("control character in string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (AtEnd()) Fail("unterminated string");
      const char e = s_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out.push_back(e);
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          std::uint32_t cp = ParseHex4();
          if (cp >= 0xd800 && cp < 0xdc00) {  // a surrogate pair
            if (!Consume("\\u")) Fail("unpaired surrogate in \\u escape");
            const std::uint32_t low = ParseHex4();
            if (low < 0xdc00 || low >= 0xe000) Fail("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
          } else if (cp >= 0xdc00 && cp < 0xe000) {
            Fail("unpaired surrogate in \\u escape");
          }
          AppendUtf8(&out, cp);
          break;
        }
        default:
          --pos_;
          Fail(absl::StrCat("invalid escape '\\", std::string(1, e), "'"));
      }
    }
  }

  std::string_view s_;
  std::size_t pos_ = 0;
};

// Parses a decimal token of an event line; `what` names the field in messages.
std::uint64_t ParseField(std::string_view token, const char* what) {
  if (!token.empty() && token[0] == '-') {
    const bool numeric =
        token.size() > 1 && token.find_first_not_of("0123456789", 1) == std::string_view::npos;
    throw std::invalid_argument(numeric
                                    ? absl::StrCat(what, " is negative: ", Av(token))
                                    : absl::StrCat(what, " is not a number: \"", Av(token), "\""));
  }
  std::uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), value, 10);
  if (ec == std::errc::result_out_of_range) {
    throw std::invalid_argument(absl::StrCat(what, " is out of range: ", Av(token)));
  }
  if (ec != std::errc() || ptr != token.data() + token.size()) {
    throw std::invalid_argument(absl::StrCat(what, " is not a number: \"", Av(token), "\""));
  }
  return value;
}

}  // namespace

TraceError::TraceError(std::string file, std::size_t line, const std::string& message)
    : std::runtime_error(absl::StrCat(Location(file, line), ": ", message)),
      file_(std::move(file)),
      line_(line) {}

// Consumes a trace line by line and builds the Trace.
class TraceParser {
 public:
  explicit TraceParser(std::string name) { trace_.name_ = std::move(name); }

  // One line without its '\n'.
  void Line(std::string_view line) {
    ++line_no_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find('\0') != std::string_view::npos) Fail("NUL byte in the line (not a text trace?)");
    if (line.empty()) return;
    if (line[0] == '#') {
      if (line_no_ == 1) Header(line.substr(1));
      return;
    }
    try {
      Event(line);
    } catch (const std::invalid_argument& e) {
      Fail(e.what());
    }
  }

  Trace Finish() {
    Trace& t = trace_;
    t.num_streams_ = streams_seen_.size();
    for (std::size_t i = 0; i < free_line_.size(); ++i) {
      if (free_line_[i] == 0) {
        ++t.live_at_end_;
        t.live_bytes_at_end_ += alloc_bytes_[i];
      }
    }
    const TraceHeader& h = t.header_;
    auto check = [&](const char* key, std::uint64_t header_value, std::uint64_t actual) {
      if (has_key_.contains(key) && header_value != actual) {
        Fail(absl::StrCat("the header says ", key, " = ", header_value, " but the events give ",
                          actual, " (truncated or edited trace?)"));
      }
    };
    check("events", h.events, t.events_.size());
    check("allocs", h.allocs, t.original_ids_.size());
    check("streams", h.streams, t.num_streams_);
    check("trace_peak_live", h.trace_peak_live, t.peak_requested_);
    VLOG(4) << "trace " << t.name_ << ": " << t.events_.size() << " events, "
            << t.original_ids_.size() << " allocations, " << t.num_streams_ << " streams, peak "
            << t.peak_requested_ << " requested bytes";
    return std::move(trace_);
  }

  [[noreturn]] void Fail(const std::string& message) const {
    throw TraceError(trace_.name_, line_no_, message);
  }
  std::size_t line_no() const { return line_no_; }

 private:
  void Header(std::string_view rest) {
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
    if (rest.empty() || rest[0] != '{') return;  // an ordinary comment: no header
    absl::flat_hash_map<std::string, JsonScalar> members;
    try {
      members = HeaderJsonParser(rest).ParseObject();
    } catch (const std::invalid_argument& e) {
      Fail(absl::StrCat("malformed header JSON: ", e.what()));
    }
    TraceHeader& h = trace_.header_;
    h.present = true;
    for (const auto& [key, value] : members) has_key_.insert(key);
    auto get_string = [&](const char* key, std::string* out) {
      auto it = members.find(key);
      if (it == members.end()) return;
      if (it->second.type != JsonScalar::Type::kString) {
        Fail(absl::StrCat("header key \"", key, "\" must be a string"));
      }
      *out = it->second.text;
    };
    auto get_uint = [&](const char* key, std::uint64_t* out) {
      auto it = members.find(key);
      if (it == members.end()) return;
      const std::string& text = it->second.text;
      std::uint64_t v = 0;
      auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v, 10);
      if (it->second.type != JsonScalar::Type::kNumber || ec != std::errc() ||
          ptr != text.data() + text.size()) {
        Fail(absl::StrCat("header key \"", key, "\" must be a non-negative integer",
                          it->second.type == JsonScalar::Type::kNumber
                              ? absl::StrCat(", got ", text)
                              : std::string()));
      }
      *out = v;
    };
    get_string("workload", &h.workload);
    get_string("torch_version", &h.torch_version);
    get_string("gpu", &h.gpu);
    get_uint("torch_peak_requested", &h.torch_peak_requested);
    get_uint("torch_peak_allocated", &h.torch_peak_allocated);
    get_uint("torch_peak_reserved", &h.torch_peak_reserved);
    get_uint("torch_segments_peak", &h.torch_segments_peak);
    get_uint("torch_num_alloc_retries", &h.torch_num_alloc_retries);
    get_uint("events", &h.events);
    get_uint("allocs", &h.allocs);
    get_uint("streams", &h.streams);
    get_uint("trace_peak_live", &h.trace_peak_live);
    if (auto it = members.find("seconds"); it != members.end()) {
      const std::string& text = it->second.text;
      auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), h.seconds);
      if (it->second.type != JsonScalar::Type::kNumber || ec != std::errc() ||
          ptr != text.data() + text.size()) {
        Fail("header key \"seconds\" must be a number");
      }
    }
  }

  void Event(std::string_view line) {
    std::string_view fields[5];
    std::size_t n = 0;
    for (absl::string_view token :
         absl::StrSplit(Av(line), absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      if (n == 5) break;  // more than any kind takes: reported below
      fields[n++] = std::string_view(token.data(), token.size());
    }
    if (n == 0) return;  // only blanks
    const std::string_view kind = fields[0];
    if (kind == "a") {
      if (n != 4) {
        Fail(absl::StrCat("an alloc line is 'a <id> <bytes> <stream>' but this one has ", n - 1,
                          n - 1 < 3 ? " field(s)" : " or more fields"));
      }
      Alloc(ParseField(fields[1], "id"), ParseField(fields[2], "bytes"),
            Stream(ParseField(fields[3], "stream")));
    } else if (kind == "f") {
      if (n != 3) {
        Fail(absl::StrCat("a free line is 'f <id> <stream>' but this one has ", n - 1,
                          n - 1 < 2 ? " field(s)" : " or more fields"));
      }
      Free(ParseField(fields[1], "id"), Stream(ParseField(fields[2], "stream")));
    } else {
      Fail(absl::StrCat("unknown event kind \"", Av(kind), "\" (expected 'a' or 'f')"));
    }
  }

  std::uint16_t Stream(std::uint64_t stream) {
    if (stream > Trace::kMaxStream) {
      Fail(absl::StrCat("stream ", stream, " is out of range (at most ", Trace::kMaxStream, ")"));
    }
    const auto s = static_cast<std::uint16_t>(stream);
    streams_seen_.insert(s);
    if (s > trace_.max_stream_) trace_.max_stream_ = s;
    return s;
  }

  void Alloc(std::uint64_t id, std::uint64_t bytes, std::uint16_t stream) {
    const std::size_t index = trace_.original_ids_.size();
    if (index > UINT32_MAX) Fail("more than 2^32 allocations");
    auto [it, inserted] = id_to_index_.emplace(id, static_cast<std::uint32_t>(index));
    if (!inserted) {
      Fail(absl::StrCat("id ", id, " is allocated again (first allocated at line ",
                        alloc_line_[it->second], "; ids are unique per file)"));
    }
    trace_.original_ids_.push_back(id);
    alloc_line_.push_back(line_no_);
    free_line_.push_back(0);
    alloc_bytes_.push_back(bytes);
    live_ += bytes;
    if (live_ > trace_.peak_requested_) {
      trace_.peak_requested_ = live_;
      trace_.peak_event_ = trace_.events_.size();
    }
    if (bytes > trace_.max_request_) trace_.max_request_ = bytes;
    trace_.events_.push_back(
        TraceEvent{bytes, static_cast<std::uint32_t>(index), stream, TraceEvent::Kind::kAlloc});
  }

  void Free(std::uint64_t id, std::uint16_t stream) {
    auto it = id_to_index_.find(id);
    if (it == id_to_index_.end()) Fail(absl::StrCat("free of unknown id ", id));
    const std::uint32_t index = it->second;
    if (free_line_[index] != 0) {
      Fail(absl::StrCat("double free of id ", id, " (allocated at line ", alloc_line_[index],
                        ", already freed at line ", free_line_[index], ")"));
    }
    free_line_[index] = line_no_;
    live_ -= alloc_bytes_[index];
    trace_.events_.push_back(
        TraceEvent{alloc_bytes_[index], index, stream, TraceEvent::Kind::kFree});
  }

  Trace trace_;
  std::size_t line_no_ = 0;
  std::uint64_t live_ = 0;
  absl::flat_hash_map<std::uint64_t, std::uint32_t> id_to_index_;
  // Per allocation index, during parsing only.
  std::vector<std::size_t> alloc_line_, free_line_;
  std::vector<std::uint64_t> alloc_bytes_;
  absl::flat_hash_set<std::uint16_t> streams_seen_;
  absl::flat_hash_set<std::string> has_key_;
};

Trace Trace::Parse(std::string_view text, const std::string& name) {
  TraceParser parser(name);
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    if (nl == std::string_view::npos) {
      parser.Line(text);
      break;
    }
    parser.Line(text.substr(0, nl));
    text.remove_prefix(nl + 1);
  }
  return parser.Finish();
}

Trace Trace::Load(const std::string& path) {
  struct GzCloser {
    void operator()(gzFile_s* f) const { gzclose(f); }
  };
  errno = 0;
  std::unique_ptr<gzFile_s, GzCloser> file(gzopen(path.c_str(), "rb"));
  if (!file) {
    throw TraceError(
        path, 0, absl::StrCat("cannot open: ", errno != 0 ? std::strerror(errno) : "zlib error"));
  }
  gzbuffer(file.get(), 1 << 17);

  // Lines longer than this are not a trace (and would grow `partial` without bound).
  constexpr std::size_t kMaxLine = 1 << 20;
  TraceParser parser(path);
  std::string partial;  // the start of a line that spans reads
  std::vector<char> buf(1 << 16);
  while (true) {
    const int n = gzread(file.get(), buf.data(), static_cast<unsigned>(buf.size()));
    if (n < 0) {
      int err = 0;
      const char* msg = gzerror(file.get(), &err);
      throw TraceError(
          path, parser.line_no() + 1,
          absl::StrCat(err == Z_ERRNO ? std::strerror(errno) : msg, " (corrupt gzip stream?)"));
    }
    if (n == 0) break;
    std::string_view chunk(buf.data(), static_cast<std::size_t>(n));
    while (!chunk.empty()) {
      const std::size_t nl = chunk.find('\n');
      if (nl == std::string_view::npos) {
        partial.append(chunk);
        if (partial.size() > kMaxLine) {
          throw TraceError(path, parser.line_no() + 1, "line longer than 1 MiB (not a trace?)");
        }
        break;
      }
      if (partial.empty()) {
        parser.Line(chunk.substr(0, nl));
      } else {
        partial.append(chunk.substr(0, nl));
        parser.Line(partial);
        partial.clear();
      }
      chunk.remove_prefix(nl + 1);
    }
  }
  // gzread reports a stream cut short as end of file; only gzerror tells (Z_BUF_ERROR). Checked
  // before the last partial line, which is then likely cut too.
  int err = Z_OK;
  const char* msg = gzerror(file.get(), &err);
  if (err != Z_OK) {
    throw TraceError(path, parser.line_no() + 1,
                     absl::StrCat(err == Z_BUF_ERROR ? "truncated gzip stream" : "gzip error",
                                  " (zlib: ", msg, ")"));
  }
  if (!partial.empty()) parser.Line(partial);
  return parser.Finish();
}

std::string Trace::workload() const {
  if (!header_.workload.empty()) return header_.workload;
  std::string_view base = name_;
  if (const std::size_t slash = base.find_last_of('/'); slash != std::string_view::npos) {
    base.remove_prefix(slash + 1);
  }
  for (std::string_view suffix : {".gz", ".trace"}) {
    if (base.ends_with(suffix)) base.remove_suffix(suffix.size());
  }
  return std::string(base);
}

}  // namespace strata::tools
