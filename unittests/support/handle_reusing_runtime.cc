#include "support/handle_reusing_runtime.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_format.h"

namespace strata::testing {

using platform::Event;
using platform::RuntimeError;
using platform::Stream;

namespace {
// Handles are small odd-free numbers, never a pointer the inner runtime hands out.
constexpr std::uintptr_t kHandleStep = 0x100;
Stream HandleOf(std::size_t slot) {
  return Stream{reinterpret_cast<void*>((slot + 1) * kHandleStep)};
}
}  // namespace

Stream HandleReusingRuntime::CreateStream(int device) {
  const Stream inner = base()->CreateStream(device);
  absl::MutexLock lock(&mu_);
  std::size_t k = 0;
  while (k < slots_.size() && slots_[k].live) ++k;
  if (k == slots_.size()) slots_.emplace_back();
  slots_[k] = Slot{inner, true};
  return HandleOf(k);
}

void HandleReusingRuntime::DestroyStream(Stream stream) {
  const Stream inner = Inner(stream);
  {
    absl::MutexLock lock(&mu_);
    slots_[reinterpret_cast<std::uintptr_t>(stream.handle) / kHandleStep - 1].live = false;
  }
  base()->DestroyStream(inner);
}

Stream HandleReusingRuntime::Inner(Stream stream) {
  if (stream.is_default()) return stream;
  const auto h = reinterpret_cast<std::uintptr_t>(stream.handle);
  absl::MutexLock lock(&mu_);
  const std::size_t k = h / kHandleStep - 1;
  if (h % kHandleStep != 0 || k >= slots_.size()) {
    throw RuntimeError(absl::StrFormat("handle_reusing runtime: unknown stream %p", stream.handle));
  }
  if (!slots_[k].live) {
    dead_calls_.fetch_add(1);
    throw RuntimeError(
        absl::StrFormat("handle_reusing runtime: stream %p was destroyed (a "
                        "call CUDA would not catch)",
                        stream.handle));
  }
  return slots_[k].inner;
}

void HandleReusingRuntime::SynchronizeStream(Stream stream) {
  base()->SynchronizeStream(Inner(stream));
}
bool HandleReusingRuntime::QueryStream(Stream stream) { return base()->QueryStream(Inner(stream)); }
void HandleReusingRuntime::RecordEvent(Event event, Stream stream) {
  base()->RecordEvent(event, Inner(stream));
}
void HandleReusingRuntime::StreamWaitEvent(Stream stream, Event event) {
  base()->StreamWaitEvent(Inner(stream), event);
}
void HandleReusingRuntime::BeginCapture(Stream stream) { base()->BeginCapture(Inner(stream)); }
void HandleReusingRuntime::EndCapture(Stream stream) { base()->EndCapture(Inner(stream)); }
bool HandleReusingRuntime::IsCapturing(Stream stream) { return base()->IsCapturing(Inner(stream)); }
int HandleReusingRuntime::StreamDevice(Stream stream) {
  return base()->StreamDevice(Inner(stream));
}
void HandleReusingRuntime::LaunchHostTask(Stream stream, std::function<void()> task) {
  base()->LaunchHostTask(Inner(stream), std::move(task));
}
void HandleReusingRuntime::MemsetAsync(void* dst, int value, std::size_t bytes, Stream stream) {
  base()->MemsetAsync(dst, value, bytes, Inner(stream));
}
void HandleReusingRuntime::MemcpyAsync(void* dst, const void* src, std::size_t bytes,
                                       Stream stream) {
  base()->MemcpyAsync(dst, src, bytes, Inner(stream));
}

}  // namespace strata::testing
