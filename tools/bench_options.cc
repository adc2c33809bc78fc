// strata-bench's flags and the parsing of its command line (tools/bench_options.h).
#include "tools/bench_options.h"

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "flags/flag_sources.h"
#include "platform/emulated_runtime.h"

ABSL_FLAG(std::string, device, "",
          "emulated or cuda (default: $STRATA_BENCH_DEVICE, else cuda when a GPU is usable)");
ABSL_FLAG(std::string, trace_dir, "", "Directory of *.trace[.gz] files to replay");
ABSL_FLAG(std::string, torch_peer, "",
          "PyTorch peer library (.so) to compare with, cuda only (default: "
          "$STRATA_BENCH_TORCH_PEER)");
ABSL_FLAG(double, min_time, 0.2, "Minimum seconds per benchmark (--benchmark_min_time overrides)");
ABSL_FLAG(int, replay_iterations, 5, "Cold replays per trace and subject (warm replays: 2N)");
ABSL_FLAG(std::uint64_t, replay_pollute_kib, 0,
          "Warm replays: write this many KiB of other memory before each event and time each "
          "call alone, so that the allocator meets cold caches as in a framework (0: none)");
ABSL_FLAG(int, max_threads, 16, "BM_Threads runs 1, 2, 4, ... up to this many threads");
ABSL_FLAG(std::uint64_t, emulated_capacity_mb, 80 * 1024,
          "Memory of the emulated device (address space only)");
namespace strata::tools::bench {

constexpr char kUsage[] =
    "strata-bench [--device=emulated|cuda] [--trace_dir=DIR] [--torch_peer=PATH.so]\n"
    "             [--min_time=SECONDS (default 0.2; --benchmark_min_time overrides)]\n"
    "             [--replay_iterations=N (default 5; warm replays run 2N)]\n"
    "             [--replay_pollute_kib=KIB (default 0: warm replays with hot caches)]\n"
    "             [--max_threads=N (default 16)] [--emulated_capacity_mb=MB (default 81920)]\n"
    "             [any allocator flag, e.g. --allocator_strategy=NAME (see --helpfull)]\n"
    "             [--benchmark_* flags of Google Benchmark]\n";

[[noreturn]] void Usage(const std::string& problem) {
  std::fprintf(stderr, "strata-bench: %s\n%s", problem.c_str(), kUsage);
  std::exit(2);
}

// Parses the command line. Arguments starting with --benchmark_ are Google Benchmark's: they
// are returned in `benchmark_args` (argv[0] first) for benchmark::Initialize, with
// --benchmark_min_time=<--min_time> added unless given: a global default keeps the benchmark
// names free of a "/min_time:" suffix. That is why Abseil parses the rest first: it knows
// neither Google Benchmark's flags nor would they know ours. --help prints our usage and Google
// Benchmark's, and exits.
Options ParseOptions(int argc, char** argv, std::vector<char*>* benchmark_args) {
  std::vector<char*> ours = {argv[0]};
  benchmark_args->push_back(argv[0]);
  bool min_time_given = false;
  bool only_positional = false;  // after "--"
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (!only_positional && (arg == "--help" || arg == "-h")) {
      std::fputs(kUsage, stdout);
      std::fputs("\nGoogle Benchmark's flags:\n", stdout);
      std::fflush(stdout);
      char help[] = "--help";
      char* help_args[] = {argv[0], help, nullptr};
      int n = 2;
      benchmark::Initialize(&n, help_args);  // prints its usage and exits
      std::exit(0);
    }
    if (!only_positional && arg.starts_with("--benchmark_")) {
      min_time_given = min_time_given || arg.starts_with("--benchmark_min_time=");
      benchmark_args->push_back(argv[i]);
      continue;
    }
    only_positional = only_positional || arg == "--";
    ours.push_back(argv[i]);
  }

  absl::SetProgramUsageMessage(kUsage);
  if (const char* d = std::getenv("STRATA_BENCH_DEVICE")) absl::SetFlag(&FLAGS_device, d);
  if (const char* p = std::getenv("STRATA_BENCH_TORCH_PEER")) absl::SetFlag(&FLAGS_torch_peer, p);
  std::vector<char*> positional;
  try {
    // Exits with Abseil's message for an unknown flag or a value of the wrong type.
    positional = strata::flags::ParseCommandLine(static_cast<int>(ours.size()), ours.data());
  } catch (const std::invalid_argument& e) {
    Usage(e.what());  // an allocator flag's value breaking a constraint
  }
  if (positional.size() > 1) {
    Usage(absl::StrCat("unexpected argument '", positional[1], "' (flags are --name=value)"));
  }

  Options o;
  o.device = absl::GetFlag(FLAGS_device);
  o.trace_dir = absl::GetFlag(FLAGS_trace_dir);
  o.torch_peer = absl::GetFlag(FLAGS_torch_peer);
  o.min_time = absl::GetFlag(FLAGS_min_time);
  if (!(o.min_time > 0)) {
    Usage(absl::StrCat("--min_time needs a positive number of seconds, got ", o.min_time));
  }
  auto positive = [](const char* flag, auto value) {
    if (!(value > 0)) Usage(absl::StrCat("--", flag, " needs a positive integer, got ", value));
    return value;
  };
  o.replay_iterations = positive("replay_iterations", absl::GetFlag(FLAGS_replay_iterations));
  o.max_threads = positive("max_threads", absl::GetFlag(FLAGS_max_threads));
  o.replay_pollute_kib = absl::GetFlag(FLAGS_replay_pollute_kib);
  if (o.replay_pollute_kib > (std::uint64_t{1} << 20)) {
    Usage(absl::StrCat("--replay_pollute_kib must be at most 1048576 (1 GiB), got ",
                       o.replay_pollute_kib));
  }
  o.emulated_capacity_mb =
      positive("emulated_capacity_mb", absl::GetFlag(FLAGS_emulated_capacity_mb));
  if (o.emulated_capacity_mb > (strata::platform::EmulatedRuntime::kMaxCapacityBytes >> 20)) {
    Usage(absl::StrCat("--emulated_capacity_mb must be at most ",
                       strata::platform::EmulatedRuntime::kMaxCapacityBytes >> 20, ", got ",
                       o.emulated_capacity_mb));
  }
  if (!min_time_given) {
    static std::string min_time_flag;
    min_time_flag = absl::StrCat("--benchmark_min_time=", o.min_time);
    benchmark_args->push_back(min_time_flag.data());
  }
  return o;
}

}  // namespace strata::tools::bench
