// Trace: an allocation trace recorded from PyTorch (format: /work/shared/traces/README.md) or by
// strata's own history recording (docs/HISTORY.md), parsed and validated, in a compact form a
// replay can walk quickly.
//
// Format: an optional first line `# {json}` with the workload and PyTorch's own figures, then
// `a <id> <bytes> <stream>` (allocate) and `f <id> <stream>` (free) lines; other lines starting
// with '#' and blank lines are ignored; '\r' before a newline is tolerated. A recording adds
// `key=value` attributes after the fields and the kinds `p`, `r`, `seg`, `oom`, `empty_cache` and
// `ctx` (docs/HISTORY.md).
//
// Contract
// - Load(path) reads a plain or gzip-compressed file (zlib reads both); Parse(text, name)
//   parses text in memory (for tests and tools that build traces).
// - Every problem throws TraceError whose what() is "FILE:LINE: message" (FILE alone when no line
//   applies, e.g. the file cannot be opened): unknown event kind, missing or extra fields,
//   non-numeric or negative numbers, a free of an unknown id, a double free, an id allocated
//   twice, a malformed header JSON (with the column where the JSON reader gives one; any of its
//   exceptions, a number no double can hold included), a top-level header key given twice or of
//   the wrong type, header counts ("events", "allocs", "streams", "trace_peak_live") that
//   disagree with the events, a truncated or corrupt gzip stream; a bad value of a known
//   attribute (t, th, c, addr, n) or one given twice, a bare token after the fields, a `p`/`r` of
//   an id not allocated before, an unknown `seg` op, a `ctx` whose text is not a JSON string or
//   whose id was given before.
// - Tolerated: a missing header line (all header figures are then zero/empty), missing or unknown
//   header keys, allocations never freed (a replay frees them at the end), a free issued on
//   another stream than its allocation (legal: record_stream).
// - Events carry a dense allocation index 0..num_allocations()-1 in place of the file's id, so a
//   replay can keep live allocations in a flat vector; a free carries its allocation's bytes.
// - events() holds only the `a`/`f` lines, so a replay walks a recording as it walks a PyTorch
//   trace; header counts ("events", "allocs", ...) count those lines only. The other kinds, the
//   attributes and the contexts go to side tables that stay empty (unallocated) for files
//   without them.
// - Thread safety: a loaded Trace is immutable; concurrent readers are fine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace strata::tools {

class TraceError : public std::runtime_error {
 public:
  // line 0: the problem concerns the whole file (it cannot be opened or read).
  TraceError(std::string file, std::size_t line, const std::string& message);

  const std::string& file() const { return file_; }
  std::size_t line() const { return line_; }

 private:
  std::string file_;
  std::size_t line_;
};

// The header's fields; each is zero/empty when the header or the key is missing.
struct TraceHeader {
  bool present = false;  // the file has a `# {json}` first line
  std::string workload;
  std::string torch_version;
  std::string gpu;
  std::uint64_t torch_peak_requested = 0;
  std::uint64_t torch_peak_allocated = 0;
  std::uint64_t torch_peak_reserved = 0;
  std::uint64_t torch_segments_peak = 0;
  std::uint64_t torch_num_alloc_retries = 0;
  // The converter's own counts, checked against the events when present.
  std::uint64_t events = 0;
  std::uint64_t allocs = 0;
  std::uint64_t streams = 0;
  std::uint64_t trace_peak_live = 0;
  double seconds = 0;  // wall time of the recorded run
  // A strata recording's figures (docs/HISTORY.md).
  std::string recorded_by;
  std::string place;
  std::uint64_t max_entries = 0;
  std::uint64_t recorded = 0;  // events seen
  std::uint64_t dropped = 0;   // events overwritten by newer ones
};

// The optional `key=value` attributes of a recording's line; `present` says which were given.
struct EventAttributes {
  enum : std::uint8_t { kTime = 1, kThread = 2, kContext = 4, kAddr = 8, kCount = 16 };

  std::uint64_t time_ns = 0;  // t: nanoseconds since recording started
  std::uint64_t context = 0;  // c: a `ctx` id
  std::uint64_t addr = 0;     // addr: the block's address
  std::uint32_t thread = 0;   // th: thread number
  std::uint32_t count = 0;    // n: streams a deferred free waits on
  std::uint8_t present = 0;

  bool has(std::uint8_t bit) const { return (present & bit) != 0; }
};

// A recording's line other than `a`/`f` (and `ctx`).
struct OtherEvent {
  enum class Kind : std::uint8_t {
    kPending,     // p <id> <stream>: a free deferred until work on `stream` completes
    kReclaim,     // r <id>: a deferred free went back to the pool
    kSegMalloc,   // seg malloc <addr> <bytes>
    kSegFree,     // seg free
    kSegCreate,   // seg create (physical memory; addr is the handle)
    kSegRelease,  // seg release
    kSegMap,      // seg map (virtual memory range)
    kSegUnmap,    // seg unmap
    kOom,         // oom <bytes> <stream>
    kEmptyCache,  // empty_cache <bytes>
  };
  static constexpr std::uint32_t kNoIndex = UINT32_MAX;

  Kind kind = Kind::kPending;
  std::uint16_t stream = 0;        // p, oom
  std::uint32_t index = kNoIndex;  // p, r: the dense allocation index
  std::uint64_t position = 0;      // number of a/f events before this line
  std::uint64_t addr = 0;          // seg
  std::uint64_t bytes = 0;         // seg, oom, empty_cache
  EventAttributes attributes;
};

struct TraceEvent {
  enum class Kind : std::uint8_t { kAlloc = 0, kFree = 1 };

  std::uint64_t bytes;  // requested bytes (for a free: those of its allocation)
  std::uint32_t index;  // dense allocation index
  std::uint16_t stream;
  Kind kind;

  bool is_alloc() const { return kind == Kind::kAlloc; }
};
static_assert(sizeof(TraceEvent) == 16, "TraceEvent should stay compact");

class Trace {
 public:
  // Stream numbers above this are rejected (the traces number streams densely from 0).
  static constexpr std::uint32_t kMaxStream = 0xffff;

  static Trace Load(const std::string& path);
  static Trace Parse(std::string_view text, const std::string& name = "<memory>");

  // The file name given to Load/Parse (used in messages).
  const std::string& name() const { return name_; }
  const TraceHeader& header() const { return header_; }
  // The workload name from the header, or the file's base name without ".trace[.gz]".
  std::string workload() const;

  const std::vector<TraceEvent>& events() const { return events_; }
  std::size_t num_events() const { return events_.size(); }
  std::size_t num_allocations() const { return original_ids_.size(); }
  // The file's id of allocation `index`.
  std::uint64_t original_id(std::uint32_t index) const { return original_ids_[index]; }

  // Number of distinct streams used, and the largest stream number (+1: size of a per-stream
  // table).
  std::size_t num_streams() const { return num_streams_; }
  std::size_t stream_table_size() const { return max_stream_ + 1; }

  // Peak of the sum of live requested bytes, and the index of the first event reaching it.
  std::uint64_t peak_requested_bytes() const { return peak_requested_; }
  std::size_t peak_event() const { return peak_event_; }
  // Allocations never freed, and their bytes.
  std::size_t live_at_end() const { return live_at_end_; }
  std::uint64_t live_bytes_at_end() const { return live_bytes_at_end_; }
  // Largest single request.
  std::uint64_t max_request_bytes() const { return max_request_; }

  // A recording's side tables; empty for files without attributes or other kinds.
  // Attributes of events()[i] are event_attributes()[i] when has_attributes() (any a/f line had
  // one); otherwise event_attributes() is empty.
  bool has_attributes() const { return !event_attributes_.empty(); }
  const std::vector<EventAttributes>& event_attributes() const { return event_attributes_; }
  // `p`, `r`, `seg`, `oom`, `empty_cache` lines in file order.
  const std::vector<OtherEvent>& other_events() const { return other_events_; }
  // `ctx` texts by id (the JSON string decoded).
  const std::map<std::uint64_t, std::string>& contexts() const { return contexts_; }

 private:
  friend class TraceParser;

  std::string name_;
  TraceHeader header_;
  std::vector<TraceEvent> events_;
  std::vector<std::uint64_t> original_ids_;
  std::size_t num_streams_ = 0;
  std::uint32_t max_stream_ = 0;
  std::uint64_t peak_requested_ = 0;
  std::size_t peak_event_ = 0;
  std::size_t live_at_end_ = 0;
  std::uint64_t live_bytes_at_end_ = 0;
  std::uint64_t max_request_ = 0;
  std::vector<EventAttributes> event_attributes_;
  std::vector<OtherEvent> other_events_;
  std::map<std::uint64_t, std::string> contexts_;
};

}  // namespace strata::tools
