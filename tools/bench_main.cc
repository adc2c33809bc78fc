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
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "allocation/bad_alloc.h"
#include "facade/allocator_facade.h"
#include "flags/allocator_flags.h"
#include "flags/flag_sources.h"
#include "layers/retry_allocator.h"
#include "layers/stat_allocator.h"
#include "layers/stream_safe_cuda_allocator.h"
#include "platform/cuda_runtime.h"
#include "platform/emulated_runtime.h"
#include "raw/device_allocator.h"
#include "strategies/auto_growth_best_fit_allocator.h"
#include "tools/bench_device_calls.h"
#include "tools/bench_history.h"
#include "tools/cuda_malloc_async_peer.h"
#include "tools/peer_library.h"
#include "tools/replay.h"
#include "tools/trace.h"

#ifdef STRATA_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

ABSL_FLAG(std::string, device, "",
          "emulated or cuda (default: $STRATA_BENCH_DEVICE, else cuda when a GPU is usable)");
ABSL_FLAG(std::string, trace_dir, "", "Directory of *.trace[.gz] files to replay");
ABSL_FLAG(std::string, torch_peer, "",
          "PyTorch peer library (.so) to compare with, cuda only (default: "
          "$STRATA_BENCH_TORCH_PEER)");
ABSL_FLAG(double, min_time, 0.2, "Minimum seconds per benchmark (--benchmark_min_time overrides)");
ABSL_FLAG(int, replay_iterations, 5, "Cold replays per trace and subject (warm replays: 2N)");
ABSL_FLAG(int, max_threads, 16, "BM_Threads runs 1, 2, 4, ... up to this many threads");
ABSL_FLAG(std::uint64_t, emulated_capacity_mb, 80 * 1024,
          "Memory of the emulated device (address space only)");

namespace {

namespace fs = std::filesystem;
using strata::allocation::AllocationPtr;
using strata::flags::AllocatorFlags;
using strata::flags::AllocatorStrategy;
using strata::platform::Stream;
using strata::tools::Trace;
using strata::tools::TraceEvent;

const strata::platform::CUDAPlace kPlace(0);
constexpr std::size_t kKiB = 1024, kMiB = kKiB * 1024;
const std::vector<std::size_t> kPairSizes = {256, 4 * kKiB, 64 * kKiB, kMiB, 16 * kMiB, 256 * kMiB};
const std::vector<std::size_t> kRecordStreamSizes = {4 * kKiB, kMiB};
constexpr std::size_t kThreadSize = 4 * kKiB;
constexpr std::size_t kWindow = 256;
constexpr std::size_t kPlanLength = std::size_t{1} << 16;  // a power of two
// BM_Mixed's untimed warm-up: one period of the plan, so that the timed steps repeat requests the
// allocator has met in the same order. After four windows (1,024 steps, before) the
// virtual-memory pool was still growing to its peak (emulated device: 0.03 device calls a step on
// log-uniform sizes; after one period 0.008, and 0.05 on trace sizes: it still remaps there).
constexpr std::size_t kWarmUpSteps = kPlanLength;
constexpr std::uint64_t kSeed = 20240607;

struct Options {
  std::string device;  // empty: auto
  std::string trace_dir;
  std::string torch_peer;
  double min_time = 0.2;
  int replay_iterations = 5;
  int max_threads = 16;
  std::uint64_t emulated_capacity_mb = 80 * 1024;
};

struct StrataConfig {
  std::string name;
  AllocatorFlags flags;
};

struct NamedTrace {
  std::string name;
  Trace trace;
};

// Everything the benchmarks share; built in main() before any benchmark runs.
struct Env {
  Options options;
  std::unique_ptr<strata::platform::EmulatedRuntime> emulated;
  strata::platform::DeviceRuntime* runtime = nullptr;
  std::string device;
  AllocatorFlags base;
  std::vector<NamedTrace> traces;
  std::unique_ptr<strata::tools::PeerLibrary> torch;
  // The torch peer's subject: "torch", or "torch_expandable" where PYTORCH_CUDA_ALLOC_CONF (read
  // by PyTorch when the peer loads) turns expandable segments on.
  std::string torch_name = "torch";
  std::unique_ptr<strata::tools::CUDAMallocAsyncPeer> cuda_async;
};
Env* env = nullptr;

// ---- helpers ----------------------------------------------------------------------------------

// Benchmarks skipped with an error; main() exits with status 1 when there are any.
std::atomic<int> skipped_with_error{0};

void Skip(benchmark::State& state, const std::string& why) {
  skipped_with_error.fetch_add(1);
  state.SkipWithError(why.c_str());
}

// Runs `body`; an exception skips the benchmark with its message instead of ending the program.
template <typename F>
void Guarded(benchmark::State& state, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    Skip(state, e.what());
  }
}

std::string SizeName(std::size_t bytes) { return absl::StrCat(bytes); }

double Nanos(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::nano>(b - a).count();
}

benchmark::Counter Bytes(double v) {
  return benchmark::Counter(v, benchmark::Counter::kDefaults, benchmark::Counter::kIs1024);
}

// Streams of a replay: index 0 is the default stream, the others are created on device 0.
class StreamSet {
 public:
  explicit StreamSet(std::size_t n) {
    streams_.resize(std::max<std::size_t>(n, 1));
    for (std::size_t i = 1; i < streams_.size(); ++i) streams_[i] = env->runtime->CreateStream(0);
  }
  ~StreamSet() {
    for (std::size_t i = 1; i < streams_.size(); ++i) env->runtime->DestroyStream(streams_[i]);
  }
  StreamSet(const StreamSet&) = delete;
  StreamSet& operator=(const StreamSet&) = delete;
  const std::vector<Stream>& all() const { return streams_; }
  Stream operator[](std::size_t i) const { return streams_[i]; }

 private:
  std::vector<Stream> streams_;
};

// ---- subjects -----------------------------------------------------------------------------------
// Each "Ops" type offers the same inline operations so one template drives every subject:
//   Handle Alloc(bytes, stream); void Free(Handle&, owner); void FreeUsedOn(Handle&, owner, used);
//   void Release(); void ResetPeak(); uint64 PeakReserved().

class FacadeOps {
 public:
  using Handle = AllocationPtr;
  explicit FacadeOps(const AllocatorFlags& flags) : facade_(env->runtime, flags) {}

  Handle Alloc(std::size_t bytes, Stream s) {
    return s.is_default() ? facade_.Alloc(kPlace, bytes) : facade_.Alloc(kPlace, bytes, s);
  }
  void Free(Handle& h, Stream) { h.reset(); }
  void FreeUsedOn(Handle& h, Stream owner, Stream used_on) {
    // Strategies without the stream-safe layer share one pool across streams: a replay of
    // their memory behaviour has nothing to record.
    if (used_on != owner && facade_.HonoursRecordStream(kPlace)) facade_.RecordStream(*h, used_on);
    h.reset();
  }
  void Release() { facade_.Release(kPlace); }
  void ResetPeak() { facade_.ResetPeakStats(kPlace); }
  std::uint64_t PeakReserved() {
    const auto s = facade_.GetMemoryStats(kPlace);
    return static_cast<std::uint64_t>(s.reserved_bytes[strata::allocation::kAggregate].peak);
  }
  strata::facade::AllocatorFacade& facade() { return facade_; }

 private:
  strata::facade::AllocatorFacade facade_;
};

class TorchOps {
 public:
  using Handle = void*;
  TorchOps() : peer_(*env->torch) {}

  Handle Alloc(std::size_t bytes, Stream s) {
    return bytes == 0 ? nullptr : peer_.Alloc(bytes, s.handle);
  }
  void Free(Handle& h, Stream) {
    if (h != nullptr) peer_.Free(h);
    h = nullptr;
  }
  void FreeUsedOn(Handle& h, Stream owner, Stream used_on) {
    if (h != nullptr && used_on != owner) peer_.RecordStream(h, used_on.handle);
    Free(h, owner);
  }
  void Release() { peer_.Release(); }
  void ResetPeak() { peer_.ResetPeak(); }
  std::uint64_t PeakReserved() { return peer_.PeakReserved(); }

 private:
  strata::tools::PeerLibrary& peer_;
};

class CUDAAsyncOps {
 public:
  using Handle = void*;
  CUDAAsyncOps() : peer_(*env->cuda_async) {}

  Handle Alloc(std::size_t bytes, Stream s) {
    return bytes == 0 ? nullptr : peer_.Alloc(bytes, s.handle);
  }
  void Free(Handle& h, Stream owner) {
    if (h != nullptr) peer_.Free(h, owner.handle);
    h = nullptr;
  }
  void FreeUsedOn(Handle& h, Stream owner, Stream used_on) {
    if (h != nullptr && used_on != owner) {
      peer_.FreeUsedOn(h, owner.handle, used_on.handle);
      h = nullptr;
      return;
    }
    Free(h, owner);
  }
  void Release() { peer_.Release(); }
  void ResetPeak() { peer_.ResetPeak(); }
  std::uint64_t PeakReserved() { return peer_.PeakReserved(); }

 private:
  strata::tools::CUDAMallocAsyncPeer& peer_;
};

std::vector<StrataConfig> StrataConfigs(bool with_system) {
  std::vector<StrataConfig> configs;
  AllocatorFlags f = env->base;
  f.allocator_strategy = AllocatorStrategy::kAutoGrowth;
  f.use_virtual_memory_auto_growth = false;
  configs.push_back({"strata_auto_growth", f});
  f = env->base;
  f.allocator_strategy = AllocatorStrategy::kNaiveBestFit;
  configs.push_back({"strata_naive_best_fit", f});
  f = env->base;
  f.allocator_strategy = AllocatorStrategy::kThreadLocal;
  if (f.initial_gpu_memory_in_mb == 0) f.initial_gpu_memory_in_mb = 1024;
  if (f.reallocate_gpu_memory_in_mb == 0) f.reallocate_gpu_memory_in_mb = 1024;
  configs.push_back({"strata_thread_local", f});
  f = env->base;
  f.allocator_strategy = AllocatorStrategy::kAutoGrowth;
  f.use_virtual_memory_auto_growth = true;
  configs.push_back({"strata_vmm", f});
  if (with_system) {
    f = env->base;
    f.use_system_allocator = true;
    configs.push_back({"strata_system", f});
  }
  return configs;
}

// "torch_expandable" where a PYTORCH_CUDA_ALLOC_CONF value turns expandable segments on (PyTorch
// reads the last setting of a key; its values are case-insensitive), else "torch".
std::string TorchSubject(const char* conf) {
  std::string subject = "torch";
  if (conf == nullptr) return subject;
  for (absl::string_view entry : absl::StrSplit(conf, ',')) {
    const std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(entry, absl::MaxSplits(':', 1));
    if (absl::StripAsciiWhitespace(kv.first) != "expandable_segments") continue;
    subject = absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(kv.second), "true")
                  ? "torch_expandable"
                  : "torch";
  }
  return subject;
}

bool HavePeers() { return env->torch != nullptr || env->cuda_async != nullptr; }

// ---- 1. cached pair ---------------------------------------------------------------------------

void CachedPairFacade(benchmark::State& state, const AllocatorFlags& flags, std::size_t bytes,
                      bool recording = false) {
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

// ---- 2. mixed sizes, window of 256
// ----------------------------------------------------------------

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

// Device calls (physical creates or mallocs, releases or frees, maps, unmaps) per operation
// between two readings of a strata facade's statistics: a steady state makes none.
void SetDeviceCallCounters(benchmark::State& state, const strata::allocation::MemoryStats& before,
                           const strata::allocation::MemoryStats& after, double operations) {
  const std::int64_t calls = (after.num_device_alloc - before.num_device_alloc) +
                             (after.num_device_free - before.num_device_free) +
                             (after.num_device_map - before.num_device_map) +
                             (after.num_device_unmap - before.num_device_unmap);
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
  // Untimed warm-up (kWarmUpSteps): the pool grows to its steady state.
  for (std::size_t i = 0; i < kWarmUpSteps; ++i) step();
  strata::allocation::MemoryStats before;
  if constexpr (std::is_same_v<Ops, FacadeOps>) {
    ops.facade().ResetPeakStats(kPlace);
    before = ops.facade().GetMemoryStats(kPlace);
  }
  for (auto _ : state) step();
  if constexpr (std::is_same_v<Ops, FacadeOps>) {
    // A free and an allocation per step.
    const strata::allocation::MemoryStats after = ops.facade().GetMemoryStats(kPlace);
    SetDeviceCallCounters(state, before, after, 2.0 * static_cast<double>(state.iterations()));
    // What the steady state holds: peak reserved over peak allocated, in the timed steps.
    const auto allocated = after.allocated_bytes[strata::allocation::kAggregate].peak;
    state.counters["reserved_over_allocated"] =
        allocated > 0
            ? static_cast<double>(after.reserved_bytes[strata::allocation::kAggregate].peak) /
                  static_cast<double>(allocated)
            : 0.0;
  }
  for (auto& h : window) ops.Free(h, Stream{});
  state.SetItemsProcessed(state.iterations());
}

void MixedFacade(benchmark::State& state, const AllocatorFlags& flags, const MixedPlan* plan) {
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

// ---- 3. trace replay --------------------------------------------------------------------------

// Replays `trace` once through `ops` and returns the nanoseconds of the event loop only.
// Allocations live at the end are freed afterwards, untimed (as Replayer::TimeOnce does).
template <typename Ops>
double ReplayTimed(Ops& ops, const Trace& trace, const StreamSet& streams) {
  std::vector<typename Ops::Handle> live(trace.num_allocations());
  std::vector<std::uint16_t> owner(trace.num_allocations(), 0);
  const auto start = std::chrono::steady_clock::now();
  for (const TraceEvent& e : trace.events()) {
    if (e.is_alloc()) {
      live[e.index] = ops.Alloc(e.bytes, streams[e.stream]);
      owner[e.index] = e.stream;
    } else {
      ops.FreeUsedOn(live[e.index], streams[owner[e.index]], streams[e.stream]);
    }
  }
  const auto end = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < live.size(); ++i) {
    if (live[i]) ops.Free(live[i], streams[owner[i]]);
  }
  return Nanos(start, end);
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
    Ops ops;
    StreamSet streams(t->trace.stream_table_size());
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
    Ops ops(std::forward<Args>(args)...);
    StreamSet streams(t->trace.stream_table_size());
    ReplayTimed(ops, t->trace, streams);  // warm-up: the cache reaches its steady state
    strata::allocation::MemoryStats before;
    if constexpr (std::is_same_v<Ops, FacadeOps>) before = ops.facade().GetMemoryStats(kPlace);
    double total = 0;
    for (auto _ : state) {
      const double ns = ReplayTimed(ops, t->trace, streams);
      state.SetIterationTime(ns * 1e-9);
      total += ns;
    }
    SetReplayCounters(state, t->trace, total, 0);
    if constexpr (std::is_same_v<Ops, FacadeOps>) {
      // Device calls a warm replay still makes (a steady state makes none), per replay.
      const strata::allocation::MemoryStats after = ops.facade().GetMemoryStats(kPlace);
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

// ---- 4. threads -------------------------------------------------------------------------------

// Built by thread 0 before the loop and destroyed by it after: Google Benchmark synchronizes all
// threads when the loop starts and when it ends.
std::unique_ptr<strata::facade::AllocatorFacade> thread_facade;
std::string thread_setup_error;

void ThreadsFacade(benchmark::State& state, const AllocatorFlags& flags) {
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

// ---- 5. record stream -------------------------------------------------------------------------

void RecordStreamFacade(benchmark::State& state, const AllocatorFlags& flags, std::size_t bytes) {
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

// ---- registration -----------------------------------------------------------------------------

void RegisterAll() {
  const auto configs = StrataConfigs(/*with_system=*/true);
  const auto pooled = StrataConfigs(/*with_system=*/false);
  const bool torch = env->torch != nullptr;
  const bool cuda_async = env->cuda_async != nullptr;

  // 1. Cached pairs.
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
    if (torch) {
      benchmark::RegisterBenchmark(
          absl::StrCat("BM_CachedPair/", env->torch_name, "/", size).c_str(),
          [bytes](benchmark::State& s) { CachedPairPeer<TorchOps>(s, bytes); });
    }
    if (cuda_async) {
      benchmark::RegisterBenchmark(
          absl::StrCat("BM_CachedPair/cuda_malloc_async/", size).c_str(),
          [bytes](benchmark::State& s) { CachedPairPeer<CUDAAsyncOps>(s, bytes); });
    }
  }

  // 2. Mixed sizes.
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
    if (torch) {
      benchmark::RegisterBenchmark(
          absl::StrCat("BM_Mixed/", env->torch_name, "/", plan_name).c_str(),
          [plan = plan](benchmark::State& s) { MixedPeer<TorchOps>(s, plan); });
    }
    if (cuda_async) {
      benchmark::RegisterBenchmark(
          absl::StrCat("BM_Mixed/cuda_malloc_async/", plan_name).c_str(),
          [plan = plan](benchmark::State& s) { MixedPeer<CUDAAsyncOps>(s, plan); });
    }
  }

  // 3. Trace replay: cold (fresh allocator) and warm.
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
    if (torch) {
      replay(benchmark::RegisterBenchmark(
                 absl::StrCat("BM_Replay/", env->torch_name, "/", t.name).c_str(),
                 [tp](benchmark::State& s) { ReplayPeerCold<TorchOps>(s, tp); }),
             iterations);
    }
    if (cuda_async) {
      replay(benchmark::RegisterBenchmark(
                 absl::StrCat("BM_Replay/cuda_malloc_async/", t.name).c_str(),
                 [tp](benchmark::State& s) { ReplayPeerCold<CUDAAsyncOps>(s, tp); }),
             iterations);
    }
  }
  for (const NamedTrace& t : env->traces) {
    const NamedTrace* tp = &t;
    for (const StrataConfig& c : pooled) {
      replay(benchmark::RegisterBenchmark(
                 absl::StrCat("BM_ReplayWarm/", c.name, "/", t.name).c_str(),
                 [c, tp](benchmark::State& s) { ReplayWarm<FacadeOps>(s, tp, c.flags); }),
             2 * iterations);
    }
    if (torch) {
      replay(benchmark::RegisterBenchmark(
                 absl::StrCat("BM_ReplayWarm/", env->torch_name, "/", t.name).c_str(),
                 [tp](benchmark::State& s) { ReplayWarm<TorchOps>(s, tp); }),
             2 * iterations);
    }
    if (cuda_async) {
      replay(benchmark::RegisterBenchmark(
                 absl::StrCat("BM_ReplayWarm/cuda_malloc_async/", t.name).c_str(),
                 [tp](benchmark::State& s) { ReplayWarm<CUDAAsyncOps>(s, tp); }),
             2 * iterations);
    }
  }

  // 4. Threads.
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
  if (torch) {
    threads(benchmark::RegisterBenchmark(
        absl::StrCat("BM_Threads/", env->torch_name, "/", tsize).c_str(),
        [](benchmark::State& s) { ThreadsPeer<TorchOps>(s, /*own_stream=*/false); }));
  }
  if (cuda_async) {
    threads(benchmark::RegisterBenchmark(
        absl::StrCat("BM_Threads/cuda_malloc_async/", tsize).c_str(),
        [](benchmark::State& s) { ThreadsPeer<CUDAAsyncOps>(s, /*own_stream=*/true); }));
  }

  // 5. RecordStream + free + reclaim, on the stream-safe chains: over the default pool
  // (strata_auto_growth) and over the virtual-memory pool (strata_vmm).
  for (std::size_t bytes : kRecordStreamSizes) {
    const std::string size = SizeName(bytes);
    for (const StrataConfig& c : pooled) {
      if (c.name != "strata_auto_growth" && c.name != "strata_vmm") continue;
      benchmark::RegisterBenchmark(
          absl::StrCat("BM_RecordStream/", c.name, "/", size).c_str(),
          [c, bytes](benchmark::State& s) { RecordStreamFacade(s, c.flags, bytes); });
    }
    if (torch && env->torch->has_record_stream()) {
      benchmark::RegisterBenchmark(
          absl::StrCat("BM_RecordStream/", env->torch_name, "/", size).c_str(),
          [bytes](benchmark::State& s) { RecordStreamPeer<TorchOps>(s, bytes); });
    }
    if (cuda_async) {
      benchmark::RegisterBenchmark(
          absl::StrCat("BM_RecordStream/cuda_malloc_async/", size).c_str(),
          [bytes](benchmark::State& s) { RecordStreamPeer<CUDAAsyncOps>(s, bytes); });
    }
  }

  // 6. The device's memory calls (tools/bench_device_calls.h).
  strata::tools::RegisterDeviceCallBenchmarks(env->runtime, 0, env->device == "cuda");

  // 7. The memory history's recorder alone (tools/bench_history.h).
  strata::tools::RegisterHistoryBenchmarks();
}

// ---- setup ------------------------------------------------------------------------------------

constexpr char kUsage[] =
    "strata-bench [--device=emulated|cuda] [--trace_dir=DIR] [--torch_peer=PATH.so]\n"
    "             [--min_time=SECONDS (default 0.2; --benchmark_min_time overrides)]\n"
    "             [--replay_iterations=N (default 5; warm replays run 2N)]\n"
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

std::vector<fs::path> TraceFiles(const Options& o) {
  std::vector<fs::path> roots = {fs::current_path()};
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) roots.push_back(exe.parent_path().parent_path().parent_path());  // build/bin/x -> repo
  fs::path dir;
  if (!o.trace_dir.empty()) {
    dir = o.trace_dir;
    if (!fs::is_directory(dir))
      Usage(absl::StrCat("--trace_dir ", o.trace_dir, " is no directory"));
  } else {
    for (const fs::path& root : roots) {
      for (const char* rel : {"../shared/traces", "shared/traces"}) {
        if (dir.empty() && fs::is_directory(root / rel)) dir = root / rel;
      }
    }
  }
  std::vector<fs::path> files;
  if (!dir.empty()) {
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (entry.is_regular_file() && (name.ends_with(".trace") || name.ends_with(".trace.gz"))) {
        files.push_back(entry.path());
      }
    }
    std::sort(files.begin(), files.end());
  }
  for (const fs::path& root : roots) {
    const fs::path bundled = root / "tools/traces/resnet50_train.trace.gz";
    if (fs::is_regular_file(bundled)) {
      files.push_back(bundled);
      break;
    }
  }
  return files;
}

std::string TraceName(const fs::path& p) {
  std::string name = p.filename().string();
  for (const char* suffix : {".gz", ".trace"}) {
    if (name.ends_with(suffix)) name.resize(name.size() - std::string_view(suffix).size());
  }
  return name;
}

void Setup(Options options) {
  env = new Env;
  env->options = std::move(options);
  Options& o = env->options;
  if (o.device.empty()) o.device = strata::platform::CUDARuntime::Available() ? "cuda" : "emulated";
  if (o.device == "emulated") {
    env->emulated = std::make_unique<strata::platform::EmulatedRuntime>(
        strata::platform::EmulatedRuntime::Options{.device_count = 1,
                                                   .capacity_bytes = o.emulated_capacity_mb << 20});
    env->runtime = env->emulated.get();
  } else if (o.device == "cuda") {
    std::string why;
    if (!strata::platform::CUDARuntime::Available(&why)) Usage("--device=cuda: " + why);
    env->runtime = &strata::platform::CUDARuntime::Instance();
  } else {
    Usage(absl::StrCat("--device must be emulated or cuda, got '", o.device, "'"));
  }
  env->device = o.device;
  env->base = strata::flags::Current();  // environment and command line, by ParseOptions

  for (const fs::path& file : TraceFiles(o)) {
    const std::string name = TraceName(file);
    const bool seen = std::any_of(env->traces.begin(), env->traces.end(),
                                  [&](const NamedTrace& t) { return t.name == name; });
    if (seen) continue;  // the bundled copy of a trace the directory has too
    try {
      env->traces.push_back({name, Trace::Load(file.string())});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata-bench: skipping trace %s: %s\n", file.c_str(), e.what());
    }
  }

  if (o.device == "cuda") {
    std::string why;
    if (strata::tools::CUDAMallocAsyncPeer::Available(&why)) {
      env->cuda_async = std::make_unique<strata::tools::CUDAMallocAsyncPeer>(0);
    } else {
      std::fprintf(stderr, "strata-bench: no cuda_malloc_async peer: %s\n", why.c_str());
    }
    if (!o.torch_peer.empty()) {
      try {
        env->torch = strata::tools::PeerLibrary::Load(o.torch_peer);
        env->torch_name = TorchSubject(std::getenv("PYTORCH_CUDA_ALLOC_CONF"));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "strata-bench: no torch peer: %s\n", e.what());
      }
    }
  } else if (!o.torch_peer.empty()) {
    std::fprintf(stderr, "strata-bench: --torch_peer needs --device=cuda; ignored\n");
  }

  benchmark::AddCustomContext("strata_device", env->device);
#ifdef STRATA_WITH_CUDA
  if (o.device == "cuda") {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
      benchmark::AddCustomContext("gpu", prop.name);
    }
  }
#endif
  std::vector<std::string> names;
  for (const NamedTrace& t : env->traces) names.push_back(t.name);
  benchmark::AddCustomContext("traces", absl::StrJoin(names, ","));
  benchmark::AddCustomContext("peers", absl::StrCat(env->torch ? env->torch_name + " " : "",
                                                    env->cuda_async ? "cuda_malloc_async" : ""));
  benchmark::AddCustomContext("strata_flags", env->base.DebugString());
  if (!HavePeers() && o.device == "cuda") {
    std::fprintf(stderr, "strata-bench: running without peers\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<char*> args;
    Options options = ParseOptions(argc, argv, &args);
    int n = static_cast<int>(args.size());
    args.push_back(nullptr);
    benchmark::Initialize(&n, args.data());
    if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 2;
    Setup(std::move(options));
    RegisterAll();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    if (const int n = skipped_with_error.load(); n != 0) {
      std::fprintf(stderr, "strata-bench: %d benchmark(s) skipped with an error (see above)\n", n);
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
