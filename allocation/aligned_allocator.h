// AlignedAllocator: a decorator guaranteeing that every ptr() it hands out is a multiple of a
// power-of-two `alignment`.
//
// Contract
// - Construction: `alignment` and `underlying_alignment` (what the underlying already
//   guarantees, 1 if nothing) must be powers of two, else std::invalid_argument.
// - alignment <= underlying_alignment: allocations pass through untouched (this layer is only
//   added to their decorator stack); a ptr() that breaks the underlying's promise is freed and
//   reported with std::logic_error.
// - Otherwise Allocate(size) asks the underlying for size + alignment - underlying_alignment
//   bytes and returns a wrapping Allocation: ptr() is the first aligned address,
//   size() the usable bytes from there (>= size), base_ptr() and place() are the underlying
//   allocation's, and its decorator stack starts with the underlying's
//   (Allocation::InheritDecorators). The wrapper owns the underlying allocation and frees it
//   when freed; wrappers are recycled (ObjectPool), so the steady state allocates nothing.
// - Throws: std::invalid_argument when the padded size overflows; whatever the underlying
//   throws (BadAlloc untouched: its requested_bytes is the padded size).
// - Thread safety and streams: those of the underlying; this layer keeps no mutable state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "allocation/allocator.h"

namespace strata::allocation {

class AlignedAllocator : public Allocator {
 public:
  AlignedAllocator(std::shared_ptr<Allocator> underlying, std::size_t alignment,
                   std::size_t underlying_alignment = 1);

  const char* Name() const override { return "aligned"; }
  bool IsAllocThreadSafe() const override { return underlying_->IsAllocThreadSafe(); }
  std::size_t alignment() const { return alignment_; }

  void CollectStats(MemoryStats* stats) const override { underlying_->CollectStats(stats); }
  void ResetPeakStats() override { underlying_->ResetPeakStats(); }
  void ResetAccumulatedStats() override { underlying_->ResetAccumulatedStats(); }

 protected:
  Allocation* AllocateImpl(std::size_t size) override;
  void FreeImpl(Allocation* allocation) override;
  std::uint64_t ReleaseImpl(const platform::Place& place) override {
    return underlying_->Release(place);
  }

 private:
  std::shared_ptr<Allocator> underlying_;
  std::size_t alignment_;
  // Extra bytes asked of the underlying; 0 means pass-through.
  std::size_t padding_;
};

}  // namespace strata::allocation
