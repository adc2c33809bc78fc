// strata-replay: replays a real allocation trace through the facade built from the flags, and
// reports fragmentation, device calls and speed.
//
//   strata-replay --trace=FILE[.gz] [--device=emulated|cuda] [any allocator flag]
//                 [--json] [--summary] [--timeline=FILE.html] [--record_history=FILE[.gz]]
//                 [--snapshot=FILE.json]
//                 [--device_lag=N] [--repeat=N] [--tail_percent=P]
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "allocation/byte_format.h"
#include "flags/flag_sources.h"
#include "history/history_recorder.h"
#include "platform/cuda_runtime.h"
#include "platform/emulated_runtime.h"
#include "platform/fault_injection_runtime.h"
#include "tools/flag_command_line.h"
#include "tools/replay.h"
#include "tools/trace.h"
#include "tools/viewer_page.h"

ABSL_FLAG(std::string, trace, "", "Trace file to replay (plain or .gz)");
ABSL_FLAG(std::string, device, "emulated",
          "emulated (no GPU needed, never touches the bytes) or cuda (the real device 0)");
ABSL_FLAG(bool, json, false, "Print exactly one JSON object with the results");
ABSL_FLAG(bool, summary, false, "Print the memory summary at the end of the replay");
ABSL_FLAG(std::string, timeline, "",
          "Write the memory viewer (one HTML page, tools/viewer_page.h) of the replay: its "
          "allocations as an active-memory timeline with requested/allocated/reserved bytes");
ABSL_FLAG(std::string, snapshot, "",
          "Write the allocator's snapshot (JSON: segments and blocks, docs/HISTORY.md) at the "
          "trace's peak; with --timeline, the page draws it as a segment map too");
ABSL_FLAG(std::string, record_history, "",
          "Write the replay's memory history (a trace, gzip when FILE ends in .gz; "
          "docs/HISTORY.md): replaying it gives the same figures");
ABSL_FLAG(std::uint64_t, emulated_capacity_mb, 144 * 1024,
          "Memory of the emulated device (address space only)");
ABSL_FLAG(std::uint64_t, device_lag, 0,
          "Emulated device only: the device runs N kernels behind the host (one no-op kernel "
          "per trace event), so memory waiting on pending work stays held as on a GPU; 0: none");
ABSL_FLAG(std::uint64_t, repeat, 1,
          "Replay the trace this many times on one allocator (1 to 1000), as a training loop "
          "repeats its step; the last repetition's device calls and speed are reported apart, "
          "and --json lists each repetition's device calls and the peak reserved so far "
          "(`passes`)");
ABSL_FLAG(std::uint64_t, tail_percent, 0,
          "1 to 99: the device calls of the last P % of the (last) pass's events are reported "
          "apart too: the warm steps of a trace recorded over many steps of random shapes, "
          "which --repeat cannot show (it replays the same shapes); 0: none");
ABSL_FLAG(std::string, faults, "",
          "Inject device faults to soak the allocator: 'key:value,...' with malloc_probability "
          "(and seed), malloc_every, create_physical_every, map_every (see "
          "platform/fault_injection_runtime.h)");

namespace {

using strata::allocation::FormatBytes;

int Run(int argc, char** argv) {
  if (!strata::tools::ParseFlagsOnly("strata-replay", argc, argv)) return 2;
  const std::string path = absl::GetFlag(FLAGS_trace);
  if (path.empty()) {
    std::fprintf(stderr, "strata-replay: --trace=FILE is required\n");
    return 2;
  }
  const std::uint64_t repeat = absl::GetFlag(FLAGS_repeat);
  if (repeat == 0 || repeat > 1000) {
    std::fprintf(stderr, "strata-replay: --repeat=%llu is out of range [1, 1000]\n",
                 static_cast<unsigned long long>(repeat));
    return 2;
  }
  const std::uint64_t tail_percent = absl::GetFlag(FLAGS_tail_percent);
  if (tail_percent > 99) {
    std::fprintf(stderr, "strata-replay: --tail_percent=%llu is out of range [0, 99]\n",
                 static_cast<unsigned long long>(tail_percent));
    return 2;
  }
  const std::string device = absl::GetFlag(FLAGS_device);
  const std::uint64_t lag = absl::GetFlag(FLAGS_device_lag);
  std::unique_ptr<strata::platform::EmulatedRuntime> emulated;
  strata::platform::DeviceRuntime* runtime = nullptr;
  const std::uint64_t capacity_mb = absl::GetFlag(FLAGS_emulated_capacity_mb);
  constexpr std::uint64_t kMaxCapacityMb =
      strata::platform::EmulatedRuntime::kMaxCapacityBytes >> 20;
  if (device == "emulated" && (capacity_mb == 0 || capacity_mb > kMaxCapacityMb)) {
    std::fprintf(stderr, "strata-replay: --emulated_capacity_mb=%llu is out of range [1, %llu]\n",
                 static_cast<unsigned long long>(capacity_mb),
                 static_cast<unsigned long long>(kMaxCapacityMb));
    return 2;
  }
  if (device == "emulated") {
    emulated = std::make_unique<strata::platform::EmulatedRuntime>(
        strata::platform::EmulatedRuntime::Options{.device_count = 1,
                                                   .capacity_bytes = capacity_mb << 20,
                                                   .event_lag = lag,
                                                   .deterministic_lag = true});
    runtime = emulated.get();
  } else if (device == "cuda") {
    if (lag != 0) {
      std::fprintf(stderr,
                   "strata-replay: --device_lag=%llu is for --device=emulated only (a real device "
                   "lags on its own); drop it with --device=cuda\n",
                   static_cast<unsigned long long>(lag));
      return 2;
    }
    std::string why;
    if (!strata::platform::CUDARuntime::Available(&why)) {
      std::fprintf(stderr, "strata-replay: --device=cuda: %s\n", why.c_str());
      return 2;
    }
    runtime = &strata::platform::CUDARuntime::Instance();
  } else {
    std::fprintf(stderr, "strata-replay: --device must be emulated or cuda, got '%s'\n",
                 device.c_str());
    return 2;
  }

  std::unique_ptr<strata::platform::FaultInjectionRuntime> faults;
  if (const std::string spec = absl::GetFlag(FLAGS_faults); !spec.empty()) {
    faults = std::make_unique<strata::platform::FaultInjectionRuntime>(runtime);
    try {
      faults->Configure(spec);
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "strata-replay: --faults: %s\n", e.what());
      return 2;
    }
    runtime = faults.get();
  }

  const strata::tools::Trace trace = strata::tools::Trace::Load(path);
  strata::tools::Replayer replayer(runtime, device, strata::flags::Current());
  const std::string page = absl::GetFlag(FLAGS_timeline);
  const std::string history_path = absl::GetFlag(FLAGS_record_history);
  std::vector<strata::tools::ViewerSample> series;
  std::string history;
  std::string snapshot;
  const std::string snapshot_path = absl::GetFlag(FLAGS_snapshot);
  strata::tools::Replayer::Options options;
  options.snapshot = snapshot_path.empty() && page.empty() ? nullptr : &snapshot;
  options.keep_summary = absl::GetFlag(FLAGS_summary);
  options.series = page.empty() ? nullptr : &series;
  options.history = page.empty() && history_path.empty() ? nullptr : &history;
  options.device_lag = lag;
  options.repeat = repeat;
  options.tail_percent = tail_percent;
  const strata::tools::ReplayResult r = replayer.Run(trace, options);

  if (!history_path.empty()) strata::history::HistoryRecorder::WriteFile(history_path, history);
  if (!snapshot_path.empty()) strata::history::HistoryRecorder::WriteFile(snapshot_path, snapshot);
  if (!page.empty()) {
    const strata::tools::Trace recording = strata::tools::Trace::Parse(history, trace.workload());
    strata::tools::ViewerOptions view;
    view.title = absl::StrFormat(
        "%s: strata %s%s", trace.workload(),
        strata::flags::AllocatorStrategyName(strata::flags::Current().allocator_strategy),
        strata::flags::Current().use_virtual_memory_auto_growth ? " (virtual memory)" : "");
    view.subtitle =
        absl::StrFormat("peak reserved %s, fragmentation %.3f (PyTorch %.3f)",
                        FormatBytes(r.peak_reserved_bytes), r.fragmentation, r.torch_fragmentation);
    view.series = std::move(series);
    if (r.torch_peak_reserved_bytes != 0) {
      view.references.push_back({"PyTorch peak reserved", r.torch_peak_reserved_bytes});
    }
    nlohmann::json snap;
    if (!snapshot.empty()) snap = nlohmann::json::parse(snapshot);
    strata::tools::WriteViewerPage(page, &recording, snapshot.empty() ? nullptr : &snap, view);
  }
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n", r.ToJson().c_str());
  } else {
    std::printf("trace %s (%llu events) on %s, strategy %s\n", r.trace.c_str(),
                static_cast<unsigned long long>(r.events), r.device.c_str(), r.strategy.c_str());
    std::printf("  peak requested %s, allocated %s, reserved %s\n",
                FormatBytes(r.peak_requested_bytes).c_str(),
                FormatBytes(r.peak_allocated_bytes).c_str(),
                FormatBytes(r.peak_reserved_bytes).c_str());
    std::printf("  fragmentation %.3f (PyTorch %.3f, reserved %s)\n", r.fragmentation,
                r.torch_fragmentation, FormatBytes(r.torch_peak_reserved_bytes).c_str());
    std::printf("  device mallocs %lld, frees %lld, syncs %llu, ooms %lld, %.1f ns/event\n",
                static_cast<long long>(r.device_mallocs), static_cast<long long>(r.device_frees),
                static_cast<unsigned long long>(r.syncs), static_cast<long long>(r.ooms),
                r.ns_per_event);
    std::printf(
        "  device maps %lld, unmaps %lld, stream waits %lld, device lag %llu\n",
        static_cast<long long>(r.num_device_map), static_cast<long long>(r.num_device_unmap),
        static_cast<long long>(r.num_stream_waits), static_cast<unsigned long long>(r.device_lag));
    if (r.repeat > 1) {
      const auto& w = r.last_pass;
      std::printf(
          "  last of %llu passes: device mallocs %lld, frees %lld, maps %lld, unmaps %lld, stream "
          "waits %lld, syncs %llu, %.1f ns/event\n",
          static_cast<unsigned long long>(r.repeat), static_cast<long long>(w.device_mallocs),
          static_cast<long long>(w.device_frees), static_cast<long long>(w.num_device_map),
          static_cast<long long>(w.num_device_unmap), static_cast<long long>(w.num_stream_waits),
          static_cast<unsigned long long>(w.syncs), w.ns_per_event);
    }
    if (r.tail_percent != 0) {
      const auto& w = r.tail;
      std::printf(
          "  last %llu %% (from event %llu): device mallocs %lld, frees %lld, maps %lld, unmaps "
          "%lld, stream waits %lld, syncs %llu\n",
          static_cast<unsigned long long>(r.tail_percent),
          static_cast<unsigned long long>(r.tail_from_event),
          static_cast<long long>(w.device_mallocs), static_cast<long long>(w.device_frees),
          static_cast<long long>(w.num_device_map), static_cast<long long>(w.num_device_unmap),
          static_cast<long long>(w.num_stream_waits), static_cast<unsigned long long>(w.syncs));
    }
  }
  if (options.keep_summary) std::printf("%s", r.summary.c_str());
  if (!r.oom_message.empty()) {
    std::fprintf(stderr, "strata-replay: out of memory at event %llu of %s: %s\n",
                 static_cast<unsigned long long>(r.oom_event), path.c_str(), r.oom_message.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const strata::tools::TraceError& e) {
    std::fprintf(stderr, "strata-replay: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-replay: %s\n", e.what());
  }
  return 1;
}
