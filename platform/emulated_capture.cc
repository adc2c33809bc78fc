// EmulatedRuntime, stream capture: CUDA's global mode as the contract in emulated_runtime.h
// describes it (which streams capture, and the refusals the rest of the runtime applies).
#include "platform/emulated_runtime.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace strata::platform {

bool EmulatedRuntime::Capturing(const StreamState* stream) {
  if (captures_.load(std::memory_order_acquire) == 0) [[likely]]
    return false;
  absl::MutexLock lock(&capture_mu_);
  return capturing_.contains(stream);
}

void EmulatedRuntime::RefuseDuringCapture(const char* call) const {
  if (captures_.load(std::memory_order_acquire) == 0) [[likely]]
    return;
  throw CaptureRefusedError(absl::StrCat("strata emulated runtime: ", call,
                                         " while a stream capture is underway "
                                         "(cudaErrorStreamCaptureUnsupported)"));
}

void EmulatedRuntime::BeginCapture(Stream stream) {
  if (stream.is_default()) {
    throw RuntimeError(
        "strata emulated runtime: the default stream cannot be captured "
        "(cudaErrorStreamCaptureUnsupported)");
  }
  auto s = Resolve(stream);
  absl::MutexLock lock(&capture_mu_);
  if (!capturing_.insert(s.get()).second) {
    throw RuntimeError("strata emulated runtime: BeginCapture of a stream already capturing");
  }
  captures_.fetch_add(1, std::memory_order_acq_rel);
}

void EmulatedRuntime::EndCapture(Stream stream) {
  auto s = Resolve(stream);
  absl::MutexLock lock(&capture_mu_);
  if (capturing_.erase(s.get()) == 0) {
    throw RuntimeError("strata emulated runtime: EndCapture of a stream that is not capturing");
  }
  captures_.fetch_sub(1, std::memory_order_acq_rel);
}

bool EmulatedRuntime::IsCapturing(Stream stream) { return Capturing(Resolve(stream).get()); }

}  // namespace strata::platform
