#include "tools/trace.h"

#include <zlib.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <istream>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"
#include "tools/trace_json.h"

namespace strata::tools {

namespace {

using trace_internal::JsonErrorText;
using trace_internal::ParseHeaderObject;

// Debian's Abseil has its own string_view type.
absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string Location(const std::string& file, std::size_t line) {
  return line == 0 ? file : absl::StrCat(file, ":", line);
}

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
    // Events after the last one with attributes have none.
    if (!t.event_attributes_.empty()) t.event_attributes_.resize(t.events_.size());
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
    // `rest` follows the '#' (column 1) of its line.
    std::size_t column = 2;
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) {
      rest.remove_prefix(1);
      ++column;
    }
    if (rest.empty() || rest[0] != '{') return;  // an ordinary comment: no header
    // Every JSON exception (a parse, a number nlohmann cannot hold, a type) becomes a TraceError
    // naming the file and line: a caller catches that one type.
    try {
      HeaderMembers(ParseHeaderObject(rest, column));
    } catch (const std::invalid_argument& e) {
      Fail(e.what());
    } catch (const nlohmann::json::exception& e) {
      Fail(absl::StrCat("bad header: ", Av(JsonErrorText(e))));
    }
  }

  void HeaderMembers(const nlohmann::json& members) {
    TraceHeader& h = trace_.header_;
    h.present = true;
    for (const auto& [key, value] : members.items()) has_key_.insert(key);
    auto get_string = [&](const char* key, std::string* out) {
      auto it = members.find(key);
      if (it == members.end()) return;
      if (!it->is_string()) Fail(absl::StrCat("header key \"", key, "\" must be a string"));
      *out = it->get<std::string>();
    };
    auto get_uint = [&](const char* key, std::uint64_t* out) {
      auto it = members.find(key);
      if (it == members.end()) return;
      // nlohmann reads a non-negative integer that fits 64 bits as number_unsigned; negative,
      // fractional and larger numbers have other number types.
      if (!it->is_number_unsigned()) {
        Fail(absl::StrCat("header key \"", key, "\" must be a non-negative integer",
                          it->is_number() ? absl::StrCat(", got ", it->dump()) : std::string()));
      }
      *out = it->get<std::uint64_t>();
    };
    get_string("workload", &h.workload);
    get_string("torch_version", &h.torch_version);
    get_string("gpu", &h.gpu);
    get_string("recorded_by", &h.recorded_by);
    get_string("place", &h.place);
    get_uint("max_entries", &h.max_entries);
    get_uint("recorded", &h.recorded);
    get_uint("dropped", &h.dropped);
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
      if (!it->is_number()) Fail("header key \"seconds\" must be a number");
      h.seconds = it->get<double>();
    }
  }

  void Event(std::string_view line) {
    // Positional fields come first; `key=value` attributes follow them. Lines are short, so a
    // fixed array bounds the work on junk input.
    constexpr std::size_t kMaxTokens = 32;
    std::string_view fields[kMaxTokens];
    std::size_t n = 0;
    std::size_t positional = 0;  // tokens before the first attribute
    for (absl::string_view token :
         absl::StrSplit(Av(line), absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      if (n == kMaxTokens) Fail(absl::StrCat("more than ", kMaxTokens, " fields"));
      const std::string_view t(token.data(), token.size());
      if (n == 1 && fields[0] == "ctx") {
        // `ctx <id> <json string>`: the text may hold blanks and '='.
        fields[n++] = t;
        Context(fields[1],
                line.substr(static_cast<std::size_t>(t.data() + t.size() - line.data())));
        return;
      }
      if (positional == n && t.find('=') == std::string_view::npos) ++positional;
      fields[n++] = t;
    }
    if (n == 0) return;  // only blanks
    const std::string_view kind = fields[0];
    const std::span<const std::string_view> attrs(fields + positional, n - positional);
    if (kind == "a") {
      ExpectFields(positional, 4, "an alloc line is 'a <id> <bytes> <stream>'");
      const std::uint64_t id = ParseField(fields[1], "id");
      const std::uint64_t bytes = ParseField(fields[2], "bytes");
      const std::uint16_t stream = Stream(ParseField(fields[3], "stream"));
      const EventAttributes a = Attributes(attrs);
      Alloc(id, bytes, stream);
      NoteAttributes(a);
    } else if (kind == "f") {
      ExpectFields(positional, 3, "a free line is 'f <id> <stream>'");
      const std::uint64_t id = ParseField(fields[1], "id");
      const std::uint16_t stream = Stream(ParseField(fields[2], "stream"));
      const EventAttributes a = Attributes(attrs);
      Free(id, stream);
      NoteAttributes(a);
    } else if (std::optional<OtherEvent> e = Other(kind, fields, positional)) {
      AddOther(*e, attrs);
    } else if (kind == "ctx") {
      Fail("a context line is 'ctx <id> <json string>' but this one has no text");
    } else {
      Fail(absl::StrCat("unknown event kind \"", Av(kind),
                        "\" (expected 'a' or 'f', or a recording's p, r, seg, oom, empty_cache, "
                        "ctx)"));
    }
  }

  void ExpectFields(std::size_t positional, std::size_t expected, const char* form) {
    if (positional != expected) {
      Fail(absl::StrCat(form, " but this one has ", positional - 1,
                        positional < expected ? " field(s)" : " or more fields"));
    }
  }

  // Parses the attributes after the fields. A token without '=' there is an extra field.
  EventAttributes Attributes(std::span<const std::string_view> tokens) {
    EventAttributes a;
    for (std::string_view token : tokens) {
      const std::size_t eq = token.find('=');
      if (eq == std::string_view::npos) {
        Fail(absl::StrCat("extra field \"", Av(token),
                          "\" after the attributes (attributes are key=value)"));
      }
      const std::string_view key = token.substr(0, eq);
      const std::string_view value = token.substr(eq + 1);
      std::uint8_t bit = 0;
      if (key == "t") {
        bit = EventAttributes::kTime;
        a.time_ns = ParseField(value, "attribute t");
      } else if (key == "th") {
        bit = EventAttributes::kThread;
        a.thread = Narrow32(ParseField(value, "attribute th"), "th");
      } else if (key == "c") {
        bit = EventAttributes::kContext;
        a.context = ParseField(value, "attribute c");
      } else if (key == "addr") {
        bit = EventAttributes::kAddr;
        a.addr = ParseHex(value, "attribute addr");
      } else if (key == "n") {
        bit = EventAttributes::kCount;
        a.count = Narrow32(ParseField(value, "attribute n"), "n");
      } else {
        continue;  // unknown keys: for newer writers
      }
      if (a.has(bit)) Fail(absl::StrCat("attribute ", Av(key), " given twice"));
      a.present |= bit;
    }
    return a;
  }

  std::uint32_t Narrow32(std::uint64_t value, const char* key) {
    if (value > UINT32_MAX) {
      Fail(absl::StrCat("attribute ", key, " is out of range: ", value, " (at most ", UINT32_MAX,
                        ")"));
    }
    return static_cast<std::uint32_t>(value);
  }

  // A hexadecimal token with its `0x`.
  static std::uint64_t ParseHex(std::string_view token, const char* what) {
    if (!token.starts_with("0x") && !token.starts_with("0X")) {
      throw std::invalid_argument(
          absl::StrCat(what, " is not hexadecimal with 0x: \"", Av(token), "\""));
    }
    const std::string_view digits = token.substr(2);
    std::uint64_t value = 0;
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value, 16);
    if (ec == std::errc::result_out_of_range) {
      throw std::invalid_argument(absl::StrCat(what, " is out of range: ", Av(token)));
    }
    if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size()) {
      throw std::invalid_argument(
          absl::StrCat(what, " is not hexadecimal with 0x: \"", Av(token), "\""));
    }
    return value;
  }

  OtherEvent::Kind SegKind(std::string_view op) {
    using K = OtherEvent::Kind;
    static constexpr std::pair<std::string_view, K> kOps[] = {
        {"malloc", K::kSegMalloc},   {"free", K::kSegFree}, {"create", K::kSegCreate},
        {"release", K::kSegRelease}, {"map", K::kSegMap},   {"unmap", K::kSegUnmap}};
    for (const auto& [name, kind] : kOps) {
      if (op == name) return kind;
    }
    Fail(absl::StrCat("unknown seg op \"", Av(op),
                      "\" (expected malloc, free, create, release, map or unmap)"));
  }

  std::uint32_t KnownIndex(std::uint64_t id, const char* kind) {
    auto it = id_to_index_.find(id);
    if (it == id_to_index_.end()) {
      Fail(absl::StrCat("'", kind, "' of id ", id, " that was not allocated before"));
    }
    return it->second;
  }

  // A stream named by a p/oom line: range-checked, but not counted among the streams of the
  // events (the header's "streams" counts those of the a/f lines).
  std::uint16_t CheckedStream(std::uint64_t stream) {
    if (stream > Trace::kMaxStream) {
      Fail(absl::StrCat("stream ", stream, " is out of range (at most ", Trace::kMaxStream, ")"));
    }
    return static_cast<std::uint16_t>(stream);
  }

  // A recording's line of `kind` (p, r, seg, oom or empty_cache) with its fields parsed; nullopt
  // for any other kind.
  std::optional<OtherEvent> Other(std::string_view kind, const std::string_view* fields,
                                  std::size_t positional) {
    OtherEvent e;
    if (kind == "p") {
      ExpectFields(positional, 3, "a pending line is 'p <id> <stream>'");
      e.kind = OtherEvent::Kind::kPending;
      e.index = KnownIndex(ParseField(fields[1], "id"), "p");
      e.stream = CheckedStream(ParseField(fields[2], "stream"));
    } else if (kind == "r") {
      ExpectFields(positional, 2, "a reclaim line is 'r <id>'");
      e.kind = OtherEvent::Kind::kReclaim;
      e.index = KnownIndex(ParseField(fields[1], "id"), "r");
    } else if (kind == "seg") {
      ExpectFields(positional, 4, "a segment line is 'seg <op> <addr> <bytes>'");
      e.kind = SegKind(fields[1]);
      e.addr = ParseHex(fields[2], "addr");
      e.bytes = ParseField(fields[3], "bytes");
    } else if (kind == "oom") {
      ExpectFields(positional, 3, "an oom line is 'oom <bytes> <stream>'");
      e.kind = OtherEvent::Kind::kOom;
      e.bytes = ParseField(fields[1], "bytes");
      e.stream = CheckedStream(ParseField(fields[2], "stream"));
    } else if (kind == "empty_cache") {
      ExpectFields(positional, 2, "an empty_cache line is 'empty_cache <bytes>'");
      e.kind = OtherEvent::Kind::kEmptyCache;
      e.bytes = ParseField(fields[1], "bytes");
    } else {
      return std::nullopt;
    }
    return e;
  }

  // Adds a recording's event, its fields parsed, with the line's attributes `attrs`.
  void AddOther(OtherEvent e, std::span<const std::string_view> attrs) {
    e.attributes = Attributes(attrs);
    e.position = trace_.events_.size();
    trace_.other_events_.push_back(e);
  }

  // Records the attributes of the a/f event just added; the table is created at the first one.
  void NoteAttributes(const EventAttributes& a) {
    std::vector<EventAttributes>& table = trace_.event_attributes_;
    if (a.present == 0 && table.empty()) return;
    table.resize(trace_.events_.size() - 1);  // events without attributes before this one
    table.push_back(a);
  }

  void Context(std::string_view id_token, std::string_view rest) {
    const std::uint64_t id = ParseField(id_token, "context id");
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
    if (rest.empty()) Fail("a context line is 'ctx <id> <json string>' but this one has no text");
    nlohmann::json text;
    try {
      text = nlohmann::json::parse(rest.begin(), rest.end());
    } catch (const nlohmann::json::exception& e) {
      Fail(absl::StrCat("context ", id, ": the text is not a JSON string (", Av(JsonErrorText(e)),
                        ")"));
    }
    if (!text.is_string()) {
      Fail(absl::StrCat("context ", id, ": the text is not a JSON string but ", text.type_name()));
    }
    auto [it, inserted] = context_line_.emplace(id, line_no_);
    if (!inserted) {
      Fail(absl::StrCat("context ", id, " given again (first at line ", it->second, ")"));
    }
    trace_.contexts_.emplace(id, text.get<std::string>());
  }

  // A stream named by an a/f line: range-checked and counted among the streams of the events.
  std::uint16_t Stream(std::uint64_t stream) {
    const std::uint16_t s = CheckedStream(stream);
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
  absl::flat_hash_map<std::uint64_t, std::size_t> context_line_;
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
