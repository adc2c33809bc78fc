// strata-bench's cached-pair family (tools/bench_cached_pair.h).
#include "tools/bench_cached_pair.h"

#include <benchmark/benchmark.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocation/allocation.h"
#include "facade/allocator_facade.h"
#include "layers/retry_allocator.h"
#include "layers/stat_allocator.h"
#include "layers/stream_safe_cuda_allocator.h"
#include "raw/device_allocator.h"
#include "strategies/auto_growth_best_fit_allocator.h"
#include "tools/bench_common.h"
#include "tools/bench_env.h"
#include "tools/bench_subject_ops.h"

namespace strata::tools::bench {
namespace {

using allocation::AllocationPtr;
using platform::Stream;

const std::vector<std::size_t> kPairSizes = {256, 4 * kKiB, 64 * kKiB, kMiB, 16 * kMiB, 256 * kMiB};

void CachedPairFacade(benchmark::State& state, const flags::AllocatorFlags& flags,
                      std::size_t bytes, bool recording = false) {
  Guarded(state, [&] {
    strata::facade::AllocatorFacade facade(env->runtime, flags);
    // The memory history on, its ring (the default 2^17 entries) wrapping in steady state.
    if (recording) facade.RecordHistory(kPlace, {});
    { AllocationPtr warm = facade.Alloc(kPlace, bytes); }
    for (auto _ : state) {
      AllocationPtr a = facade.Alloc(kPlace, bytes);
      benchmark::DoNotOptimize(a->ptr());
    }
    state.SetItemsProcessed(state.iterations());
  });
}

void CachedPairChain(benchmark::State& state, std::size_t bytes) {
  Guarded(state, [&] {
    namespace alloc = strata::allocation;
    auto device = std::make_shared<strata::raw::DeviceAllocator>(env->runtime, 0);
    auto pool = std::make_shared<strata::strategies::AutoGrowthBestFitAllocator>(
        device, kPlace, strata::strategies::AutoGrowthBestFitAllocator::Options{});
    auto stream_safe = std::make_shared<strata::layers::StreamSafeCUDAAllocator>(pool, env->runtime,
                                                                                 kPlace, Stream{});
    auto retry = std::make_shared<strata::layers::RetryAllocator>(
        stream_safe, env->base.gpu_allocator_retry_time);
    auto stat = std::make_shared<strata::layers::StatAllocator>(retry);
    alloc::Allocator* top = stat.get();
    { AllocationPtr warm = top->Allocate(bytes); }
    for (auto _ : state) {
      AllocationPtr a = top->Allocate(bytes);
      benchmark::DoNotOptimize(a->ptr());
    }
    state.SetItemsProcessed(state.iterations());
  });
}

template <typename Ops>
void CachedPairPeer(benchmark::State& state, std::size_t bytes) {
  Guarded(state, [&] {
    Ops ops;
    {
      void* warm = ops.Alloc(bytes, Stream{});
      ops.Free(warm, Stream{});
    }
    for (auto _ : state) {
      void* p = ops.Alloc(bytes, Stream{});
      benchmark::DoNotOptimize(p);
      ops.Free(p, Stream{});
    }
    state.SetItemsProcessed(state.iterations());
    ops.Release();
  });
}

}  // namespace

void RegisterCachedPairBenchmarks() {
  const auto configs = StrataConfigs(/*with_system=*/true);
  for (std::size_t bytes : kPairSizes) {
    const std::string size = SizeName(bytes);
    for (const StrataConfig& c : configs) {
      benchmark::RegisterBenchmark(
          absl::StrCat("BM_CachedPair/", c.name, "/", size).c_str(),
          [c, bytes](benchmark::State& s) { CachedPairFacade(s, c.flags, bytes); });
      if (c.name == "strata_auto_growth" || c.name == "strata_vmm") {
        benchmark::RegisterBenchmark(
            absl::StrCat("BM_CachedPair/", c.name, "_recording/", size).c_str(),
            [c, bytes](benchmark::State& s) { CachedPairFacade(s, c.flags, bytes, true); });
      }
    }
    benchmark::RegisterBenchmark(absl::StrCat("BM_CachedPair/strata_chain/", size).c_str(),
                                 [bytes](benchmark::State& s) { CachedPairChain(s, bytes); });
    RegisterPeerBenchmarks("BM_CachedPair", size, /*torch=*/true,
                           [bytes](benchmark::State& s, auto ops) {
                             CachedPairPeer<typename decltype(ops)::type>(s, bytes);
                           });
  }
}

}  // namespace strata::tools::bench
