#include "support/runtimes.h"

#include "platform/emulated_runtime.h"

#if __has_include("platform/cuda_runtime.h")
#include "platform/cuda_runtime.h"
#define STRATA_HAVE_CUDA_RUNTIME_CLASS 1
#endif

namespace strata::testing {

platform::DeviceRuntime* GetRuntime(RuntimeKind kind, std::string* why) {
  if (kind == RuntimeKind::kEmulated) {
    static platform::EmulatedRuntime* runtime =
        new platform::EmulatedRuntime({.device_count = 2, .capacity_bytes = std::size_t{8} << 30});
    return runtime;
  }
#ifdef STRATA_HAVE_CUDA_RUNTIME_CLASS
  if (platform::CUDARuntime::Available(why)) return &platform::CUDARuntime::Instance();
  return nullptr;
#else
  if (why) *why = "no CUDA runtime backend in this build";
  return nullptr;
#endif
}

}  // namespace strata::testing
