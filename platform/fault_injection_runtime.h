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

namespace strata::platform {

class FaultInjectionRuntime : public DeviceRuntime {
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

  DeviceRuntime& base() const { return *base_; }

  // --- DeviceRuntime -----------------------------------------------------------------------------
  const char* Name() const override { return "fault_injection"; }
  int DeviceCount() override { return base_->DeviceCount(); }
  void SetDevice(int device) override { base_->SetDevice(device); }
  int GetDevice() override { return base_->GetDevice(); }

  void* Malloc(int device, std::size_t size) override;
  void Free(int device, void* ptr) override { base_->Free(device, ptr); }
  void MemInfo(int device, std::size_t* free_bytes, std::size_t* total_bytes) override {
    base_->MemInfo(device, free_bytes, total_bytes);
  }

  std::size_t VmmGranularity(int device) override { return base_->VmmGranularity(device); }
  void* ReserveAddress(int device, std::size_t size) override {
    return base_->ReserveAddress(device, size);
  }
  void FreeAddress(void* ptr, std::size_t size) override { base_->FreeAddress(ptr, size); }
  PhysicalMemory CreatePhysical(int device, std::size_t size) override;
  void ReleasePhysical(PhysicalMemory mem) override { base_->ReleasePhysical(mem); }
  void Map(void* ptr, std::size_t size, PhysicalMemory mem, std::size_t offset,
           int device) override;
  void Unmap(void* ptr, std::size_t size) override { base_->Unmap(ptr, size); }
  void* HostMalloc(std::size_t size) override { return base_->HostMalloc(size); }
  void HostFree(void* ptr) override { base_->HostFree(ptr); }

  Stream CreateStream(int device) override { return base_->CreateStream(device); }
  void DestroyStream(Stream stream) override { base_->DestroyStream(stream); }
  void SynchronizeStream(Stream stream) override { base_->SynchronizeStream(stream); }
  void SynchronizeDevice(int device) override { base_->SynchronizeDevice(device); }
  bool QueryStream(Stream stream) override { return base_->QueryStream(stream); }

  Event CreateEvent(int device) override { return base_->CreateEvent(device); }
  void DestroyEvent(Event event) override { base_->DestroyEvent(event); }
  void RecordEvent(Event event, Stream stream) override { base_->RecordEvent(event, stream); }
  bool QueryEvent(Event event) override;
  void SynchronizeEvent(Event event) override { base_->SynchronizeEvent(event); }
  void StreamWaitEvent(Stream stream, Event event) override {
    base_->StreamWaitEvent(stream, event);
  }

  void BeginCapture(Stream stream) override { base_->BeginCapture(stream); }
  void EndCapture(Stream stream) override { base_->EndCapture(stream); }
  bool IsCapturing(Stream stream) override { return base_->IsCapturing(stream); }
  void LaunchHostTask(Stream stream, std::function<void()> task) override {
    base_->LaunchHostTask(stream, std::move(task));
  }
  void MemsetAsync(void* dst, int value, std::size_t bytes, Stream stream) override {
    base_->MemsetAsync(dst, value, bytes, stream);
  }
  void MemcpyAsync(void* dst, const void* src, std::size_t bytes, Stream stream) override {
    base_->MemcpyAsync(dst, src, bytes, stream);
  }

  std::uint64_t SyncCount() const override { return base_->SyncCount(); }

 private:
  bool ShouldFail();
  // "Fail next k" and "fail every nth" of one virtual memory call.
  struct CallFaults {
    std::uint64_t fail_next = 0;
    std::uint64_t every_nth = 0;
    std::uint64_t nth_counter = 0;
    // Advances the state by one call; true when that call fails.
    bool Next();
  };

  std::shared_ptr<DeviceRuntime> owner_;  // null when non-owning
  DeviceRuntime* const base_;

  // Fast path: no lock while no malloc fault is configured.
  std::atomic<bool> armed_{false};
  absl::Mutex mu_;
  std::uint64_t fail_next_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t every_nth_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t nth_counter_ ABSL_GUARDED_BY(mu_) = 0;
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
