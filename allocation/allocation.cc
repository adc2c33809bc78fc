#include "allocation/allocation.h"

#include <stdexcept>

#include "allocation/allocator.h"

namespace strata::allocation {

void Allocation::RegisterDecoratedAllocator(Allocator* allocator) {
  if (num_decorators_ == kMaxDecorators) {
    throw std::logic_error("strata: allocator chain deeper than Allocation::kMaxDecorators");
  }
  decorators_[num_decorators_++] = allocator;
}

void Allocation::PopDecoratedAllocator() {
  if (num_decorators_ == 0) {
    throw std::logic_error("strata: freeing an allocation with no allocator left to free it");
  }
  --num_decorators_;
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
