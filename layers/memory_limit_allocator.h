// MemoryLimitAllocator: enforces a per-process memory limit on one place (gpu_memory_limit_mb, or
// the memory fraction) BEFORE the device is asked, directly above the raw allocator, so it holds
// for every strategy.
//
// Contract
// - Each allocation passing through it is one device allocation; it counts its size rounded up
//   to the device granularity (2 MiB), as reserved memory is counted.
// - A request that would take reserved memory above the limit throws BadAlloc whose message
//   says it was the limit (and the limit and reserved figures). limit 0 = no limit.
// - The limit can change at any time (SetLimit: PyTorch's set_per_process_memory_fraction);
//   memory above a lowered limit stays until freed, and later requests are refused meanwhile.
// - Thread-safe and lock-free (atomics).
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "allocation/decorating_allocator.h"

namespace strata::layers {

class MemoryLimitAllocator : public allocation::DecoratingAllocator {
 public:
  static constexpr char kName[] = "memory_limit";
  // `limit_name`: what sets the limit, for the error message.
  MemoryLimitAllocator(std::shared_ptr<allocation::Allocator> underlying,
                       const platform::Place& place, std::size_t limit_bytes,
                       std::size_t granularity = std::size_t{2} << 20,
                       std::string limit_name = "gpu_memory_limit_mb, or the memory fraction");

  const char* Name() const override { return kName; }

  std::size_t limit_bytes() const { return limit_.load(std::memory_order_relaxed); }
  void SetLimit(std::size_t limit_bytes);
  std::size_t reserved_bytes() const { return reserved_.load(std::memory_order_relaxed); }

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override;
  void FreeImpl(allocation::Allocation* allocation) override;

 private:
  std::size_t Rounded(std::size_t size) const;

  const platform::Place place_;
  std::atomic<std::size_t> limit_;
  const std::size_t granularity_;
  const std::string limit_name_;
  std::atomic<std::size_t> reserved_{0};
};

}  // namespace strata::layers
