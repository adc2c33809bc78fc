// Test doubles for the stream-safe and retry layers.
//
// CachingTestAllocator: a minimal pool — a LIFO free list per exact size over the allocator
// below, emptied by Release — so tests can observe when a block is handed out again.
// FixedBlockAllocator: `count` blocks of `block_size` bytes at fixed addresses; throws BadAlloc
// (with a recognisable detail) when all are in use. EmptyAllocator: returns empty allocations
// (null pointer, size 0). All are thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "allocation/allocator.h"
#include "allocation/decorating_allocator.h"

namespace strata::testing {

class CachingTestAllocator : public allocation::DecoratingAllocator {
 public:
  explicit CachingTestAllocator(std::shared_ptr<allocation::Allocator> underlying)
      : DecoratingAllocator(std::move(underlying), "CachingTestAllocator") {}
  ~CachingTestAllocator() override { Release(platform::CPUPlace()); }

  const char* Name() const override { return "caching_test"; }
  std::size_t cached_blocks() const;
  std::size_t num_reused() const { return reused_.load(); }

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override;
  void FreeImpl(allocation::Allocation* allocation) override;
  std::uint64_t ReleaseImpl(const platform::Place& place) override;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::size_t, std::vector<allocation::Allocation*>> cache_
      ABSL_GUARDED_BY(mu_);
  std::atomic<std::size_t> reused_{0};
};

class FixedBlockAllocator : public allocation::Allocator {
 public:
  FixedBlockAllocator(std::size_t block_size, int count,
                      platform::Place place = platform::CPUPlace());
  ~FixedBlockAllocator() override;

  const char* Name() const override { return "fixed_block"; }
  void* block(int i) const { return static_cast<char*>(memory_) + i * block_size_; }
  int live_blocks() const;

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override;
  void FreeImpl(allocation::Allocation* allocation) override;

 private:
  const std::size_t block_size_;
  const platform::Place place_;
  void* memory_;
  mutable absl::Mutex mu_;
  std::vector<bool> used_ ABSL_GUARDED_BY(mu_);
};

class EmptyAllocator : public allocation::Allocator {
 public:
  const char* Name() const override { return "empty"; }
  int live() const { return live_.load(); }

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override;
  void FreeImpl(allocation::Allocation* allocation) override;

 private:
  std::atomic<int> live_{0};
};

}  // namespace strata::testing
