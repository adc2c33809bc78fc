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
// Device lag: a replay enqueues no work, so on the emulated runtime every event would be complete
// at once and memory that a GPU still holds behind pending work (frees recorded on another
// stream, pages behind fences) would look free. With Options::device_lag != 0 (the emulated
// runtime's event_lag), both passes enqueue one no-op kernel (an empty host task) on each event's
// stream after the event, so that the runtime's lag counts kernels as a GPU's does. With 0 they
// enqueue nothing.
//
// History: with Options::history, the measured pass records the place's memory history and
// hands it over as trace text: replaying that recording gives the same figures again.
//
// Errors: an allocation the allocator refuses (e.g. with a memory limit) ends the replay with
// a ReplayResult whose `oom_event` says where (1-based line order of events) and `oom_message`
// why; other errors propagate as exceptions.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "flags/allocator_flags.h"
#include "platform/device_runtime.h"
#include "tools/trace.h"
#include "tools/viewer_page.h"

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
  // Every host wait on the device: explicit synchronizations and the implicit one of each device
  // free (cudaFree synchronizes the device), as the runtime's SyncCount counts them.
  std::uint64_t syncs = 0;
  std::int64_t ooms = 0;
  double ns_per_event = 0;
  std::uint64_t torch_peak_reserved_bytes = 0;
  double torch_fragmentation = 0;
  std::uint64_t torch_segments_peak = 0;
  std::int64_t num_device_map = 0;    // virtual-memory pages mapped (MemoryStats)
  std::int64_t num_device_unmap = 0;  // virtual-memory pages unmapped
  std::int64_t num_stream_waits = 0;  // cross-stream reuses ordered on the device
  std::uint64_t device_lag = 0;       // the Options::device_lag the replay ran with
  // Options::repeat, and what the last of those passes alone did (the steady state of a training
  // loop, whose steps repeat one trace): device calls and host waits. Equal to the totals above
  // when repeat is 1.
  std::uint64_t repeat = 1;
  struct PassCalls {
    std::int64_t device_mallocs = 0;
    std::int64_t device_frees = 0;
    std::int64_t num_device_map = 0;
    std::int64_t num_device_unmap = 0;
    std::int64_t num_stream_waits = 0;
    std::uint64_t syncs = 0;
    double ns_per_event = 0;  // the timed pass's last repetition (0 without a timed pass)
  } last_pass;
  // With repeat > 1, every pass of the measured run in order: its device calls and host waits,
  // and the peak reserved so far (non-decreasing; the last is peak_reserved_bytes). A memory
  // figure that creeps from pass to pass, or calls that stop only after some passes, show here.
  // Shorter than repeat when a pass ran out of memory.
  struct Pass {
    PassCalls calls;
    std::uint64_t peak_reserved_bytes = 0;
  };
  std::vector<Pass> passes;
  // Options::tail_percent, and what the last pass did from event `tail_from_event` (0-based, in
  // the pass) on: the warm steps of a trace recorded over many steps whose shapes are drawn at
  // random, which a repeat cannot show (it replays the same shapes). ns_per_event stays 0.
  std::uint64_t tail_percent = 0;
  std::uint64_t tail_from_event = 0;
  PassCalls tail;
  // Set when the replay ran out of memory.
  std::uint64_t oom_event = 0;
  std::string oom_message;
  std::string summary;  // the memory summary at the trace's peak-reserved moment's end state

  // One JSON object on one line with the fields above but `torch_segments_peak` and `summary`
  // (oom_event / oom_message only after an OOM; `repeat`, `last_pass` and `passes` only when
  // repeat > 1; `tail_percent`, `tail_from_event` and `tail` only with a tail); a non-finite
  // double is written as null.
  std::string ToJson() const;
};

class Replayer {
 public:
  // Distinct streams a trace may use: each becomes a device stream (a thread on the emulated
  // device). More is refused with std::invalid_argument.
  static constexpr std::size_t kMaxStreams = 256;

  struct Options {
    bool timed_pass = true;
    bool keep_summary = false;
    // Filled by the measured pass when set: requested / allocated / reserved bytes after each
    // event (the viewer's series).
    std::vector<ViewerSample>* series = nullptr;
    // Receives the measured pass's memory history (AllocatorFacade::RecordHistory: every event
    // of the trace and the device calls) as trace text, when set.
    std::string* history = nullptr;
    // Receives AllocatorFacade::Snapshot (JSON) right after the event at which the trace's
    // requested bytes peak, when set.
    std::string* snapshot = nullptr;
    // The runtime's device lag (EmulatedRuntime::Options::event_lag); non-zero: one no-op kernel
    // per event (see above).
    std::uint64_t device_lag = 0;
    // Both passes replay the trace this many times on one facade (at least 1), freeing what is
    // live between repetitions, as a training loop repeats its step: peaks cover every pass, and
    // ReplayResult::last_pass holds the last one's device calls and speed.
    std::uint64_t repeat = 1;
    // 1 to 99: the device calls of the last pass's last tail_percent % of events are reported
    // apart as well (ReplayResult::tail); 0: none. Other values throw std::invalid_argument.
    std::uint64_t tail_percent = 0;
  };

  // `runtime` must outlive the replayer; device 0 of it is used.
  Replayer(platform::DeviceRuntime* runtime, std::string device_name,
           const flags::AllocatorFlags& flags);

  ReplayResult Run(const Trace& trace, const Options& options);
  // Only the timed loop, for benchmarks: returns nanoseconds for the whole trace. `device_lag`
  // as in Options.
  double TimeOnce(const Trace& trace, std::uint64_t device_lag = 0);
  // The timed loop `repeat` times on one facade: nanoseconds of each repetition.
  std::vector<double> TimeRepeated(const Trace& trace, std::uint64_t device_lag,
                                   std::uint64_t repeat);

 private:
  platform::DeviceRuntime* runtime_;
  std::string device_name_;
  flags::AllocatorFlags flags_;
};

}  // namespace strata::tools
