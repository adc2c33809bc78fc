#include "tools/bench_device_calls.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "platform/stream.h"
#include "tools/busy_kernel.h"

namespace strata::tools {
namespace {

using platform::DeviceRuntime;
using platform::PhysicalMemory;

constexpr std::size_t kPages[] = {1, 16, 512};

// Runs `body` with the VMM granularity, or skips the benchmark with the reason.
template <typename F>
void WithGranularity(benchmark::State& state, DeviceRuntime* runtime, int device, F&& body) {
  try {
    const std::size_t g = runtime->VmmGranularity(device);
    if (g == 0) {
      state.SkipWithError("the device has no virtual memory management");
      return;
    }
    body(g);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void SetPerPage(benchmark::State& state, std::size_t pages) {
  state.counters["ns_per_page"] =
      benchmark::Counter(static_cast<double>(state.iterations() * pages),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// A reserved range mapped and unmapped again and again: with `create`, to physical memory created
// for each map and released after it, else to one allocation kept throughout.
class MapCycle {
 public:
  MapCycle(DeviceRuntime* runtime, int device, std::size_t bytes, bool create)
      : runtime_(runtime),
        device_(device),
        bytes_(bytes),
        create_(create),
        range_(runtime->ReserveAddress(device, bytes)),
        kept_(create ? PhysicalMemory{} : runtime->CreatePhysical(device, bytes)) {}
  ~MapCycle() {
    if (kept_.valid()) runtime_->ReleasePhysical(kept_);
    runtime_->FreeAddress(range_, bytes_);
  }
  MapCycle(const MapCycle&) = delete;
  MapCycle& operator=(const MapCycle&) = delete;

  // One map and unmap; false when the device is out of memory.
  bool Run() {
    const PhysicalMemory mem = create_ ? runtime_->CreatePhysical(device_, bytes_) : kept_;
    if (!mem.valid()) return false;
    runtime_->Map(range_, bytes_, mem, 0, device_);
    runtime_->Unmap(range_, bytes_);
    if (create_) runtime_->ReleasePhysical(mem);
    return true;
  }

 private:
  DeviceRuntime* const runtime_;
  const int device_;
  const std::size_t bytes_;
  const bool create_;
  void* const range_;
  const PhysicalMemory kept_;
};

// vmm_cycle (`create`) and vmm_remap: map and unmap `pages` pages.
void VmmMapUnmap(benchmark::State& state, DeviceRuntime* runtime, int device, std::size_t pages,
                 bool create) {
  WithGranularity(state, runtime, device, [&](std::size_t g) {
    MapCycle cycle(runtime, device, pages * g, create);
    for (auto _ : state) {
      if (!cycle.Run()) {
        state.SkipWithError("out of device memory");
        break;
      }
    }
    SetPerPage(state, pages);
  });
}

// vmm_grow: each thread creates and maps (with access) `pages` pages of one page each into a
// range of its own, one after another, as a pool's growth does; the unmaps and releases that
// undo them are not timed. With several threads: whether the driver serves them in parallel
// (items_per_second: pages mapped per second, all threads together).
void VmmGrow(benchmark::State& state, DeviceRuntime* runtime, int device, std::size_t pages) {
  WithGranularity(state, runtime, device, [&](std::size_t g) {
    char* const range = static_cast<char*>(runtime->ReserveAddress(device, pages * g));
    std::vector<PhysicalMemory> mems(pages);
    for (auto _ : state) {
      std::size_t made = 0;
      for (; made < pages; ++made) {
        mems[made] = runtime->CreatePhysical(device, g);
        if (!mems[made].valid()) break;
        runtime->Map(range + made * g, g, mems[made], 0, device);
      }
      state.PauseTiming();
      for (std::size_t i = 0; i < made; ++i) {
        runtime->Unmap(range + i * g, g);
        runtime->ReleasePhysical(mems[i]);
      }
      if (made < pages) state.SkipWithError("out of device memory");
      state.ResumeTiming();
      if (made < pages) break;
    }
    runtime->FreeAddress(range, pages * g);
    state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(pages));
  });
}

void MallocFree(benchmark::State& state, DeviceRuntime* runtime, int device, std::size_t pages) {
  WithGranularity(state, runtime, device, [&](std::size_t g) {
    for (auto _ : state) {
      void* p = runtime->Malloc(device, pages * g);
      if (p == nullptr) {
        state.SkipWithError("out of device memory");
        break;
      }
      runtime->Free(device, p);
    }
    SetPerPage(state, pages);
  });
}

// The event calls a pool makes on its warm path: `fence` = the capture check and an event record
// on a stream (what a pool's fence costs), `query` = a query of a completed event, `wait` = a
// device-side wait of one stream on another's event.
void EventCall(benchmark::State& state, DeviceRuntime* runtime, int device, const char* what) {
  try {
    const platform::Stream a = runtime->CreateStream(device), b = runtime->CreateStream(device);
    const platform::Event e = runtime->CreateEvent(device);
    runtime->RecordEvent(e, a);
    runtime->SynchronizeEvent(e);
    const std::string kind = what;
    for (auto _ : state) {
      if (kind == "fence") {
        benchmark::DoNotOptimize(runtime->IsCapturing(a));
        runtime->RecordEvent(e, a);
      } else if (kind == "query") {
        benchmark::DoNotOptimize(runtime->QueryEvent(e));
      } else {
        runtime->StreamWaitEvent(b, e);
      }
    }
    runtime->SynchronizeStream(a);
    runtime->SynchronizeStream(b);
    runtime->DestroyEvent(e);
    runtime->DestroyStream(a);
    runtime->DestroyStream(b);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

#if STRATA_WITH_CUDA
// The same calls while a kernel runs on another stream: each iteration starts a kernel of
// kBusyNs, times the calls alone (manual time), then waits for the kernel outside the timing.
// Counter busy: the fraction of iterations whose kernel was still running after the calls (the
// calls did not wait for it).
constexpr long long kBusyNs = 5'000'000;

void VmmBusy(benchmark::State& state, DeviceRuntime* runtime, int device, std::size_t pages,
             bool create) {
  WithGranularity(state, runtime, device, [&](std::size_t g) {
    MapCycle cycle(runtime, device, pages * g, create);
    const platform::Stream side = runtime->CreateStream(device);
    std::int64_t busy = 0;
    for (auto _ : state) {
      LaunchBusyKernel(kBusyNs, side.handle);
      const auto start = std::chrono::steady_clock::now();
      if (!cycle.Run()) {
        state.SkipWithError("out of device memory");
        break;
      }
      const auto end = std::chrono::steady_clock::now();
      state.SetIterationTime(std::chrono::duration<double>(end - start).count());
      busy += runtime->QueryStream(side) ? 0 : 1;
      runtime->SynchronizeStream(side);
    }
    runtime->DestroyStream(side);
    state.counters["busy"] = static_cast<double>(busy) /
                             static_cast<double>(std::max<std::int64_t>(1, state.iterations()));
  });
}
#endif  // STRATA_WITH_CUDA

}  // namespace

void RegisterDeviceCallBenchmarks(DeviceRuntime* runtime, int device, bool cuda) {
  for (std::size_t pages : kPages) {
    for (const bool create : {true, false}) {
      benchmark::RegisterBenchmark(
          absl::StrCat("BM_DeviceCalls/", create ? "vmm_cycle/" : "vmm_remap/", pages).c_str(),
          [=](benchmark::State& s) { VmmMapUnmap(s, runtime, device, pages, create); })
          ->Unit(benchmark::kMicrosecond);
    }
    benchmark::RegisterBenchmark(absl::StrCat("BM_DeviceCalls/vmm_grow/", pages).c_str(),
                                 [=](benchmark::State& s) { VmmGrow(s, runtime, device, pages); })
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime()
        ->ThreadRange(1, 16);
    benchmark::RegisterBenchmark(
        absl::StrCat("BM_DeviceCalls/malloc/", pages).c_str(),
        [=](benchmark::State& s) { MallocFree(s, runtime, device, pages); })
        ->Unit(benchmark::kMicrosecond);
  }
  for (const char* what : {"fence", "query", "wait"}) {
    benchmark::RegisterBenchmark(absl::StrCat("BM_DeviceCalls/event_", what).c_str(),
                                 [=](benchmark::State& s) { EventCall(s, runtime, device, what); });
  }
#if STRATA_WITH_CUDA
  if (cuda) {
    for (const bool create : {true, false}) {
      benchmark::RegisterBenchmark(
          absl::StrCat("BM_DeviceCalls/", create ? "vmm_cycle" : "vmm_remap", "_busy/1").c_str(),
          [=](benchmark::State& s) { VmmBusy(s, runtime, device, 1, create); })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
#else
  (void)cuda;
#endif
}

}  // namespace strata::tools
