#include "layers/zero_size_allocator.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "layers/stat_allocator.h"
#include "support/shared_copies.h"
#include "support/test_allocators.h"
#include "support/threads.h"

namespace strata::layers {

using allocation::AllocationPtr;
using allocation::kSmallPool;

namespace {

TEST(ZeroSizeAllocatorTest, EmptyAllocationsNeverReachTheUnderlying) {
  auto rec = std::make_shared<testing::RecordingAllocator>(platform::CUDAPlace(1));
  auto zero = std::make_shared<ZeroSizeAllocator>(rec, platform::CUDAPlace(1));
  std::vector<AllocationPtr> held;
  for (int i = 0; i < 10000; ++i) {
    AllocationPtr a = zero->Allocate(0);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->ptr(), nullptr);
    EXPECT_EQ(a->base_ptr(), nullptr);
    EXPECT_EQ(a->size(), 0u);
    EXPECT_EQ(a->place(), platform::CUDAPlace(1));
    ASSERT_EQ(a->num_decorators(), 1);
    EXPECT_EQ(a->decorator(0), zero.get());
    if (i % 3 == 0) held.push_back(std::move(a));
    if (held.size() > 1200) held.clear();  // more than one ObjectPool cache's worth
  }
  held.clear();
  testing::DropSharedCopies(zero->Allocate(0),
                            [](const allocation::Allocation& copy) { EXPECT_EQ(copy.size(), 0u); });
  EXPECT_EQ(rec->num_allocs(), 0u);
  EXPECT_TRUE(rec->requests().empty());
  EXPECT_EQ(rec->live_blocks(), 0u);
}

TEST(ZeroSizeAllocatorTest, ForwardsNonZeroSizes) {
  auto rec = std::make_shared<testing::RecordingAllocator>();
  auto zero = std::make_shared<ZeroSizeAllocator>(rec, platform::CPUPlace());
  AllocationPtr empty = zero->Allocate(0);
  AllocationPtr a = zero->Allocate(1);
  AllocationPtr b = zero->Allocate(4096);
  EXPECT_NE(a->ptr(), nullptr);
  EXPECT_EQ(b->size(), 4096u);
  ASSERT_EQ(b->num_decorators(), 2);
  EXPECT_EQ(b->decorator(0), rec.get());
  EXPECT_EQ(b->decorator(1), zero.get());
  EXPECT_EQ(rec->requests(), (std::vector<std::size_t>{1, 4096}));
  EXPECT_EQ(rec->live_blocks(), 2u);
  a.reset();
  empty.reset();
  b.reset();
  EXPECT_EQ(rec->live_blocks(), 0u);
  EXPECT_EQ(rec->num_frees(), 2u);
}

TEST(ZeroSizeAllocatorTest, WorksInsideAChainAndAcrossThreads) {
  auto rec = std::make_shared<testing::RecordingAllocator>();
  auto stat = std::make_shared<StatAllocator>(
      std::make_shared<ZeroSizeAllocator>(rec, platform::CPUPlace()));
  std::vector<std::vector<AllocationPtr>> out(4);
  testing::RunThreads(4, [&](int t) {
    for (int i = 0; i < 2000; ++i) {
      AllocationPtr a = stat->Allocate(i % 2 == 0 ? 0 : 10);
      if (i % 4 == 0) out[t].push_back(std::move(a));  // freed on the main thread
    }
  });
  EXPECT_EQ(stat->allocation_current(), 4 * 500);
  out.clear();
  EXPECT_EQ(stat->allocation_current(), 0);
  EXPECT_EQ(stat->allocation().allocated, 4 * 2000);
  // Only the non-empty half reached the device.
  EXPECT_EQ(rec->num_allocs(), 4u * 1000u);
  EXPECT_EQ(rec->requests().front(), 10u);
  EXPECT_EQ(rec->live_blocks(), 0u);
}

TEST(ZeroSizeAllocatorTest, StatCountsEmptyAllocations) {
  auto rec = std::make_shared<testing::RecordingAllocator>();
  auto stat = std::make_shared<StatAllocator>(
      std::make_shared<ZeroSizeAllocator>(rec, platform::CPUPlace()));
  std::vector<AllocationPtr> v;
  for (int i = 0; i < 10; ++i) v.push_back(stat->Allocate(0));
  EXPECT_EQ(stat->allocation(kSmallPool).current, 10);
  EXPECT_EQ(stat->allocated_bytes_current(), 0);
  v.clear();
  EXPECT_EQ(stat->allocation_current(), 0);
  EXPECT_EQ(rec->num_allocs(), 0u);
}

}  // namespace
}  // namespace strata::layers
