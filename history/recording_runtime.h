// RecordingRuntime: a DeviceRuntime decorator that reports the device-memory calls (device
// malloc / free, physical create / release, map / unmap, pinned host malloc / free) to the
// HistoryRecorder of their place while it records. The facade puts it under every chain, so
// device events are recorded in one place whatever the strategy.
//
// Contract
// - Thread-safe, as the base runtime. Attach may run concurrently with the calls.
// - Sizes of frees and releases come from the matching malloc / create (kept in a table under a
//   mutex: these calls are rare and cost microseconds each on a GPU); a free of memory that did
//   not pass through here is recorded with 0 bytes.
// - Everything else forwards unchanged; throws what the base throws.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "history/history_recorder.h"
#include "platform/forwarding_runtime.h"

namespace strata::history {

class RecordingRuntime : public platform::ForwardingRuntime {
 public:
  static constexpr int kMaxDevices = 64;

  explicit RecordingRuntime(platform::DeviceRuntime* base)
      : ForwardingRuntime(base, "RecordingRuntime") {}

  // Events of GPU `device` (pinned host memory: AttachHost) go to `recorder` (null: nowhere),
  // which must outlive this object or be detached first.
  void Attach(int device, HistoryRecorder* recorder);
  void AttachHost(HistoryRecorder* recorder) { host_.store(recorder, std::memory_order_release); }
  // Detaches every recorder (before they go: pools freed later still call the runtime).
  void DetachAll() {
    for (auto& d : devices_) d.store(nullptr, std::memory_order_release);
    host_.store(nullptr, std::memory_order_release);
  }

  void* Malloc(int device, std::size_t size) override;
  void Free(int device, void* ptr) override;
  void* ReserveAddress(int device, std::size_t size) override;
  void FreeAddress(void* ptr, std::size_t size) override;
  platform::PhysicalMemory CreatePhysical(int device, std::size_t size) override;
  void ReleasePhysical(platform::PhysicalMemory mem) override;
  void Map(void* ptr, std::size_t size, platform::PhysicalMemory mem, std::size_t offset,
           int device) override;
  void Unmap(void* ptr, std::size_t size) override;
  void* HostMalloc(std::size_t size) override;
  void HostFree(void* ptr) override;

 private:
  HistoryRecorder* For(int device) const {
    if (static_cast<unsigned>(device) >= static_cast<unsigned>(kMaxDevices)) return nullptr;
    HistoryRecorder* r = devices_[device].load(std::memory_order_acquire);
    return r != nullptr && r->recording() ? r : nullptr;
  }
  HistoryRecorder* Host() const {
    HistoryRecorder* r = host_.load(std::memory_order_acquire);
    return r != nullptr && r->recording() ? r : nullptr;
  }
  // Device and host allocations: their sizes, for the frees.
  void Remember(const void* p, int device, std::size_t size);
  std::size_t Forget(const void* p);  // 0 when unknown
  // The device of the reservation holding `ptr` (-1: none).
  int DeviceOfAddress(const void* ptr);

  std::array<std::atomic<HistoryRecorder*>, kMaxDevices> devices_{};
  std::atomic<HistoryRecorder*> host_{nullptr};
  absl::Mutex mu_;
  struct Extent {
    int device;
    std::size_t bytes;
  };
  absl::flat_hash_map<std::uintptr_t, Extent> blocks_ ABSL_GUARDED_BY(mu_);  // malloc'd
  absl::flat_hash_map<std::uint64_t, Extent> handles_ ABSL_GUARDED_BY(mu_);  // physical
  absl::flat_hash_map<std::uintptr_t, Extent> reservations_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::history
