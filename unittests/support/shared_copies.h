// DropSharedCopies: an allocation in its shared form and a copy of it, dropped one after the
// other, for tests of what the last reference does.
#pragma once

#include <utility>

#include "allocation/allocation.h"

namespace strata::testing {

// Makes `a` shared, copies it and drops the original: `while_copied(copy)` runs while the copy
// alone holds the allocation; then the copy goes too (the last reference, which frees it).
template <typename F>
void DropSharedCopies(allocation::AllocationPtr a, F&& while_copied) {
  allocation::SharedAllocation shared = allocation::ToShared(std::move(a));
  allocation::SharedAllocation copy = shared;
  shared.reset();
  std::forward<F>(while_copied)(*copy);
  copy.reset();
}

}  // namespace strata::testing
