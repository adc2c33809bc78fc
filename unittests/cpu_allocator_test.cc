#include "raw/cpu_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "support/stats.h"

namespace strata::raw {

using allocation::AllocationPtr;
using allocation::kAggregate;
using allocation::MemoryStats;

namespace {

TEST(CPUAllocatorTest, AlignedAndUsable) {
  CPUAllocator allocator;
  for (std::size_t size : {1, 63, 64, 65, 4096, 1 << 20}) {
    AllocationPtr a = allocator.Allocate(size);
    ASSERT_NE(a->ptr(), nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a->ptr()) % 64, 0u);
    EXPECT_GE(a->size(), size);
    std::memset(a->ptr(), 0xab, size);
    EXPECT_TRUE(a->place().is_cpu());
  }
  const MemoryStats stats = testing::StatsOf(allocator);
  EXPECT_EQ(stats.num_device_alloc, 6);
  EXPECT_EQ(stats.num_device_free, 6);
  EXPECT_EQ(stats.reserved_bytes[kAggregate].current, 0);
}

TEST(CPUAllocatorTest, CustomAlignment) {
  CPUAllocator allocator(4096);
  AllocationPtr a = allocator.Allocate(10);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a->ptr()) % 4096, 0u);
}

TEST(CPUAllocatorTest, BadInputIsRejected) {
  EXPECT_THROW(CPUAllocator(48), std::invalid_argument);
  EXPECT_THROW(CPUAllocator(0), std::invalid_argument);
  CPUAllocator allocator;
  EXPECT_THROW(allocator.Allocate(SIZE_MAX), std::invalid_argument);
  EXPECT_EQ(allocator.Allocate(0)->ptr(), nullptr);
}

}  // namespace
}  // namespace strata::raw
