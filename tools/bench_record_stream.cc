// strata-bench's record-stream family (tools/bench_record_stream.h).
#include "tools/bench_record_stream.h"

#include <benchmark/benchmark.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocation/allocation.h"
#include "facade/allocator_facade.h"
#include "tools/bench_common.h"
#include "tools/bench_env.h"
#include "tools/bench_subject_ops.h"

namespace strata::tools::bench {
namespace {

using allocation::AllocationPtr;

const std::vector<std::size_t> kRecordStreamSizes = {4 * kKiB, kMiB};

void RecordStreamFacade(benchmark::State& state, const flags::AllocatorFlags& flags,
                        std::size_t bytes) {
  Guarded(state, [&] {
    StreamSet streams(3);  // 1 = A (owner), 2 = B (user)
    {
      strata::facade::AllocatorFacade facade(env->runtime, flags);
      facade.SetDefaultStream(kPlace, streams[1]);
      for (auto _ : state) {
        AllocationPtr a = facade.Alloc(kPlace, bytes);
        facade.RecordStream(*a, streams[2]);
        a.reset();
      }
      state.SetItemsProcessed(state.iterations());
    }  // the facade goes before the streams it recorded
  });
}

template <typename Ops>
void RecordStreamPeer(benchmark::State& state, std::size_t bytes) {
  Guarded(state, [&] {
    StreamSet streams(3);
    Ops ops;
    for (auto _ : state) {
      void* p = ops.Alloc(bytes, streams[1]);
      ops.FreeUsedOn(p, streams[1], streams[2]);
    }
    state.SetItemsProcessed(state.iterations());
    ops.Release();
  });
}

}  // namespace

void RegisterRecordStreamBenchmarks() {
  const auto pooled = StrataConfigs(/*with_system=*/false);
  for (std::size_t bytes : kRecordStreamSizes) {
    const std::string size = SizeName(bytes);
    for (const StrataConfig& c : pooled) {
      if (c.name != "strata_auto_growth" && c.name != "strata_vmm") continue;
      benchmark::RegisterBenchmark(
          absl::StrCat("BM_RecordStream/", c.name, "/", size).c_str(),
          [c, bytes](benchmark::State& s) { RecordStreamFacade(s, c.flags, bytes); });
    }
    RegisterPeerBenchmarks("BM_RecordStream", size, env->torch && env->torch->has_record_stream(),
                           [bytes](benchmark::State& s, auto ops) {
                             RecordStreamPeer<typename decltype(ops)::type>(s, bytes);
                           });
  }
}

}  // namespace strata::tools::bench
