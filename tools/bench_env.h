// What strata-bench's benchmarks share, built once by Setup before any of them is registered:
// the device runtime, the base allocator flags, the loaded traces and the peers; and the strata
// configurations (subjects) every family runs.
//
// Thread safety: Setup runs once, from main; afterwards the benchmarks only read `env`.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "flags/allocator_flags.h"
#include "platform/device_runtime.h"
#include "platform/emulated_runtime.h"
#include "tools/bench_options.h"
#include "tools/cuda_malloc_async_peer.h"
#include "tools/peer_library.h"
#include "tools/trace.h"

namespace strata::tools::bench {

struct StrataConfig {
  std::string name;
  strata::flags::AllocatorFlags flags;
};

struct NamedTrace {
  std::string name;
  Trace trace;
};

struct Env {
  Options options;
  std::unique_ptr<platform::EmulatedRuntime> emulated;
  platform::DeviceRuntime* runtime = nullptr;
  std::string device;
  flags::AllocatorFlags base;
  std::vector<NamedTrace> traces;
  std::unique_ptr<PeerLibrary> torch;
  // The torch peer's subject: "torch", or "torch_expandable" where PYTORCH_CUDA_ALLOC_CONF (read
  // by PyTorch when the peer loads) turns expandable segments on.
  std::string torch_name = "torch";
  std::unique_ptr<CUDAMallocAsyncPeer> cuda_async;
};
// Set by Setup; never freed (the benchmarks use it until the program ends).
extern Env* env;

// Builds `env`: the device (Usage for a bad --device or --trace_dir), the traces, the peers on
// cuda, and Google Benchmark's custom context.
void Setup(Options options);

// The strata subjects: strata_auto_growth, strata_naive_best_fit, strata_thread_local,
// strata_vmm and, with `with_system`, strata_system (see tools/bench_main.cc).
std::vector<StrataConfig> StrataConfigs(bool with_system);

}  // namespace strata::tools::bench
