// OomRecoveryAllocator: the one out-of-memory policy of a chain (in the spirit of RMM's
// failure-callback adaptor): when the layer below runs out, free what is cached elsewhere, then
// try once more.
//
// Contract
// - Allocate forwards. When the layer below throws BadAlloc, `recover(size)` is called once and
//   the request is tried once more; a second BadAlloc propagates unchanged (same type, same
//   message). The facade's `recover` releases the cache of every chain of the device (completed
//   pending frees and idle pool memory) by querying events only: recovery never waits for the
//   device. The retry is made even when `recover` reports 0 bytes: reclaimed pending frees can
//   serve the request from the pool without any memory going back to the device.
// - `recover` runs with no lock of this layer held, possibly on several threads at once, and may
//   call Release on this very chain. It must not throw (a throwing `recover` is logged and
//   treated as having freed nothing).
// - Free, Release and the statistics forward. CollectStats adds num_alloc_retries: one per
//   recovery (PyTorch's "cache flush and retry"); ResetAccumulatedStats resets it
//   (RetryCountingAllocator).
// - Thread-safe; no lock, one relaxed atomic counter on the failure path only.
// - Throws std::invalid_argument for a null underlying allocator or a null `recover`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "layers/retry_counting_allocator.h"

namespace strata::layers {

class OomRecoveryAllocator : public RetryCountingAllocator {
 public:
  static constexpr char kName[] = "oom_recovery";
  // Frees memory cached elsewhere for a request of `size` bytes; returns the bytes given back to
  // the device (for the log only).
  using Recover = std::function<std::uint64_t(std::size_t size)>;

  OomRecoveryAllocator(std::shared_ptr<allocation::Allocator> underlying, Recover recover);

  const char* Name() const override { return kName; }
  std::int64_t num_recoveries() const { return num_retries(); }

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override;

 private:
  [[gnu::noinline, gnu::cold]] allocation::Allocation* RecoverAndRetry(std::size_t size);

  const Recover recover_;
};

}  // namespace strata::layers
