// strata-bench's command line: its own flags (Abseil), the allocator flags (parsed as in every
// strata program) and Google Benchmark's --benchmark_* flags, which are set apart for
// benchmark::Initialize.
//
// Thread-compatible: called once, from main, before any benchmark runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::tools::bench {

struct Options {
  std::string device;  // empty: auto
  std::string trace_dir;
  std::string torch_peer;
  double min_time = 0.2;
  int replay_iterations = 5;
  // Warm replays: KiB of other memory written before each event (0: none), as a framework's
  // own work between two allocator calls evicts the allocator's data from the caches.
  std::uint64_t replay_pollute_kib = 0;
  int max_threads = 16;
  std::uint64_t emulated_capacity_mb = 80 * 1024;
};

// Prints "strata-bench: <problem>" and the usage on stderr, and exits with status 2.
[[noreturn]] void Usage(const std::string& problem);

// Parses the command line. Arguments starting with --benchmark_ are Google Benchmark's: they
// are returned in `benchmark_args` (argv[0] first) for benchmark::Initialize, with
// --benchmark_min_time=<--min_time> added unless given. --help prints our usage and Google
// Benchmark's, and exits; bad flags exit with status 1 (Abseil's) or 2 (Usage).
Options ParseOptions(int argc, char** argv, std::vector<char*>* benchmark_args);

}  // namespace strata::tools::bench
