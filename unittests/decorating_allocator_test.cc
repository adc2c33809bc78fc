#include "allocation/decorating_allocator.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "facade/scoped_cache_allocator.h"
#include "layers/memory_limit_allocator.h"
#include "layers/retry_allocator.h"
#include "layers/stat_allocator.h"
#include "layers/zero_size_allocator.h"
#include "support/test_allocators.h"

namespace strata::allocation {
namespace {

// Adds nothing to the base but a count of frees: stands for the base alone.
using testing::PassThroughAllocator;

template <typename F>
std::string NullError(F make) {
  try {
    make();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no exception";
}

TEST(DecoratingAllocatorTest, EveryDecoratorRefusesANullUnderlyingAllocator) {
  const platform::Place cpu = platform::CPUPlace();
  // Each names itself by its one name (kName).
  EXPECT_EQ(NullError([] { PassThroughAllocator p(nullptr); }),
            "pass_through: the underlying allocator is null");
  EXPECT_EQ(NullError([&] { layers::MemoryLimitAllocator m(nullptr, cpu, 0); }),
            "memory_limit: the underlying allocator is null");
  EXPECT_EQ(NullError([] { layers::RetryAllocator r(nullptr, 10); }),
            "retry: the underlying allocator is null");
  EXPECT_EQ(NullError([] { layers::StatAllocator s(nullptr); }),
            "stat: the underlying allocator is null");
  EXPECT_EQ(NullError([&] { layers::ZeroSizeAllocator z(nullptr, cpu); }),
            "zero_size: the underlying allocator is null");
  EXPECT_EQ(NullError([&] {
              facade::ScopedCacheAllocator s(nullptr, cpu, platform::Stream{}, 1, nullptr);
            }),
            "scoped_cache: the underlying allocator is null");
}

TEST(DecoratingAllocatorTest, ForwardsAllocateFreeReleaseAndStatistics) {
  auto rec = std::make_shared<testing::RecordingAllocator>();
  auto top = std::make_shared<PassThroughAllocator>(rec);
  EXPECT_EQ(&top->underlying(), rec.get());
  EXPECT_EQ(top->shared_underlying(), rec);
  {
    AllocationPtr a = top->Allocate(100);
    ASSERT_EQ(a->num_decorators(), 2);
    EXPECT_EQ(a->decorator(0), rec.get());
    EXPECT_EQ(a->decorator(1), top.get());
    EXPECT_EQ(rec->live_blocks(), 1u);
  }
  EXPECT_EQ(rec->live_blocks(), 0u);
  EXPECT_EQ(rec->num_frees(), 1u);
  EXPECT_EQ(top->Release(platform::CPUPlace()), 0u);
}

}  // namespace
}  // namespace strata::allocation
