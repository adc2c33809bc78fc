// NaiveBestFitAllocator: Paddle's "naive_best_fit" strategy — one BuddyAllocator per place
// behind a mutex.
//
// The CPU, GPU and pinned variants are this one class: they differ only by the place and the
// BuddyAllocator::Options the facade passes (GPU: fraction_of_gpu_memory_to_use with device
// free memory as available_bytes; CPU and pinned: their own fractions and host figures).
//
// Contract
// - Thread safety: Allocate/Free/Release/stats may be called concurrently (one mutex around
//   the buddy pool; the Allocation objects are recycled through allocation::ObjectPool, so the
//   steady state does not touch the heap).
// - Streams: none; a freed block is reusable immediately (StreamSafeCUDAAllocator above this
//   layer delays frees of blocks used on other streams).
// - Allocation: ptr() is the block, size() its rounded size (a multiple of min_block_bytes),
//   base_ptr() the start of the chunk (segment) it was carved from, place() this place.
// - Throws: allocation::BadAlloc when the underlying allocator is exhausted (with this pool's
//   allocated/reserved bytes); std::invalid_argument for bad options or overflowing sizes.
// - Release(place) returns the chunks without live blocks when `place` is this allocator's
//   place (0 otherwise). CollectStats fills segment, reserved_bytes, inactive_split(_bytes),
//   num_device_alloc and num_device_free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "allocation/allocator.h"
#include "platform/place.h"
#include "platform/spin_lock.h"
#include "strategies/buddy_allocator.h"

namespace strata::strategies {

class NaiveBestFitAllocator : public allocation::Allocator {
 public:
  static constexpr char kName[] = "naive_best_fit";

  NaiveBestFitAllocator(std::shared_ptr<allocation::Allocator> underlying,
                        const platform::Place& place, BuddyAllocator::Options options);

  const char* Name() const override { return kName; }
  const platform::Place& place() const { return place_; }

  // Bytes of live blocks / bytes held from the underlying allocator.
  std::size_t allocated_bytes() const;
  std::size_t reserved_bytes() const;

  void CollectStats(allocation::MemoryStats* stats) const override;
  void Snapshot(allocation::MemorySnapshot* snapshot) const override;
  void ResetPeakStats() override;
  void ResetAccumulatedStats() override;

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override;
  void FreeImpl(allocation::Allocation* allocation) override;
  std::uint64_t ReleaseImpl(const platform::Place& place) override;

 private:
  // `(self.buddy_.*member)(args...)` under self's lock, for the const and the non-const members.
  template <typename Self, typename Member, typename... Args>
  static decltype(auto) Locked(Self& self, Member member, Args... args) {
    std::lock_guard<platform::SpinLock> lock(self.mu_);
    return (self.buddy_.*member)(args...);
  }

  const platform::Place place_;
  mutable platform::SpinLock mu_;  // see spin_lock.h for why not absl::Mutex
  BuddyAllocator buddy_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::strategies
