// ZeroSizeAllocator: a decorator answering size-0 requests itself.
//
// Contract
// - Allocate(0) returns an empty allocation: ptr() == base_ptr() == nullptr, size() 0, place()
//   the place given at construction. Its decorator stack starts at this layer (the layers
//   below never see it), so a layer above that records it on a stream (RecordStream) must
//   treat ptr() == nullptr as nothing to do. Freeing it recycles the object (ObjectPool): no
//   heap allocation per call in the steady state.
// - Allocate(size > 0) forwards to the underlying unchanged.
// - Thread safety: the empty path is thread-safe; the forwarded path is the underlying's.
// - Throws: what the underlying throws; the empty path throws nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "allocation/allocator.h"
#include "platform/place.h"

namespace strata::allocation {

class ZeroSizeAllocator : public Allocator {
 public:
  ZeroSizeAllocator(std::shared_ptr<Allocator> underlying, const platform::Place& place);

  const char* Name() const override { return "zero_size"; }
  bool IsAllocThreadSafe() const override { return underlying_->IsAllocThreadSafe(); }
  const platform::Place& place() const { return place_; }

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
  platform::Place place_;
};

}  // namespace strata::allocation
