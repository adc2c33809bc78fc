// HandleReusingRuntime: a DeviceRuntime that forwards to another one (usually EmulatedRuntime)
// but behaves as CUDA does with stream handles: a destroyed stream's handle may be handed to the
// next stream created, and nobody is told of a destruction (StreamDestroyCount is null). It
// counts the calls made on a handle while its stream is destroyed and no new stream has it
// (undefined behaviour on CUDA, which does not check a handle; here they throw RuntimeError as
// the emulated runtime does). Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "platform/device_runtime.h"
#include "platform/forwarding_runtime.h"

namespace strata::testing {

class HandleReusingRuntime : public platform::ForwardingRuntime {
 public:
  explicit HandleReusingRuntime(platform::DeviceRuntime* inner)
      : ForwardingRuntime(inner, "HandleReusingRuntime") {}

  // Calls on a destroyed handle so far.
  std::uint64_t dead_handle_calls() const { return dead_calls_.load(); }

  const char* Name() const override { return "handle_reusing"; }
  // The lowest handle whose stream was destroyed, else a new one.
  platform::Stream CreateStream(int device) override;
  void DestroyStream(platform::Stream stream) override;
  const std::atomic<std::uint64_t>* StreamDestroyCount() const override { return nullptr; }
  void SynchronizeStream(platform::Stream stream) override;
  bool QueryStream(platform::Stream stream) override;
  void RecordEvent(platform::Event event, platform::Stream stream) override;
  void StreamWaitEvent(platform::Stream stream, platform::Event event) override;
  void BeginCapture(platform::Stream stream) override;
  void EndCapture(platform::Stream stream) override;
  bool IsCapturing(platform::Stream stream) override;
  int StreamDevice(platform::Stream stream) override;
  void LaunchHostTask(platform::Stream stream, std::function<void()> task) override;
  void MemsetAsync(void* dst, int value, std::size_t bytes, platform::Stream stream) override;
  void MemcpyAsync(void* dst, const void* src, std::size_t bytes, platform::Stream stream) override;

 private:
  // The inner runtime's stream behind `stream` (the default one for itself); counts and throws
  // for a destroyed handle.
  platform::Stream Inner(platform::Stream stream);

  struct Slot {
    platform::Stream inner;
    bool live = false;
  };
  absl::Mutex mu_;
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);  // handle k + 1 is slot k
  std::atomic<std::uint64_t> dead_calls_{0};
};

}  // namespace strata::testing
