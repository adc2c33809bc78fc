// Event: an opaque handle to a marker in a stream (a cudaEvent_t on the CUDA runtime).
// An event that was never recorded counts as complete, as in CUDA.
#pragma once

namespace strata::platform {

struct Event {
  void* handle = nullptr;

  constexpr bool valid() const { return handle != nullptr; }
  friend constexpr bool operator==(Event a, Event b) { return a.handle == b.handle; }
};

}  // namespace strata::platform
