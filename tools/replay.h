// Replayer: replays a Trace's allocations and frees, on their streams, through an
// AllocatorFacade, and measures what the allocator did.
//
// Two passes over a fresh facade each: a timed pass (only the allocate/free calls, for
// ns_per_event) and a measured pass that samples requested / allocated / reserved bytes after
// every event (peaks, fragmentation, the optional timeline). Frees issued on another stream than
// their allocation's are preceded by RecordStream, as a framework's record_stream does.
// Allocations still live at the end of the trace are freed then. The replay never touches the
// bytes, so on the emulated device it needs neither a GPU nor the memory.
//
// Errors: an allocation the allocator refuses (e.g. with a memory limit) ends the replay with
// a ReplayResult whose `oom_event` says where (1-based line order of events) and `oom_message`
// why; other errors propagate as exceptions.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "flags/allocator_flags.h"
#include "platform/device_runtime.h"
#include "tools/timeline_svg.h"
#include "tools/trace.h"

namespace strata::tools {

struct ReplayResult {
  std::string trace;
  std::string strategy;
  std::string device;
  std::uint64_t events = 0;
  std::uint64_t peak_requested_bytes = 0;
  std::uint64_t peak_allocated_bytes = 0;
  std::uint64_t peak_reserved_bytes = 0;
  double fragmentation = 0;  // peak_reserved / peak_requested
  std::int64_t device_mallocs = 0;
  std::int64_t device_frees = 0;
  std::uint64_t syncs = 0;
  std::int64_t ooms = 0;
  double ns_per_event = 0;
  std::uint64_t torch_peak_reserved_bytes = 0;
  double torch_fragmentation = 0;
  std::uint64_t torch_segments_peak = 0;
  // Set when the replay ran out of memory.
  std::uint64_t oom_event = 0;
  std::string oom_message;
  std::string summary;  // the memory summary at the trace's peak-reserved moment's end state

  // One JSON object on one line with the fields above but `torch_segments_peak` and `summary`
  // (oom_event / oom_message only after an OOM); a non-finite double is written as null.
  std::string ToJson() const;
};

class Replayer {
 public:
  struct Options {
    bool timed_pass = true;
    bool keep_summary = false;
    TimelineSvg* timeline = nullptr;  // filled by the measured pass when set
  };

  // `runtime` must outlive the replayer; device 0 of it is used.
  Replayer(platform::DeviceRuntime* runtime, std::string device_name,
           const flags::AllocatorFlags& flags);

  ReplayResult Run(const Trace& trace, const Options& options);
  // Only the timed loop, for benchmarks: returns nanoseconds for the whole trace.
  double TimeOnce(const Trace& trace);

 private:
  platform::DeviceRuntime* runtime_;
  std::string device_name_;
  flags::AllocatorFlags flags_;
};

}  // namespace strata::tools
