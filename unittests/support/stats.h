// An allocator's statistics in one expression, for tests.
#pragma once

#include "allocation/allocator.h"
#include "allocation/memory_stats.h"

namespace strata::testing {

// What `a.CollectStats` fills in, from zero.
inline allocation::MemoryStats StatsOf(const allocation::Allocator& a) {
  allocation::MemoryStats s;
  a.CollectStats(&s);
  return s;
}

}  // namespace strata::testing
