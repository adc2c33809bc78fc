// strata-bench's threads family (tools/bench_threads.h).
#include "tools/bench_threads.h"

#include <benchmark/benchmark.h>

#include <cstddef>
#include <exception>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "allocation/allocation.h"
#include "facade/allocator_facade.h"
#include "tools/bench_common.h"
#include "tools/bench_env.h"
#include "tools/bench_subject_ops.h"

namespace strata::tools::bench {
namespace {

using allocation::AllocationPtr;
using platform::Stream;

constexpr std::size_t kThreadSize = 4 * kKiB;

// Built by thread 0 before the loop and destroyed by it after: Google Benchmark synchronizes all
// threads when the loop starts and when it ends.
std::unique_ptr<strata::facade::AllocatorFacade> thread_facade;
std::string thread_setup_error;

void ThreadsFacade(benchmark::State& state, const flags::AllocatorFlags& flags) {
  if (state.thread_index() == 0) {
    thread_setup_error.clear();
    try {
      thread_facade = std::make_unique<strata::facade::AllocatorFacade>(env->runtime, flags);
    } catch (const std::exception& e) {
      thread_setup_error = e.what();
    }
  }
  for (auto _ : state) {
    if (thread_facade == nullptr) [[unlikely]] {
      Skip(state, thread_setup_error);
      break;
    }
    AllocationPtr a = thread_facade->Alloc(kPlace, kThreadSize);
    benchmark::DoNotOptimize(a->ptr());
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) thread_facade.reset();
}

template <typename Ops>
void ThreadsPeer(benchmark::State& state, bool own_stream) {
  Ops ops;
  // cudaMallocAsync orders its frees on a stream: give each thread its own, as a framework
  // would, rather than serialize every thread on the legacy default stream.
  Stream s;
  if (own_stream) s = env->runtime->CreateStream(0);
  for (auto _ : state) {
    void* p = ops.Alloc(kThreadSize, s);
    benchmark::DoNotOptimize(p);
    ops.Free(p, s);
  }
  state.SetItemsProcessed(state.iterations());
  if (own_stream) {
    env->runtime->SynchronizeStream(s);
    env->runtime->DestroyStream(s);
  }
  if (state.thread_index() == 0) ops.Release();
}

}  // namespace

void RegisterThreadsBenchmarks() {
  const auto pooled = StrataConfigs(/*with_system=*/false);
  auto threads = [&](benchmark::internal::Benchmark* b) {
    for (int n = 1; n <= env->options.max_threads; n *= 2) b->Threads(n);
    b->UseRealTime();
  };
  const std::string tsize = SizeName(kThreadSize);
  for (const StrataConfig& c : pooled) {
    if (c.name == "strata_naive_best_fit") continue;
    threads(benchmark::RegisterBenchmark(absl::StrCat("BM_Threads/", c.name, "/", tsize).c_str(),
                                         [c](benchmark::State& s) { ThreadsFacade(s, c.flags); }));
  }
  if (env->torch) {
    threads(benchmark::RegisterBenchmark(
        absl::StrCat("BM_Threads/", env->torch_name, "/", tsize).c_str(),
        [](benchmark::State& s) { ThreadsPeer<TorchOps>(s, /*own_stream=*/false); }));
  }
  if (env->cuda_async) {
    threads(benchmark::RegisterBenchmark(
        absl::StrCat("BM_Threads/cuda_malloc_async/", tsize).c_str(),
        [](benchmark::State& s) { ThreadsPeer<CUDAAsyncOps>(s, /*own_stream=*/true); }));
  }
}

}  // namespace strata::tools::bench
