// ZeroSizeAllocator: a decorator answering size-0 requests itself.
//
// Contract
// - Allocate(0) returns an empty allocation: ptr() == base_ptr() == nullptr, size() 0, place()
//   the place given at construction. Its decorator stack starts at this layer (the layers
//   below never see it), so a layer above that records it on a stream (RecordStream) must
//   treat ptr() == nullptr as nothing to do. Freeing it recycles the object (ObjectPool): no
//   heap allocation per call in the steady state.
// - Allocate(size > 0) forwards to the underlying unchanged.
// - Thread safety: thread-safe (the empty path touches only a per-thread object pool).
// - Throws: what the underlying throws; the empty path throws nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "allocation/decorating_allocator.h"
#include "platform/place.h"

namespace strata::layers {

class ZeroSizeAllocator : public allocation::DecoratingAllocator {
 public:
  static constexpr char kName[] = "zero_size";
  ZeroSizeAllocator(std::shared_ptr<allocation::Allocator> underlying,
                    const platform::Place& place);

  const char* Name() const override { return kName; }
  const platform::Place& place() const { return place_; }

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override;
  void FreeImpl(allocation::Allocation* allocation) override;

 private:
  platform::Place place_;
};

}  // namespace strata::layers
