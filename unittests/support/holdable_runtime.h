// HoldableRuntime: a DeviceRuntime that forwards to another one (usually EmulatedRuntime) but
// can make QueryEvent answer "not ready" — for all queries while held, or for the next n — so
// tests can keep pending frees pending deterministically. It also counts event creations,
// destructions and queries. Everything else forwards unchanged (ForwardingRuntime; synchronization
// is counted by the inner runtime). Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>

#include "platform/device_runtime.h"
#include "platform/forwarding_runtime.h"

namespace strata::testing {

class HoldableRuntime : public platform::ForwardingRuntime {
 public:
  explicit HoldableRuntime(platform::DeviceRuntime* inner)
      : ForwardingRuntime(inner, "HoldableRuntime") {}

  // While held, every QueryEvent returns false.
  void HoldEvents(bool hold) { hold_.store(hold); }
  // The next `n` QueryEvent calls return false.
  void HoldNextQueries(int n) { hold_next_.store(n); }

  std::uint64_t events_created() const { return created_.load(); }
  std::uint64_t events_destroyed() const { return destroyed_.load(); }
  std::uint64_t event_queries() const { return queries_.load(); }

  const char* Name() const override { return "holdable"; }
  platform::Event CreateEvent(int device) override;
  void DestroyEvent(platform::Event event) override;
  bool QueryEvent(platform::Event event) override;

 private:
  std::atomic<bool> hold_{false};
  std::atomic<int> hold_next_{0};
  std::atomic<std::uint64_t> created_{0}, destroyed_{0}, queries_{0};
};

}  // namespace strata::testing
