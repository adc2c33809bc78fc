// strata-bench's trace-replay family (tools/bench_replay.h).
#include "tools/bench_replay.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocation/memory_stats.h"
#include "tools/bench_common.h"
#include "tools/bench_env.h"
#include "tools/bench_subject_ops.h"
#include "tools/replay.h"
#include "tools/trace.h"

namespace strata::tools::bench {
namespace {

double Nanos(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::nano>(b - a).count();
}

benchmark::Counter Bytes(double v) {
  return benchmark::Counter(v, benchmark::Counter::kDefaults, benchmark::Counter::kIs1024);
}

// Writes one byte of every cache line of `buffer`: what a framework's own work between two
// allocator calls does to the caches.
void Pollute(std::vector<unsigned char>& buffer, unsigned char value) {
  for (std::size_t i = 0; i < buffer.size(); i += 64) buffer[i] = value;
  benchmark::ClobberMemory();
}

// Replays `trace` once through `ops` and returns the nanoseconds of the event loop only.
// Allocations live at the end are freed afterwards, untimed (as Replayer::TimeOnce does). With
// `pollute_kib`, that much other memory is written before each event, and each call is timed
// alone (the clock's own cost, about 20 ns a call, is included).
template <typename Ops>
double ReplayTimed(Ops& ops, const Trace& trace, const StreamSet& streams,
                   std::uint64_t pollute_kib = 0) {
  std::vector<typename Ops::Handle> live(trace.num_allocations());
  std::vector<std::uint16_t> owner(trace.num_allocations(), 0);
  const auto event = [&](const TraceEvent& e) {
    if (e.is_alloc()) {
      live[e.index] = ops.Alloc(e.bytes, streams[e.stream]);
      owner[e.index] = e.stream;
    } else {
      ops.FreeUsedOn(live[e.index], streams[owner[e.index]], streams[e.stream]);
    }
  };
  double ns = 0;
  if (pollute_kib == 0) {
    const auto start = std::chrono::steady_clock::now();
    for (const TraceEvent& e : trace.events()) event(e);
    ns = Nanos(start, std::chrono::steady_clock::now());
  } else {
    std::vector<unsigned char> buffer(pollute_kib * 1024);
    unsigned char value = 0;
    for (const TraceEvent& e : trace.events()) {
      Pollute(buffer, ++value);
      const auto start = std::chrono::steady_clock::now();
      event(e);
      ns += Nanos(start, std::chrono::steady_clock::now());
    }
  }
  for (std::size_t i = 0; i < live.size(); ++i) {
    if (live[i]) ops.Free(live[i], streams[owner[i]]);
  }
  return ns;
}

void SetReplayCounters(benchmark::State& state, const Trace& trace, double total_ns,
                       std::uint64_t peak_reserved) {
  const double events = static_cast<double>(trace.num_events());
  const double iterations =
      static_cast<double>(std::max<benchmark::IterationCount>(state.iterations(), 1));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * trace.num_events()));
  state.counters["events"] = events;
  state.counters["ns_per_event"] = total_ns / (iterations * std::max(events, 1.0));
  if (peak_reserved != 0) {
    state.counters["peak_reserved"] = Bytes(static_cast<double>(peak_reserved));
    if (trace.peak_requested_bytes() != 0) {
      state.counters["fragmentation"] =
          static_cast<double>(peak_reserved) / static_cast<double>(trace.peak_requested_bytes());
    }
  }
  const auto& h = trace.header();
  if (h.torch_peak_requested != 0) {
    state.counters["torch_recorded_frag"] =
        static_cast<double>(h.torch_peak_reserved) / static_cast<double>(h.torch_peak_requested);
  }
}

// The measured (untimed) replay of a strata configuration: peaks and device calls. Cached, as
// Google Benchmark may call a benchmark function more than once.
const strata::tools::ReplayResult& StrataReplayResult(const StrataConfig& config,
                                                      const NamedTrace& t) {
  static std::map<std::string, strata::tools::ReplayResult> cache;
  const std::string key = config.name + "/" + t.name;
  auto it = cache.find(key);
  if (it == cache.end()) {
    strata::tools::Replayer replayer(env->runtime, env->device, config.flags);
    strata::tools::Replayer::Options options;
    options.timed_pass = false;
    it = cache.emplace(key, replayer.Run(t.trace, options)).first;
  }
  return it->second;
}

void ReplayStrataCold(benchmark::State& state, const StrataConfig& config, const NamedTrace* t) {
  Guarded(state, [&] {
    const strata::tools::ReplayResult& r = StrataReplayResult(config, *t);
    if (!r.oom_message.empty()) {
      Skip(state, absl::StrCat("out of memory at event ", r.oom_event, ": ", r.oom_message));
      return;
    }
    strata::tools::Replayer replayer(env->runtime, env->device, config.flags);
    double total = 0;
    for (auto _ : state) {
      const double ns = replayer.TimeOnce(t->trace);
      state.SetIterationTime(ns * 1e-9);
      total += ns;
    }
    SetReplayCounters(state, t->trace, total, r.peak_reserved_bytes);
    state.counters["device_mallocs"] = static_cast<double>(r.device_mallocs);
    state.counters["device_calls_per_op"] =
        static_cast<double>(r.device_mallocs + r.device_frees + r.num_device_map +
                            r.num_device_unmap) /
        std::max(static_cast<double>(r.events), 1.0);
  });
}

template <typename Ops>
void ReplayPeerCold(benchmark::State& state, const NamedTrace* t) {
  Guarded(state, [&] {
    StreamSet streams(t->trace.stream_table_size());  // outlives the allocator
    Ops ops;
    double total = 0;
    std::uint64_t peak = 0;
    for (auto _ : state) {
      ops.Release();  // cold, as a fresh strata facade
      ops.ResetPeak();
      const double ns = ReplayTimed(ops, t->trace, streams);
      state.SetIterationTime(ns * 1e-9);
      total += ns;
      peak = std::max(peak, ops.PeakReserved());
    }
    ops.Release();
    SetReplayCounters(state, t->trace, total, peak);
  });
}

template <typename Ops, typename... Args>
void ReplayWarm(benchmark::State& state, const NamedTrace* t, Args&&... args) {
  Guarded(state, [&] {
    StreamSet streams(t->trace.stream_table_size());  // outlives the allocator
    Ops ops(std::forward<Args>(args)...);
    ReplayTimed(ops, t->trace, streams);  // warm-up: the cache reaches its steady state
    allocation::MemoryStats before;
    if constexpr (std::is_same_v<Ops, FacadeOps>) before = ops.facade().GetMemoryStats(kPlace);
    const std::uint64_t pollute_kib = env->options.replay_pollute_kib;
    double total = 0;
    for (auto _ : state) {
      const double ns = ReplayTimed(ops, t->trace, streams, pollute_kib);
      state.SetIterationTime(ns * 1e-9);
      total += ns;
    }
    SetReplayCounters(state, t->trace, total, 0);
    if (pollute_kib != 0) state.counters["pollute_kib"] = static_cast<double>(pollute_kib);
    if constexpr (std::is_same_v<Ops, FacadeOps>) {
      // Device calls a warm replay still makes (a steady state makes none), per replay.
      const allocation::MemoryStats after = ops.facade().GetMemoryStats(kPlace);
      const auto per = [&](std::int64_t n) {
        return static_cast<double>(n) /
               static_cast<double>(std::max<benchmark::IterationCount>(state.iterations(), 1));
      };
      state.counters["device_mallocs"] = per(after.num_device_alloc - before.num_device_alloc);
      state.counters["device_maps"] = per(after.num_device_map - before.num_device_map);
      state.counters["stream_waits"] = per(after.num_stream_waits - before.num_stream_waits);
      SetDeviceCallCounters(
          state, before, after,
          static_cast<double>(state.iterations()) * static_cast<double>(t->trace.events().size()));
    }
    ops.Release();
  });
}

}  // namespace

void RegisterReplayBenchmarks() {
  const auto pooled = StrataConfigs(/*with_system=*/false);
  const int iterations = env->options.replay_iterations;
  auto replay = [&](benchmark::internal::Benchmark* b, int n) {
    b->Iterations(n)->UseManualTime()->Unit(benchmark::kMicrosecond);
  };
  for (const NamedTrace& t : env->traces) {
    const NamedTrace* tp = &t;
    for (const StrataConfig& c : pooled) {
      replay(benchmark::RegisterBenchmark(
                 absl::StrCat("BM_Replay/", c.name, "/", t.name).c_str(),
                 [c, tp](benchmark::State& s) { ReplayStrataCold(s, c, tp); }),
             iterations);
    }
    const auto peers = RegisterPeerBenchmarks("BM_Replay", t.name, /*torch=*/true,
                                              [tp](benchmark::State& s, auto ops) {
                                                ReplayPeerCold<typename decltype(ops)::type>(s, tp);
                                              });
    for (auto* b : peers) replay(b, iterations);
  }
  for (const NamedTrace& t : env->traces) {
    const NamedTrace* tp = &t;
    for (const StrataConfig& c : pooled) {
      replay(benchmark::RegisterBenchmark(
                 absl::StrCat("BM_ReplayWarm/", c.name, "/", t.name).c_str(),
                 [c, tp](benchmark::State& s) { ReplayWarm<FacadeOps>(s, tp, c.flags); }),
             2 * iterations);
    }
    const auto peers = RegisterPeerBenchmarks(
        "BM_ReplayWarm", t.name, /*torch=*/true,
        [tp](benchmark::State& s, auto ops) { ReplayWarm<typename decltype(ops)::type>(s, tp); });
    for (auto* b : peers) replay(b, 2 * iterations);
  }
}

}  // namespace strata::tools::bench
