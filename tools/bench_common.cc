// strata-bench's shared helpers (tools/bench_common.h).
#include "tools/bench_common.h"

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "tools/bench_env.h"

namespace strata::tools::bench {
namespace {

// Benchmarks skipped with an error; main() exits with status 1 when there are any.
std::atomic<int> skipped_with_error{0};

}  // namespace

void Skip(benchmark::State& state, const std::string& why) {
  skipped_with_error.fetch_add(1);
  state.SkipWithError(why.c_str());
}

int SkippedWithError() { return skipped_with_error.load(); }

std::string SizeName(std::size_t bytes) { return absl::StrCat(bytes); }

std::int64_t DeviceCalls(const allocation::MemoryStats& s) {
  return s.num_device_alloc + s.num_device_free + s.num_device_map + s.num_device_unmap;
}

void SetDeviceCallCounters(benchmark::State& state, const allocation::MemoryStats& before,
                           const allocation::MemoryStats& after, double operations) {
  const std::int64_t calls = DeviceCalls(after) - DeviceCalls(before);
  state.counters["device_calls_per_op"] = static_cast<double>(calls) / std::max(operations, 1.0);
  // Which calls (per operation): creates and maps come with growth or remapping, unmaps with
  // remapping only.
  const double ops = std::max(operations, 1.0);
  state.counters["creates_per_op"] =
      static_cast<double>(after.num_device_alloc - before.num_device_alloc) / ops;
  state.counters["maps_per_op"] =
      static_cast<double>(after.num_device_map - before.num_device_map) / ops;
  state.counters["unmaps_per_op"] =
      static_cast<double>(after.num_device_unmap - before.num_device_unmap) / ops;
}

StreamSet::StreamSet(std::size_t n) {
  streams_.resize(std::max<std::size_t>(n, 1));
  for (std::size_t i = 1; i < streams_.size(); ++i) streams_[i] = env->runtime->CreateStream(0);
}

StreamSet::~StreamSet() {
  for (std::size_t i = 1; i < streams_.size(); ++i) env->runtime->DestroyStream(streams_[i]);
}

}  // namespace strata::tools::bench
