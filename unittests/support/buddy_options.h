// Buddy pool options for the tests of the buddy-based strategies (buddy_allocator_test.cc,
// naive_best_fit_allocator_test.cc, thread_local_allocator_test.cc), whose figures assume exact
// refills.
#pragma once

#include <cstddef>

#include "strategies/buddy_allocator.h"

namespace strata::testing {

// Refills of exactly `initial` then `reallocate` bytes (no rounding to a chunk granularity), in
// blocks of at least 256 bytes.
inline strategies::BuddyAllocator::Options FixedBuddyOptions(std::size_t initial,
                                                             std::size_t reallocate) {
  strategies::BuddyAllocator::Options o;
  o.min_block_bytes = 256;
  o.chunk_granularity = 1;
  o.initial_bytes = initial;
  o.reallocate_bytes = reallocate;
  return o;
}

}  // namespace strata::testing
