// FaultInjectionRuntime: a DeviceRuntime decorator that makes device memory run out and events
// stay pending on demand, so retry, OOM and stream-safety paths can be tested deterministically
// over any runtime (emulated or CUDA). Tests configure it by its methods; users and CI through a
// specification string (Configure: STRATA_C_FAULTS for the C ABI, strata-replay --faults), to
// soak the whole chain.
//
// Contract
// - Thread safety: every method may be called from any thread concurrently; configuration may
//   change while other threads allocate (a Malloc sees either the old or the new policy).
// - Malloc faults: an injected failure returns nullptr without calling the base runtime (as a
//   real out-of-memory would). Policies are independent and combine with OR; each one advances
//   its own state on every Malloc call, so its pattern does not depend on the others:
//     FailNext(k)               the next k calls fail;
//     FailEveryNth(n)           calls n, 2n, 3n, ... counted from this configuration fail
//                               (n = 0 turns it off);
//     FailWithProbability(p, s) each call fails with probability p, drawn from a std::mt19937_64
//                               seeded with s, so a seed always gives the same pattern
//                               (p = 0 turns it off; p outside [0, 1] throws invalid_argument).
//   Only device Malloc is affected by these; HostMalloc always forwards.
// - Virtual memory faults, each with its own state, independent of the Malloc policies:
//     FailNextCreatePhysical(k) / FailCreatePhysicalEveryNth(n)
//                               CreatePhysical returns the empty handle (out of memory)
//                               without calling the base runtime;
//     FailNextMap(k) / FailMapEveryNth(n)
//                               Map throws RuntimeError without calling the base runtime, so
//                               nothing is mapped.
//   "Next" and "every nth" mean the same as for Malloc, counted over the calls of that method.
//   Clear() turns every fault off, held events included; counters are kept (ResetCounters()).
// - Held events: while HoldEvents(true), QueryEvent returns false for every event (the call
//   still reaches the base runtime, so invalid handles still throw). SynchronizeEvent is not
//   affected: it waits for the real event and returns, so a holder that synchronizes is not
//   deadlocked; after it, QueryEvent still says false while held.
// - Everything else forwards unchanged, SyncCount() included (it is the base runtime's count,
//   so it includes syncs made through the base directly or through other decorators).
// - Throws whatever the base runtime throws.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string_view>

#include "absl/synchronization/mutex.h"
#include "platform/device_runtime.h"
#include "platform/forwarding_runtime.h"

namespace strata::platform {

class FaultInjectionRuntime : public ForwardingRuntime {
 public:
  // Non-owning: `base` must outlive this object.
  explicit FaultInjectionRuntime(DeviceRuntime* base);
  // Shares ownership of `base`.
  explicit FaultInjectionRuntime(std::shared_ptr<DeviceRuntime> base);

  // --- fault configuration -------------------------------------------------------------------
  void FailEveryNth(std::uint64_t n);
  void FailWithProbability(double p, std::uint64_t seed);
  void FailNext(std::uint64_t k);
  void FailNextCreatePhysical(std::uint64_t k);
  void FailCreatePhysicalEveryNth(std::uint64_t n);
  void FailNextMap(std::uint64_t k);
  void FailMapEveryNth(std::uint64_t n);
  void Clear();
  // Applies "key:value,..." on top of the current policies: malloc_probability (in [0, 1],
  // drawn with `seed`, default 0), malloc_every, create_physical_every, map_every (every nth
  // call fails; 0: off). An unknown key or a bad value throws std::invalid_argument naming it,
  // and nothing changes.
  void Configure(std::string_view spec);
  void HoldEvents(bool hold) { hold_events_.store(hold, std::memory_order_release); }
  bool events_held() const { return hold_events_.load(std::memory_order_acquire); }

  // --- counters --------------------------------------------------------------------------------
  // Device Malloc calls seen (injected or forwarded) and failures injected.
  std::uint64_t malloc_calls() const { return malloc_calls_.load(std::memory_order_relaxed); }
  std::uint64_t injected_failures() const { return injected_.load(std::memory_order_relaxed); }
  // CreatePhysical / Map calls seen and failures injected into them.
  std::uint64_t create_physical_calls() const {
    return physical_calls_.load(std::memory_order_relaxed);
  }
  std::uint64_t injected_physical_failures() const {
    return physical_injected_.load(std::memory_order_relaxed);
  }
  std::uint64_t map_calls() const { return map_calls_.load(std::memory_order_relaxed); }
  std::uint64_t injected_map_failures() const {
    return map_injected_.load(std::memory_order_relaxed);
  }
  void ResetCounters();

  // --- DeviceRuntime (the rest forwards: ForwardingRuntime) -------------------------------------
  const char* Name() const override { return "fault_injection"; }
  void* Malloc(int device, std::size_t size) override;
  PhysicalMemory CreatePhysical(int device, std::size_t size) override;
  void Map(void* ptr, std::size_t size, PhysicalMemory mem, std::size_t offset,
           int device) override;
  bool QueryEvent(Event event) override;

 private:
  bool ShouldFail();
  // "Fail next k" and "fail every nth" of one call (device Malloc, CreatePhysical, Map).
  struct CallFaults {
    std::uint64_t fail_next = 0;
    std::uint64_t every_nth = 0;
    std::uint64_t nth_counter = 0;
    // Advances the state by one call; true when that call fails.
    bool Next();
  };
  // Advances `faults` by one call under the lock; true when that call fails.
  bool NextFails(CallFaults* faults);
  enum class Policy { kNext, kEveryNth };
  // The Fail* setters: sets `faults`' count of calls to fail (kNext) or its period, counted from
  // now (kEveryNth); `calls` names them in the log.
  void SetFaults(CallFaults* faults, Policy policy, std::uint64_t value, const char* calls);
  // Malloc's fast path is armed while any malloc fault is configured.
  void UpdateArmedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::shared_ptr<DeviceRuntime> owner_;  // null when non-owning

  // Fast path: no lock while no malloc fault is configured.
  std::atomic<bool> armed_{false};
  absl::Mutex mu_;
  CallFaults malloc_faults_ ABSL_GUARDED_BY(mu_);
  double probability_ ABSL_GUARDED_BY(mu_) = 0;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);

  CallFaults physical_faults_ ABSL_GUARDED_BY(mu_);
  CallFaults map_faults_ ABSL_GUARDED_BY(mu_);

  std::atomic<bool> hold_events_{false};
  std::atomic<std::uint64_t> malloc_calls_{0}, injected_{0};
  std::atomic<std::uint64_t> physical_calls_{0}, physical_injected_{0};
  std::atomic<std::uint64_t> map_calls_{0}, map_injected_{0};
};

}  // namespace strata::platform
