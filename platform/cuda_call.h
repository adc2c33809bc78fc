// How the CUDA backend makes a CUDA runtime API call, shared by its .cc files (cuda_runtime.cc,
// cuda_vmm.cc, cuda_driver.cc): a failed call becomes a RuntimeError naming the call and the
// CUDA error (Check, CheckQuery), and an allocation call runs in relaxed stream-capture mode
// (RelaxedCaptureScope). A header of its own because the runtime-API half of CUDARuntime, its
// virtual memory half and the driver loader all call the runtime this way. Internal to the CUDA
// backend; empty when strata is built without CUDA.
#pragma once

#if STRATA_WITH_CUDA
// The C API header: <cuda_runtime.h> would be found next to this file by a quoted include.
#include <cuda_runtime_api.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "platform/device_runtime.h"

namespace strata::platform::internal {

[[noreturn]] inline void Fail(cudaError_t err, const std::string& call) {
  // Clears a non-sticky error so the next unrelated call does not report it again.
  cudaGetLastError();
  std::string what = absl::StrCat("strata cuda runtime: ", call, " failed: ", cudaGetErrorName(err),
                                  ": ", cudaGetErrorString(err));
  switch (err) {
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorStreamCaptureWrongThread:
      throw CaptureRefusedError(what);
    default:
      throw RuntimeError(what);
  }
}

// `describe` builds the call's description only on failure: the success path formats nothing.
template <typename Describe>
inline void Check(cudaError_t err, Describe&& describe) {
  if (err != cudaSuccess) [[unlikely]] {
    Fail(err, describe());
  }
}

// Query result: true on success, false on cudaErrorNotReady (cleared), throws otherwise.
template <typename Describe>
bool CheckQuery(cudaError_t err, Describe&& describe) {
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  Fail(err, describe());
}

// Relaxed stream-capture mode for the calling thread for a scope: allocation calls (cudaMalloc,
// cuMemCreate, cuMemMap, cuMemSetAccess) are then allowed while another stream captures a graph
// in global mode, as PyTorch allows them. They are not captured; the memory outlives replays.
class RelaxedCaptureScope {
 public:
  RelaxedCaptureScope() {
    if (cudaThreadExchangeStreamCaptureMode(&mode_) != cudaSuccess) {
      cudaGetLastError();
      active_ = false;
    }
  }
  ~RelaxedCaptureScope() {
    if (active_ && cudaThreadExchangeStreamCaptureMode(&mode_) != cudaSuccess) cudaGetLastError();
  }
  RelaxedCaptureScope(const RelaxedCaptureScope&) = delete;
  RelaxedCaptureScope& operator=(const RelaxedCaptureScope&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
  bool active_ = true;
};

}  // namespace strata::platform::internal

#endif  // STRATA_WITH_CUDA
