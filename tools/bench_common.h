// Helpers every strata-bench family shares: the device place, skipping a benchmark on an
// error (counted for the exit status), benchmark name parts, device-call counters and the
// streams of a replay.
//
// Thread safety: Skip and Guarded may run on any benchmark thread; the rest as their callers.
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <exception>
#include <string>
#include <vector>

#include "allocation/memory_stats.h"
#include "platform/place.h"
#include "platform/stream.h"

namespace strata::tools::bench {

inline const platform::CUDAPlace kPlace(0);
inline constexpr std::size_t kKiB = 1024, kMiB = kKiB * 1024;

// Skips the benchmark with `why` and counts it: main() exits with status 1 when any was.
void Skip(benchmark::State& state, const std::string& why);
int SkippedWithError();

// Runs `body`; an exception skips the benchmark with its message instead of ending the program.
template <typename F>
void Guarded(benchmark::State& state, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    Skip(state, e.what());
  }
}

std::string SizeName(std::size_t bytes);

// Device calls so far in a strata facade's statistics: physical creates or mallocs, releases or
// frees, maps, unmaps.
std::int64_t DeviceCalls(const allocation::MemoryStats& s);
// Device calls (physical creates or mallocs, releases or frees, maps, unmaps) per operation
// between two readings of a strata facade's statistics: a steady state makes none.
void SetDeviceCallCounters(benchmark::State& state, const allocation::MemoryStats& before,
                           const allocation::MemoryStats& after, double operations);

// Streams of a replay: index 0 is the default stream, the others are created on device 0.
class StreamSet {
 public:
  explicit StreamSet(std::size_t n);
  ~StreamSet();
  StreamSet(const StreamSet&) = delete;
  StreamSet& operator=(const StreamSet&) = delete;
  const std::vector<platform::Stream>& all() const { return streams_; }
  platform::Stream operator[](std::size_t i) const { return streams_[i]; }

 private:
  std::vector<platform::Stream> streams_;
};

}  // namespace strata::tools::bench
