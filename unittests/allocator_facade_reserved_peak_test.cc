// The reserved peak of a place whose streams each have a chunk pool: the pools peak at their own
// times, so the sum of their peaks overstates what the device ever held; the facade reports the
// place's exact peak (counted where every pool draws device memory).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

#include "facade/allocator_facade.h"
#include "platform/emulated_runtime.h"
#include "support/facade_fixture.h"

namespace strata::facade {
namespace {

using allocation::kAggregate;
using platform::CUDAPlace;

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

TEST(AllocatorFacadeReservedPeakTest, StreamsPeakingAtOtherTimesDoNotAddUp) {
  platform::EmulatedRuntime runtime(test_facade::Small());
  AllocatorFacade facade(&runtime, test_facade::ChunkPoolFlags());
  const platform::Stream s1 = runtime.CreateStream(0);
  const platform::Stream s2 = runtime.CreateStream(0);
  facade.Alloc(CUDAPlace(0), 64 * kMiB, s1).reset();
  facade.EmptyCache(CUDAPlace(0));  // s1's pool gives its memory back
  auto held = facade.Alloc(CUDAPlace(0), 64 * kMiB, s2);
  allocation::MemoryStats s = facade.GetMemoryStats(CUDAPlace(0));
  const std::int64_t now = s.reserved_bytes[kAggregate].current;
  EXPECT_GE(now, 64 * kMiB);
  EXPECT_LT(now, 2 * 64 * kMiB);
  // Each pool's peak is about `now`; the device never held both at once.
  EXPECT_EQ(s.reserved_bytes[kAggregate].peak, now);
  held.reset();
  facade.EmptyCache(CUDAPlace(0));
  facade.ResetPeakStats(CUDAPlace(0));
  s = facade.GetMemoryStats(CUDAPlace(0));
  EXPECT_EQ(s.reserved_bytes[kAggregate].peak, s.reserved_bytes[kAggregate].current);
  test_facade::DestroyStreams(runtime, facade, {s1, s2});
}

}  // namespace
}  // namespace strata::facade
