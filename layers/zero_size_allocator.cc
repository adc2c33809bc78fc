#include "layers/zero_size_allocator.h"

#include "allocation/object_pool.h"
#include "glog/logging.h"

namespace strata::layers {

using allocation::Allocation;
using allocation::Allocator;
using allocation::DecoratingAllocator;
using allocation::ObjectPool;

namespace {

class EmptyAllocation : public Allocation {
 public:
  void Init(const platform::Place& place) { Reset(nullptr, nullptr, 0, place); }
};

}  // namespace

ZeroSizeAllocator::ZeroSizeAllocator(std::shared_ptr<Allocator> underlying,
                                     const platform::Place& place)
    : DecoratingAllocator(std::move(underlying), kName), place_(place) {
  VLOG(4) << "zero_size: over " << this->underlying().Name() << " on " << place_;
}

Allocation* ZeroSizeAllocator::AllocateImpl(std::size_t size) {
  if (size > 0) return underlying().Allocate(size).release();
  EmptyAllocation* a = ObjectPool<EmptyAllocation>::Acquire();
  a->Init(place_);
  return a;
}

void ZeroSizeAllocator::FreeImpl(Allocation* allocation) {
  // Ours had only this layer on its stack (just popped); the underlying's keep theirs.
  if (allocation->num_decorators() == 0) {
    ObjectPool<EmptyAllocation>::Release(static_cast<EmptyAllocation*>(allocation));
    return;
  }
  underlying().Free(allocation);
}

}  // namespace strata::layers
