// Test doubles for allocator layers.
//
// RecordingAllocator: a bottom layer over malloc that records every request and tracks live
// blocks and bytes; it can be told to fail. LimitedAllocator: a decorator that throws BadAlloc
// once a capacity would be exceeded. PassThroughAllocator: a decorator that only forwards (the
// DecoratingAllocator base) and counts the frees that run back through it. All are thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "allocation/allocator.h"
#include "allocation/decorating_allocator.h"

namespace strata::testing {

class RecordingAllocator : public allocation::Allocator {
 public:
  explicit RecordingAllocator(platform::Place place = platform::CPUPlace(),
                              std::size_t alignment = 256)
      : place_(place), alignment_(alignment) {}

  const char* Name() const override { return "recording"; }

  std::size_t live_blocks() const { return live_blocks_.load(); }
  std::size_t live_bytes() const { return live_bytes_.load(); }
  std::size_t num_allocs() const { return num_allocs_.load(); }
  std::size_t num_frees() const { return num_frees_.load(); }
  std::vector<std::size_t> requests() const;
  // The next `n` allocations throw BadAlloc.
  void FailNext(int n) { fail_next_.store(n); }

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override;
  void FreeImpl(allocation::Allocation* allocation) override;

 private:
  platform::Place place_;
  std::size_t alignment_;
  std::atomic<std::size_t> live_blocks_{0}, live_bytes_{0}, num_allocs_{0}, num_frees_{0};
  std::atomic<int> fail_next_{0};
  mutable absl::Mutex mu_;
  std::vector<std::size_t> requests_ ABSL_GUARDED_BY(mu_);
};

class LimitedAllocator : public allocation::DecoratingAllocator {
 public:
  LimitedAllocator(std::shared_ptr<allocation::Allocator> underlying, std::size_t capacity)
      : DecoratingAllocator(std::move(underlying), "LimitedAllocator"), capacity_(capacity) {}

  const char* Name() const override { return "limited"; }
  std::size_t used() const { return used_.load(); }

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override;
  void FreeImpl(allocation::Allocation* allocation) override;

 private:
  std::size_t capacity_;
  std::atomic<std::size_t> used_{0};
};

class PassThroughAllocator : public allocation::DecoratingAllocator {
 public:
  static constexpr char kName[] = "pass_through";
  explicit PassThroughAllocator(std::shared_ptr<allocation::Allocator> underlying)
      : DecoratingAllocator(std::move(underlying), kName) {}

  const char* Name() const override { return kName; }
  std::size_t num_frees() const { return num_frees_.load(); }

 protected:
  void FreeImpl(allocation::Allocation* allocation) override {
    num_frees_.fetch_add(1);
    DecoratingAllocator::FreeImpl(allocation);
  }

 private:
  std::atomic<std::size_t> num_frees_{0};
};

}  // namespace strata::testing
