// The C ABI's library state: the one AllocatorFacade of libstrata_c.so, its device runtime, the
// pointer registry and the emulated streams' pause gates. Not installed; for capi/ only.
//
// - The facade is owned here (not AllocatorFacade::Instance(), whose runtime and flags are fixed
//   at first use): built lazily from flags::Current() over the chosen runtime (CUDA, or
//   emulated), published through an atomic pointer, so the hot path is one acquire load.
// - Reconfiguration (strata_set_flags, strata_use_emulated_device) is allowed only while no
//   allocation made through the registry is live and no other thread is inside a C ABI call; it
//   retires the facade: releases its cache and keeps the object (and its runtime) alive while
//   frees it deferred are pending, so a thread still holding the old pointer never touches freed
//   memory. These calls are for start-up and tests.
// - Nothing here is ever destroyed: PyTorch and CuPy free tensors during interpreter shutdown,
//   after static destructors would have run.
//
// Thread-safe. The functions that may throw say what; call them inside Guard() (capi/guard.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "capi/registry.h"
#include "facade/allocator_facade.h"
#include "platform/emulated_runtime.h"
#include "platform/fault_injection_runtime.h"
#include "platform/stream.h"

namespace strata::capi {

class LibraryState {
 public:
  // The current facade, built on first use. Throws std::invalid_argument for a bad
  // STRATA_C_DEVICE, STRATA_C_FAULTS or emulated-device variable, and what building throws.
  facade::AllocatorFacade& Facade() {
    facade::AllocatorFacade* f = facade_.load(std::memory_order_acquire);
    return f != nullptr ? *f : Build();
  }
  // The current facade, or null when none is built (then nothing is live either).
  facade::AllocatorFacade* FacadeIfBuilt() { return facade_.load(std::memory_order_acquire); }

  // Throws when CUDA places cannot work: std::invalid_argument for a negative `device`, Error
  // (STRATA_ERROR_RUNTIME) with the reason when there is no GPU and no emulated device.
  void CheckDevice(facade::AllocatorFacade& f, int device);

  // Runs `change` (flags or runtime) and retires the facade, if no allocation is live and no
  // other thread is inside a call; otherwise throws Error (STRATA_ERROR_BUSY) naming `what`.
  // What `change` throws propagates, and the facade stays.
  void Reconfigure(const char* what, absl::FunctionRef<void()> change);

  // Serves CUDA places from an emulated runtime of `device_count` devices of `capacity_bytes`
  // each (none: back to CUDA), through Reconfigure.
  void UseEmulatedDevice(int device_count, std::size_t capacity_bytes);

  // The emulated runtime; throws std::invalid_argument when it is not in use. Never destroyed.
  platform::EmulatedRuntime& Emulated();

  // Holds `stream`'s later work until Resume (a host task waiting on a gate).
  void Pause(platform::Stream stream);
  // Opens `stream`'s gates; then waits for the stream when `synchronize`.
  void Resume(platform::Stream stream, bool synchronize);

  Registry& registry() { return registry_; }

 private:
  facade::AllocatorFacade& Build();
  void UseEmulatedLocked(int device_count, std::size_t capacity_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  platform::DeviceRuntime* ChooseRuntimeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RetireLocked(facade::AllocatorFacade* old) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::atomic<facade::AllocatorFacade*> facade_{nullptr};
  Registry registry_;

  absl::Mutex mu_;
  bool runtime_chosen_ ABSL_GUARDED_BY(mu_) = false;
  std::string no_runtime_reason_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<platform::EmulatedRuntime> emulated_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<platform::EmulatedRuntime>> retired_runtimes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<facade::AllocatorFacade>> retired_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<platform::FaultInjectionRuntime>> faults_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<void*, std::vector<std::shared_ptr<absl::Notification>>> gates_
      ABSL_GUARDED_BY(mu_);
};

// The library's one state, built on first use and never destroyed.
LibraryState& Library();

}  // namespace strata::capi
