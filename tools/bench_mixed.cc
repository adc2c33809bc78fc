// strata-bench's mixed-sizes family (tools/bench_mixed.h).
#include "tools/bench_mixed.h"

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocation/memory_stats.h"
#include "tools/bench_common.h"
#include "tools/bench_env.h"
#include "tools/bench_subject_ops.h"
#include "tools/trace.h"

namespace strata::tools::bench {
namespace {

using platform::Stream;

constexpr std::size_t kWindow = 256;
constexpr std::size_t kPlanLength = std::size_t{1} << 16;  // a power of two
// BM_Mixed's untimed warm-up: periods of the plan, so that the timed steps repeat requests the
// allocator has met in the same order; for strata's pools, more periods while a period still made
// device calls (but fewer than one a step: none is a pool settled, one or more no pool at all), at
// most kMaxWarmUpPeriods. The virtual-memory pool's stitching slack adapts over several periods:
// with trace sizes (emulated device) its periods made 4,148, 1,284, 94, 63, 364, 620 and 790
// calls, and a short timed run after one period 8.4 calls per 1,000 operations, after eight
// 0.075.
constexpr int kMaxWarmUpPeriods = 8;
constexpr std::uint64_t kSeed = 20240607;

struct MixedPlan {
  std::vector<std::size_t> sizes;      // kPlanLength sizes, the first kWindow fill the window
  std::vector<std::uint16_t> victims;  // kPlanLength window slots
};

MixedPlan LogUniformPlan() {
  std::mt19937_64 rng(kSeed);
  std::uniform_real_distribution<double> log_size(std::log(256.0), std::log(64.0 * kMiB));
  std::uniform_int_distribution<int> slot(0, kWindow - 1);
  MixedPlan plan;
  for (std::size_t i = 0; i < kPlanLength; ++i) {
    plan.sizes.push_back(static_cast<std::size_t>(std::exp(log_size(rng))));
    plan.victims.push_back(static_cast<std::uint16_t>(slot(rng)));
  }
  return plan;
}

// Sizes drawn uniformly from every allocation of the loaded traces (empty without traces).
MixedPlan TraceSizesPlan() {
  std::vector<std::size_t> pool;
  for (const NamedTrace& t : env->traces) {
    for (const TraceEvent& e : t.trace.events()) {
      if (e.is_alloc() && e.bytes != 0) pool.push_back(e.bytes);
    }
  }
  MixedPlan plan;
  if (pool.empty()) return plan;
  std::mt19937_64 rng(kSeed + 1);
  std::uniform_int_distribution<std::size_t> pick(0, pool.size() - 1);
  std::uniform_int_distribution<int> slot(0, kWindow - 1);
  for (std::size_t i = 0; i < kPlanLength; ++i) {
    plan.sizes.push_back(pool[pick(rng)]);
    plan.victims.push_back(static_cast<std::uint16_t>(slot(rng)));
  }
  return plan;
}

template <typename Ops>
void MixedLoop(benchmark::State& state, Ops& ops, const MixedPlan& plan) {
  std::vector<typename Ops::Handle> window(kWindow);
  for (std::size_t i = 0; i < kWindow; ++i) window[i] = ops.Alloc(plan.sizes[i], Stream{});
  std::size_t k = kWindow;
  auto step = [&] {
    auto& slot = window[plan.victims[k]];
    ops.Free(slot, Stream{});
    slot = ops.Alloc(plan.sizes[k], Stream{});
    k = (k + 1) & (kPlanLength - 1);
  };
  // Untimed warm-up: the pool grows to its steady state.
  auto period = [&] {
    for (std::size_t i = 0; i < kPlanLength; ++i) step();
  };
  period();
  if constexpr (std::is_same_v<Ops, FacadeOps>) {
    std::int64_t last = DeviceCalls(ops.facade().GetMemoryStats(kPlace));
    for (int p = 1; p < kMaxWarmUpPeriods; ++p) {
      period();
      const std::int64_t now = DeviceCalls(ops.facade().GetMemoryStats(kPlace));
      const std::int64_t calls = now - last;
      // Settled; or no pool (a call or more per step, as the system allocator makes).
      if (calls == 0 || calls >= static_cast<std::int64_t>(kPlanLength)) break;
      last = now;
    }
  }
  allocation::MemoryStats before;
  if constexpr (std::is_same_v<Ops, FacadeOps>) {
    ops.facade().ResetPeakStats(kPlace);
    before = ops.facade().GetMemoryStats(kPlace);
  }
  for (auto _ : state) step();
  if constexpr (std::is_same_v<Ops, FacadeOps>) {
    // A free and an allocation per step.
    const allocation::MemoryStats after = ops.facade().GetMemoryStats(kPlace);
    SetDeviceCallCounters(state, before, after, 2.0 * static_cast<double>(state.iterations()));
    // What the steady state holds: peak reserved over peak allocated, in the timed steps.
    const auto allocated = after.allocated_bytes[allocation::kAggregate].peak;
    state.counters["reserved_over_allocated"] =
        allocated > 0 ? static_cast<double>(after.reserved_bytes[allocation::kAggregate].peak) /
                            static_cast<double>(allocated)
                      : 0.0;
  }
  for (auto& h : window) ops.Free(h, Stream{});
  state.SetItemsProcessed(state.iterations());
}

void MixedFacade(benchmark::State& state, const flags::AllocatorFlags& flags,
                 const MixedPlan* plan) {
  Guarded(state, [&] {
    FacadeOps ops(flags);
    MixedLoop(state, ops, *plan);
  });
}

template <typename Ops>
void MixedPeer(benchmark::State& state, const MixedPlan* plan) {
  Guarded(state, [&] {
    Ops ops;
    MixedLoop(state, ops, *plan);
    ops.Release();
  });
}

}  // namespace

void RegisterMixedBenchmarks() {
  const auto configs = StrataConfigs(/*with_system=*/true);
  static const MixedPlan log_uniform = LogUniformPlan();
  static const MixedPlan trace_sizes = TraceSizesPlan();
  std::vector<std::pair<std::string, const MixedPlan*>> plans = {{"loguniform", &log_uniform}};
  if (!trace_sizes.sizes.empty()) plans.emplace_back("trace_sizes", &trace_sizes);
  for (const auto& [plan_name, plan] : plans) {
    for (const StrataConfig& c : configs) {
      benchmark::RegisterBenchmark(
          absl::StrCat("BM_Mixed/", c.name, "/", plan_name).c_str(),
          [c, plan = plan](benchmark::State& s) { MixedFacade(s, c.flags, plan); });
    }
    RegisterPeerBenchmarks("BM_Mixed", plan_name, /*torch=*/true,
                           [plan = plan](benchmark::State& s, auto ops) {
                             MixedPeer<typename decltype(ops)::type>(s, plan);
                           });
  }
}

}  // namespace strata::tools::bench
