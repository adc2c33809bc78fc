// strata-bench's environment (tools/bench_env.h): the device, the traces it finds, the peers,
// and the strata subjects.
#include "tools/bench_env.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string_view>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "flags/flag_sources.h"
#include "platform/cuda_runtime.h"

#ifdef STRATA_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace strata::tools::bench {

Env* env = nullptr;

namespace {

namespace fs = std::filesystem;

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

}  // namespace

std::vector<StrataConfig> StrataConfigs(bool with_system) {
  std::vector<StrataConfig> configs;
  flags::AllocatorFlags f = env->base;
  f.allocator_strategy = flags::AllocatorStrategy::kAutoGrowth;
  f.use_virtual_memory_auto_growth = false;
  configs.push_back({"strata_auto_growth", f});
  f = env->base;
  f.allocator_strategy = flags::AllocatorStrategy::kNaiveBestFit;
  configs.push_back({"strata_naive_best_fit", f});
  f = env->base;
  f.allocator_strategy = flags::AllocatorStrategy::kThreadLocal;
  if (f.initial_gpu_memory_in_mb == 0) f.initial_gpu_memory_in_mb = 1024;
  if (f.reallocate_gpu_memory_in_mb == 0) f.reallocate_gpu_memory_in_mb = 1024;
  configs.push_back({"strata_thread_local", f});
  f = env->base;
  f.allocator_strategy = flags::AllocatorStrategy::kAutoGrowth;
  f.use_virtual_memory_auto_growth = true;
  configs.push_back({"strata_vmm", f});
  if (with_system) {
    f = env->base;
    f.use_system_allocator = true;
    configs.push_back({"strata_system", f});
  }
  return configs;
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

}  // namespace strata::tools::bench
