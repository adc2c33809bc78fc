#include "support/holdable_runtime.h"

namespace strata::testing {

platform::Event HoldableRuntime::CreateEvent(int device) {
  platform::Event e = base()->CreateEvent(device);
  ++created_;
  return e;
}

void HoldableRuntime::DestroyEvent(platform::Event event) {
  base()->DestroyEvent(event);
  ++destroyed_;
}

bool HoldableRuntime::QueryEvent(platform::Event event) {
  ++queries_;
  const bool inner_ready = base()->QueryEvent(event);  // still validates the handle
  if (hold_.load()) return false;
  int n = hold_next_.load();
  while (n > 0 && !hold_next_.compare_exchange_weak(n, n - 1)) {
  }
  if (n > 0) return false;
  return inner_ready;
}

}  // namespace strata::testing
