#include "allocation/allocation.h"

#include <stdexcept>

#include "allocation/allocator.h"

namespace strata::allocation {

void Allocation::ThrowChainTooDeep() {
  throw std::logic_error("strata: allocator chain deeper than Allocation::kMaxDecorators");
}

void Allocation::ThrowNothingToPop() {
  throw std::logic_error("strata: freeing an allocation with no allocator left to free it");
}

void Allocation::InheritDecorators(const Allocation& other) {
  for (int i = 0; i < other.num_decorators(); ++i) {
    RegisterDecoratedAllocator(other.decorators_[i]);
  }
}

void AllocationDeleter::operator()(Allocation* allocation) const {
  if (allocation != nullptr) allocation->TopDecoratedAllocator()->Free(allocation);
}

}  // namespace strata::allocation
