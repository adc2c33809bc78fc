// strata-bench: Google Benchmark suite of strata's allocators, and of its peers on a real GPU.
//
//   strata-bench [--device=emulated|cuda] [--trace_dir=DIR] [--torch_peer=PATH.so]
//                [--min_time=SECONDS] [--replay_iterations=N] [--max_threads=N]
//                [--emulated_capacity_mb=MB] [any allocator flag] [any --benchmark_* flag]
//
// Subjects (the middle part of every benchmark name, so peers line up):
//   strata_auto_growth     the facade's chunk pool chain (auto_growth + stream-safe + thread
//                          cache: use_virtual_memory_auto_growth=false)
//   strata_naive_best_fit  the facade with allocator_strategy=naive_best_fit
//   strata_thread_local    the facade with allocator_strategy=thread_local, 1 GiB per-thread
//                          refills (initial/reallocate_gpu_memory_in_mb=1024: the default
//                          fraction of free memory per thread runs the device dry by thread 6)
//   strata_vmm             the facade's default chain: one virtual-memory pool per device under
//                          every stream's stream-safe chain and thread cache
//                          (strategies/vmm_pool.h)
//   strata_system          the facade with use_system_allocator (no caching)
//   <subject>_recording    strata_auto_growth / strata_vmm with the memory history recording
//                          (AllocatorFacade::RecordHistory, default ring): BM_CachedPair only
//   strata_chain           a hand-built DeviceAllocator -> AutoGrowth -> StreamSafe -> Retry ->
//                          Stat chain, called directly (no facade)
//   torch                  PyTorch's CUDA caching allocator (--torch_peer, cuda only); named
//                          torch_expandable where PYTORCH_CUDA_ALLOC_CONF turns on
//                          expandable_segments (PyTorch reads it when the peer loads)
//   cuda_malloc_async      cudaMallocAsync on device 0's default pool with
//                          cudaMemPoolAttrReleaseThreshold = UINT64_MAX (cuda only)
//
// Benchmarks
//   BM_CachedPair/<subject>/<bytes>          allocate + free of one size, cached (steady state)
//   BM_Mixed/<subject>/{loguniform,trace_sizes}
//                                            a window of 256 live allocations; each iteration
//                                            frees a random one and allocates a new size
//                                            (fixed seed; log-uniform 256 B..64 MiB, or sizes
//                                            drawn from the loaded traces); strata subjects
//                                            count device_calls_per_op (creates, releases,
//                                            maps, unmaps per free or allocation; steady: 0)
//   BM_Replay/<subject>/<trace>              a cold replay of a PyTorch trace (fresh allocator,
//                                            empty cache), manual time = the event loop only;
//                                            counters ns_per_event, peak_reserved, fragmentation,
//                                            and device_calls_per_op (per event) for strata
//   BM_ReplayWarm/<subject>/<trace>          the same replay on a warm allocator (steady state);
//                                            strata subjects count device_mallocs, device_maps
//                                            and stream_waits per timed replay, and
//                                            device_calls_per_op per event (warm: none)
//   BM_Threads/<subject>/4096/threads:N      cached pairs on N threads; items_per_second is the
//                                            total throughput (scaling = items/s(N) / items/s(1))
//   BM_DeviceCalls/<call>/<pages>            the device's memory calls (bench_device_calls.h)
//   BM_HistoryRecord/pair/<entries>/threads:N  the history recorder alone (bench_history.h)
//   BM_RecordStream/<subject>/<bytes>        allocate on stream A, record stream B, free; the
//                                            next allocation reclaims it once B's event is done
//
// Flags: Google Benchmark's --benchmark_* flags go to benchmark::Initialize; every other flag is
// an Abseil flag, parsed first by strata::flags::ParseCommandLine as in every strata program:
// ours above, strata's allocator flags (--allocator_strategy=..., also from the environment:
// FLAGS_<name>, STRATA_ALLOC_CONF) and glog's (--v, --vmodule, ...). --help lists ours and
// Google Benchmark's, --helpfull every Abseil flag. Environment: STRATA_BENCH_DEVICE and
// STRATA_BENCH_TORCH_PEER give defaults for --device and --torch_peer.
// Exit status: 0; 1 when a benchmark was skipped with an error (the others still ran), or when
// Abseil rejects a flag (unknown, or a value of the wrong type: its message names the flag); 2
// for other bad flags or arguments. Default device: cuda when a GPU is usable, else emulated.
// Traces: --trace_dir, else
// the first of ../shared/traces and shared/traces (relative to the working directory, then to the
// repository holding the binary), plus the bundled tools/traces/resnet50_train.trace.gz when no
// trace of that name was found there.
//
// The pieces: tools/bench_options.h (the command line), tools/bench_env.h (device, traces,
// peers, subjects), tools/bench_subject_ops.h (the subjects' adapters), one file per family
// (tools/bench_cached_pair.h, bench_mixed.h, bench_replay.h, bench_threads.h,
// bench_record_stream.h, bench_device_calls.h, bench_history.h), registered here in that order.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <exception>
#include <utility>
#include <vector>

#include "tools/bench_cached_pair.h"
#include "tools/bench_common.h"
#include "tools/bench_device_calls.h"
#include "tools/bench_env.h"
#include "tools/bench_history.h"
#include "tools/bench_mixed.h"
#include "tools/bench_options.h"
#include "tools/bench_record_stream.h"
#include "tools/bench_replay.h"
#include "tools/bench_threads.h"

namespace {

namespace bench = strata::tools::bench;

void RegisterAll() {
  bench::RegisterCachedPairBenchmarks();
  bench::RegisterMixedBenchmarks();
  // Trace replay: cold (fresh allocator) and warm.
  bench::RegisterReplayBenchmarks();
  bench::RegisterThreadsBenchmarks();
  // RecordStream + free + reclaim, on the stream-safe chains.
  bench::RegisterRecordStreamBenchmarks();
  strata::tools::RegisterDeviceCallBenchmarks(bench::env->runtime, 0, bench::env->device == "cuda");
  strata::tools::RegisterHistoryBenchmarks();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<char*> args;
    bench::Options options = bench::ParseOptions(argc, argv, &args);
    int n = static_cast<int>(args.size());
    args.push_back(nullptr);
    benchmark::Initialize(&n, args.data());
    if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 2;
    bench::Setup(std::move(options));
    RegisterAll();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    if (const int n = bench::SkippedWithError(); n != 0) {
      std::fprintf(stderr, "strata-bench: %d benchmark(s) skipped with an error (see above)\n", n);
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
