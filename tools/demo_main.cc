// strata-demo: replays a real PyTorch allocation trace (the bundled ResNet-50 training trace by
// default) through each pool and strategy on the emulated device — no GPU needed — and prints a
// comparison with PyTorch's own figures (a note under each row says what its figures mean), the
// default pool's memory summary, and writes the default pool's memory viewer page
// (tools/viewer_page.h).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "allocation/byte_format.h"
#include "flags/flag_sources.h"
#include "platform/emulated_runtime.h"
#include "tools/flag_command_line.h"
#include "tools/replay.h"
#include "tools/trace.h"
#include "tools/viewer_page.h"

ABSL_FLAG(std::string, demo_trace, "tools/traces/resnet50_train.trace.gz", "Trace to replay");
ABSL_FLAG(std::string, demo_timeline, "build/demo_timeline.html",
          "Where to write the memory viewer page");

namespace {

using strata::allocation::FormatBytes;
using strata::flags::AllocatorFlags;
using strata::flags::AllocatorStrategy;

struct Config {
  const char* label;
  AllocatorFlags flags;
  // What a newcomer should know to read the row, where a figure alone would mislead.
  const char* note;
};

int Run(int argc, char** argv) {
  if (!strata::tools::ParseFlagsOnly("strata-demo", argc, argv)) return 2;
  const strata::tools::Trace trace = strata::tools::Trace::Load(absl::GetFlag(FLAGS_demo_trace));
  // An H100's 80 GiB, as address space only: the replay never touches the bytes.
  strata::platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = 80ull << 30});

  const AllocatorFlags base = strata::flags::Current();
  std::vector<Config> configs;
  configs.push_back({"vmm pool (default)", base,
                     "2 MiB pages mapped as needed: one create per page on the first pass"});
  AllocatorFlags chunk = base;
  chunk.use_virtual_memory_auto_growth = false;
  configs.push_back(
      {"chunk pool", chunk, "expandable_segments:False: 20 MiB chunks per stream, never remapped"});
  AllocatorFlags naive = base;
  naive.allocator_strategy = AllocatorStrategy::kNaiveBestFit;
  configs.push_back({"naive_best_fit", naive,
                     "Paddle's: reserves fraction_of_gpu_memory_to_use (92% of the device) up "
                     "front, whatever the model needs"});
  AllocatorFlags thread_local_flags = base;
  thread_local_flags.allocator_strategy = AllocatorStrategy::kThreadLocal;
  configs.push_back({"thread_local", thread_local_flags,
                     "a pool per thread, each refilled 256 MiB at a time: one thread here"});
  AllocatorFlags system = base;
  system.use_system_allocator = true;
  configs.push_back({"system (no caching)", system,
                     "a cudaMalloc and a cudaFree (a device wait) per allocation"});

  std::printf("Replaying %s: %llu events, peak requested %s, on the emulated device (80 GiB)\n\n",
              trace.workload().c_str(), static_cast<unsigned long long>(trace.num_events()),
              FormatBytes(trace.peak_requested_bytes()).c_str());
  std::printf("%-22s %14s %14s %9s %9s %7s %7s %10s\n", "strategy", "peak reserved", "PyTorch",
              "frag.", "PyTorch", "mallocs", "maps", "ns/event");
  std::string summary;
  std::vector<strata::tools::ViewerSample> series;
  std::string history;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    strata::tools::Replayer replayer(&runtime, "emulated", configs[i].flags);
    strata::tools::Replayer::Options options;
    options.keep_summary = i == 0;
    options.series = i == 0 ? &series : nullptr;
    options.history = i == 0 ? &history : nullptr;
    const strata::tools::ReplayResult r = replayer.Run(trace, options);
    if (i == 0) summary = r.summary;
    std::printf("%-22s %14s %14s %9.3f %9.3f %7lld %7lld %10.1f%s\n", configs[i].label,
                FormatBytes(r.peak_reserved_bytes).c_str(),
                FormatBytes(r.torch_peak_reserved_bytes).c_str(), r.fragmentation,
                r.torch_fragmentation, static_cast<long long>(r.device_mallocs),
                static_cast<long long>(r.num_device_map), r.ns_per_event,
                r.oom_message.empty() ? "" : "  (out of memory)");
    std::printf("%-22s   %s\n", "", configs[i].note);
  }
  std::printf(
      "\nfragmentation = peak reserved / peak requested; PyTorch's figures come from the "
      "trace header. mallocs: device allocations (the vmm pool's physical pages); maps: pages "
      "mapped.\nThe default is the vmm pool: it reserved the least of every allocator measured "
      "end to end on ten models, or tied (docs/BENCHMARKS.md).\n\nMemory summary after the default "
      "strategy's replay:\n%s",
      summary.c_str());
  strata::tools::ViewerOptions view;
  view.title = absl::StrFormat("%s replayed through strata (default: vmm pool)", trace.workload());
  view.series = std::move(series);
  if (trace.header().torch_peak_reserved != 0) {
    view.references.push_back({"PyTorch peak reserved", trace.header().torch_peak_reserved});
  }
  const strata::tools::Trace recording = strata::tools::Trace::Parse(history, trace.workload());
  const std::string page = absl::GetFlag(FLAGS_demo_timeline);
  strata::tools::WriteViewerPage(page, &recording, nullptr, view);
  std::printf("\nMemory viewer written to %s (open it in a browser)\n", page.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-demo: %s\n", e.what());
    return 1;
  }
}
