#include "layers/oom_recovery_allocator.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>

#include "allocation/bad_alloc.h"
#include "support/stats.h"
#include "support/test_allocators.h"

namespace strata::layers {

using allocation::AllocationPtr;
using allocation::BadAlloc;
using allocation::MemoryStats;

namespace {

constexpr std::size_t kCapacity = 1000;

struct Chain {
  std::shared_ptr<testing::RecordingAllocator> rec =
      std::make_shared<testing::RecordingAllocator>();
  std::shared_ptr<testing::LimitedAllocator> limited =
      std::make_shared<testing::LimitedAllocator>(rec, kCapacity);
};

TEST(OomRecoveryAllocatorTest, RefusesANullCallback) {
  Chain c;
  EXPECT_THROW(OomRecoveryAllocator(c.limited, nullptr), std::invalid_argument);
}

TEST(OomRecoveryAllocatorTest, RecoversOnceThenRetries) {
  Chain c;
  AllocationPtr held = c.limited->Allocate(kCapacity);  // memory "cached elsewhere"
  int calls = 0;
  OomRecoveryAllocator top(c.limited, [&](std::size_t size) {
    EXPECT_EQ(size, 600u);
    ++calls;
    held.reset();
    return std::uint64_t{kCapacity};
  });
  AllocationPtr a = top.Allocate(600);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(top.num_recoveries(), 1);
  const MemoryStats s = testing::StatsOf(top);
  EXPECT_EQ(s.num_alloc_retries, 1);
  top.ResetAccumulatedStats();
  EXPECT_EQ(top.num_recoveries(), 0);
  // No failure, no callback.
  a.reset();
  AllocationPtr b = top.Allocate(10);
  EXPECT_EQ(calls, 1);
}

TEST(OomRecoveryAllocatorTest, SecondFailurePropagatesUnchangedAndLosesNothing) {
  Chain c;
  int calls = 0;
  OomRecoveryAllocator top(c.limited, [&](std::size_t) {
    ++calls;
    return std::uint64_t{0};
  });
  AllocationPtr a = top.Allocate(800);
  EXPECT_THROW(top.Allocate(800), BadAlloc);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(c.rec->live_blocks(), 1u);
  a.reset();
  EXPECT_EQ(c.rec->live_blocks(), 0u);
  EXPECT_NE(top.Allocate(800), nullptr);
}

TEST(OomRecoveryAllocatorTest, ThrowingCallbackCountsAsNothingFreed) {
  Chain c;
  AllocationPtr a = c.limited->Allocate(kCapacity);
  OomRecoveryAllocator top(
      c.limited, [](std::size_t) -> std::uint64_t { throw std::runtime_error("cannot release"); });
  EXPECT_THROW(top.Allocate(1), BadAlloc);
  EXPECT_EQ(top.num_recoveries(), 1);
}

}  // namespace
}  // namespace strata::layers
