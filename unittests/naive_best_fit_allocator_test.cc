#include "strategies/naive_best_fit_allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "allocation/bad_alloc.h"
#include "support/buddy_options.h"
#include "support/stats.h"
#include "support/test_allocators.h"

namespace strata::strategies {
namespace {

using ::testing::HasSubstr;

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * 1024;

TEST(NaiveBestFitAllocatorTest, AllocationDescribesTheBlock) {
  auto base = std::make_shared<testing::RecordingAllocator>(platform::CUDAPlace(1));
  NaiveBestFitAllocator allocator(base, platform::CUDAPlace(1),
                                  testing::FixedBuddyOptions(kMiB, kMiB));
  EXPECT_STREQ(allocator.Name(), "naive_best_fit");
  allocation::AllocationPtr a = allocator.Allocate(1000);
  allocation::AllocationPtr b = allocator.Allocate(10);
  EXPECT_EQ(a->size(), 1024u);
  EXPECT_EQ(b->size(), 256u);
  EXPECT_EQ(a->place(), platform::CUDAPlace(1));
  EXPECT_EQ(a->base_ptr(), a->ptr());  // first block of the chunk
  EXPECT_EQ(b->base_ptr(), a->ptr());
  EXPECT_EQ(static_cast<char*>(b->ptr()), static_cast<char*>(a->ptr()) + 1024);
  ASSERT_EQ(a->num_decorators(), 1);
  EXPECT_EQ(a->decorator(0), &allocator);
  EXPECT_EQ(allocator.allocated_bytes(), 1280u);
  EXPECT_EQ(allocator.reserved_bytes(), kMiB);
  a.reset();
  b.reset();
  EXPECT_EQ(allocator.allocated_bytes(), 0u);
  EXPECT_EQ(base->live_blocks(), 1u);  // cached until Release
}

TEST(NaiveBestFitAllocatorTest, RecyclesAllocationObjects) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  NaiveBestFitAllocator allocator(base, platform::CPUPlace(),
                                  testing::FixedBuddyOptions(kMiB, kMiB));
  allocation::Allocation* first = allocator.Allocate(64).get();  // freed at once
  allocation::AllocationPtr again = allocator.Allocate(64);
  EXPECT_EQ(again.get(), first);
  EXPECT_EQ(again->num_decorators(), 1);
  EXPECT_EQ(again->requested_size(), 0u);
}

TEST(NaiveBestFitAllocatorTest, ReleaseOnlyForItsPlace) {
  auto base = std::make_shared<testing::RecordingAllocator>(platform::CUDAPlace(0));
  NaiveBestFitAllocator allocator(base, platform::CUDAPlace(0),
                                  testing::FixedBuddyOptions(kMiB, kMiB));
  allocator.Allocate(100).reset();
  EXPECT_EQ(allocator.Release(platform::CUDAPlace(1)), 0u);
  EXPECT_EQ(allocator.Release(platform::CPUPlace()), 0u);
  EXPECT_EQ(base->live_blocks(), 1u);
  EXPECT_EQ(allocator.Release(platform::CUDAPlace(0)), kMiB);
  EXPECT_EQ(base->live_blocks(), 0u);
}

TEST(NaiveBestFitAllocatorTest, BadAllocPropagates) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  auto limited = std::make_shared<testing::LimitedAllocator>(base, 2 * kMiB);
  NaiveBestFitAllocator allocator(limited, platform::CPUPlace(),
                                  testing::FixedBuddyOptions(kMiB, kMiB));
  allocation::AllocationPtr a = allocator.Allocate(kMiB);
  allocation::AllocationPtr b = allocator.Allocate(kMiB);
  try {
    allocator.Allocate(kMiB);
    FAIL() << "expected BadAlloc";
  } catch (const allocation::BadAlloc& e) {
    EXPECT_THAT(e.what(), HasSubstr("out of memory"));
    EXPECT_THAT(e.what(), HasSubstr("2.00 MiB is allocated by strata"));
  }
  b.reset();
  EXPECT_NO_THROW(allocator.Allocate(kMiB));  // reuses b's chunk
  EXPECT_THROW(allocator.Allocate(std::size_t{0} - 1), std::invalid_argument);
}

TEST(NaiveBestFitAllocatorTest, StatsIdentities) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  NaiveBestFitAllocator allocator(base, platform::CPUPlace(),
                                  testing::FixedBuddyOptions(kMiB, kMiB));
  std::vector<allocation::AllocationPtr> keep;
  for (int i = 0; i < 10; ++i) keep.push_back(allocator.Allocate(300 * kKiB));
  keep.push_back(allocator.Allocate(5 * kMiB));  // bypasses the pool
  for (std::size_t i = 0; i < keep.size(); i += 2) keep[i].reset();

  const allocation::MemoryStats s = testing::StatsOf(allocator);
  using allocation::kAggregate;
  EXPECT_EQ(s.segment[kAggregate].current, s.num_device_alloc - s.num_device_free);
  EXPECT_EQ(s.segment[kAggregate].current, static_cast<std::int64_t>(base->live_blocks()));
  EXPECT_EQ(s.reserved_bytes[kAggregate].current, static_cast<std::int64_t>(base->live_bytes()));
  EXPECT_EQ(s.reserved_bytes[kAggregate].current,
            static_cast<std::int64_t>(allocator.reserved_bytes()));
  EXPECT_GT(s.inactive_split[kAggregate].current, 0);
  EXPECT_LE(s.inactive_split_bytes[kAggregate].current +
                static_cast<std::int64_t>(allocator.allocated_bytes()),
            s.reserved_bytes[kAggregate].current);

  keep.clear();
  allocator.Release(platform::CPUPlace());
  const allocation::MemoryStats t = testing::StatsOf(allocator);
  EXPECT_EQ(t.segment[kAggregate].current, 0);
  EXPECT_EQ(t.num_device_alloc, t.num_device_free);
  EXPECT_EQ(t.num_device_alloc, static_cast<std::int64_t>(base->num_allocs()));
  EXPECT_EQ(t.reserved_bytes[kAggregate].allocated, t.reserved_bytes[kAggregate].freed);
  allocator.ResetAccumulatedStats();
  allocator.ResetPeakStats();
  const allocation::MemoryStats u = testing::StatsOf(allocator);
  EXPECT_EQ(u.num_device_alloc, 0);
  EXPECT_EQ(u.reserved_bytes[kAggregate].peak, 0);
}

TEST(NaiveBestFitAllocatorTest, RejectsBadOptions) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  BuddyAllocator::Options o;
  o.fraction = 2;
  o.available_bytes = [] { return kMiB; };
  EXPECT_THROW(NaiveBestFitAllocator(base, platform::CPUPlace(), o), std::invalid_argument);
}

}  // namespace
}  // namespace strata::strategies
