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
// - Shared limits: layers given one Budget count against one limit together (the CUDA graph
//   pools of a place), and `held_elsewhere` adds what another allocator holds under the same
//   limit (the place's virtual-memory pool), so that together they stay under it.
// - Thread-safe and lock-free (atomics); `held_elsewhere` is called on each growth under a limit.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "allocation/decorating_allocator.h"

namespace strata::layers {

class MemoryLimitAllocator : public allocation::DecoratingAllocator {
 public:
  static constexpr char kName[] = "memory_limit";
  static constexpr char kDefaultLimitName[] = "gpu_memory_limit_mb, or the memory fraction";

  // A limit (0: none) and the bytes counted against it.
  struct Budget {
    explicit Budget(std::size_t limit_bytes) : limit(limit_bytes) {}
    std::atomic<std::size_t> limit;
    std::atomic<std::size_t> reserved{0};
  };
  // Bytes another allocator holds under the same limit.
  using HeldElsewhere = std::function<std::size_t()>;

  // `limit_name`: what sets the limit, for the error message.
  MemoryLimitAllocator(std::shared_ptr<allocation::Allocator> underlying,
                       const platform::Place& place, std::size_t limit_bytes,
                       std::size_t granularity = std::size_t{2} << 20,
                       std::string limit_name = kDefaultLimitName);
  MemoryLimitAllocator(std::shared_ptr<allocation::Allocator> underlying,
                       const platform::Place& place, std::shared_ptr<Budget> budget,
                       HeldElsewhere held_elsewhere, std::size_t granularity = std::size_t{2} << 20,
                       std::string limit_name = kDefaultLimitName);

  const char* Name() const override { return kName; }

  std::size_t limit_bytes() const { return budget_->limit.load(std::memory_order_relaxed); }
  void SetLimit(std::size_t limit_bytes);
  std::size_t reserved_bytes() const { return budget_->reserved.load(std::memory_order_relaxed); }

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override;
  void FreeImpl(allocation::Allocation* allocation) override;

 private:
  std::size_t Rounded(std::size_t size) const;

  const platform::Place place_;
  const std::shared_ptr<Budget> budget_;
  const HeldElsewhere held_elsewhere_;
  const std::size_t granularity_;
  const std::string limit_name_;
};

}  // namespace strata::layers
