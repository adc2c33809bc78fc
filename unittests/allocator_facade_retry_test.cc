// The retry layers of a device's chains seen through the facade: they share one set of waiters,
// so a free on one stream wakes a waiter on another, and a waiter that nobody can help gives up
// instead of sleeping its retry time. Run over the chunk pool and the virtual-memory pool.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <future>
#include <thread>

#include "allocation/bad_alloc.h"
#include "facade/allocator_facade.h"
#include "platform/emulated_runtime.h"
#include "support/facade_fixture.h"

namespace strata::facade {
namespace {

using allocation::AllocationPtr;
using platform::CUDAPlace;
using platform::Stream;

constexpr std::size_t kMiB = std::size_t{1} << 20;
// Long enough that a broken waiter is seen (it takes this long), short enough to end the test.
constexpr std::int64_t kRetryMs = 120'000;

class AllocatorFacadeRetryTest : public ::testing::TestWithParam<bool> {
 protected:
  flags::AllocatorFlags RetryFlags() const {
    flags::AllocatorFlags f = test_facade::PoolFlags(GetParam());
    f.gpu_memory_limit_mb = 64;
    f.gpu_allocator_retry_time = kRetryMs;
    return f;
  }
  platform::EmulatedRuntime runtime_{test_facade::Small()};
};

// One thread holds memory on one stream and asks for more on another: nobody else uses the
// device and nothing waits on stream work, so the BadAlloc comes at once, not after the retry
// time.
TEST_P(AllocatorFacadeRetryTest, ALoneHolderIsNotMadeToWaitForItself) {
  AllocatorFacade facade(&runtime_, RetryFlags());
  const Stream s1 = runtime_.CreateStream(0);
  const Stream s2 = runtime_.CreateStream(0);
  auto lone = std::async(std::launch::async, [&] {
    AllocationPtr held = facade.Alloc(CUDAPlace(0), 40 * kMiB, s1);
    EXPECT_THROW(facade.Alloc(CUDAPlace(0), 40 * kMiB, s2), allocation::BadAlloc);
  });
  // Broken, the thread waits the whole retry time.
  if (lone.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "the only thread using the device waited for itself";
  }
  lone.get();
  EXPECT_GE(facade.GetMemoryStats(CUDAPlace(0)).num_alloc_retries, 1);
  facade.EmptyCache(CUDAPlace(0));
  EXPECT_EQ(facade.GetMemoryStats(CUDAPlace(0)).reserved_bytes[allocation::kAggregate].current, 0);
}

// A waiter on stream s1 gets the memory a thread frees on stream s2; it does not give up while
// that thread, which could free, runs.
TEST_P(AllocatorFacadeRetryTest, AFreeOnAnotherStreamServesTheWaiter) {
  AllocatorFacade facade(&runtime_, RetryFlags());
  const Stream s1 = runtime_.CreateStream(0);
  const Stream s2 = runtime_.CreateStream(0);
  AllocationPtr held = facade.Alloc(CUDAPlace(0), 40 * kMiB, s2);
  auto waiter =
      std::async(std::launch::async, [&] { return facade.Alloc(CUDAPlace(0), 40 * kMiB, s1); });
  while (facade.GetMemoryStats(CUDAPlace(0)).num_alloc_retries < 3) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  held.reset();
  AllocationPtr got = waiter.get();  // throws BadAlloc if the waiter gave up
  EXPECT_GE(got->size(), 40 * kMiB);
  got.reset();
  facade.EmptyCache(CUDAPlace(0));
  EXPECT_EQ(facade.GetMemoryStats(CUDAPlace(0)).reserved_bytes[allocation::kAggregate].current, 0);
}

INSTANTIATE_TEST_SUITE_P(Pools, AllocatorFacadeRetryTest, ::testing::Bool(), test_facade::PoolName);

}  // namespace
}  // namespace strata::facade
