#include "raw/device_allocator.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "allocation/bad_alloc.h"
#include "platform/emulated_runtime.h"
#include "platform/fault_injection_runtime.h"
#include "raw/cuda_pinned_allocator.h"
#include "support/runtimes.h"
#include "support/stats.h"

namespace strata::raw {

using allocation::AllocationPtr;
using allocation::BadAlloc;
using allocation::kAggregate;
using allocation::kLargePool;
using allocation::kSmallPool;

namespace {

class DeviceAllocatorTest : public ::testing::TestWithParam<testing::RuntimeKind> {
 protected:
  void SetUp() override {
    std::string why;
    runtime_ = testing::GetRuntime(GetParam(), &why);
    if (runtime_ == nullptr) GTEST_SKIP() << why;
  }
  platform::DeviceRuntime* runtime_ = nullptr;
};

TEST_P(DeviceAllocatorTest, CountsMallocsFreesAndReservedInGranules) {
  DeviceAllocator allocator(runtime_, 0);
  {
    AllocationPtr a = allocator.Allocate(1);
    AllocationPtr b = allocator.Allocate((3u << 20) + 5);
    ASSERT_NE(a->ptr(), nullptr);
    EXPECT_EQ(a->place(), platform::CUDAPlace(0));
    EXPECT_EQ(allocator.device_mallocs(), 2);
    EXPECT_EQ(allocator.reserved_bytes(), (2 << 20) + (4 << 20));
    const allocation::MemoryStats stats = testing::StatsOf(allocator);
    EXPECT_EQ(stats.segment[kAggregate].current, 2);
    EXPECT_EQ(stats.segment[kSmallPool].current, 1);
    EXPECT_EQ(stats.segment[kLargePool].current, 1);
    EXPECT_EQ(stats.reserved_bytes[kLargePool].current, 4 << 20);
  }
  EXPECT_EQ(allocator.device_frees(), 2);
  EXPECT_EQ(allocator.reserved_bytes(), 0);
}

TEST_P(DeviceAllocatorTest, ZeroSizeMakesNoDeviceCall) {
  DeviceAllocator allocator(runtime_, 0);
  AllocationPtr a = allocator.Allocate(0);
  EXPECT_EQ(a->ptr(), nullptr);
  EXPECT_EQ(a->size(), 0u);
  a.reset();
  EXPECT_EQ(allocator.device_mallocs(), 0);
  EXPECT_EQ(allocator.device_frees(), 0);
}

TEST_P(DeviceAllocatorTest, OutOfMemoryIsBadAllocWithDeviceFigures) {
  DeviceAllocator allocator(runtime_, 0);
  std::size_t free_bytes = 0, total = 0;
  runtime_->MemInfo(0, &free_bytes, &total);
  try {
    allocator.Allocate(total * 2);
    FAIL() << "expected BadAlloc";
  } catch (const BadAlloc& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("total capacity"), std::string::npos) << m;
    EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
    EXPECT_EQ(e.requested_bytes(), total * 2);
  }
  EXPECT_EQ(allocator.reserved_bytes(), 0);
}

TEST_P(DeviceAllocatorTest, AbsurdSizeIsRejectedNotCrashed) {
  DeviceAllocator allocator(runtime_, 0);
  EXPECT_THROW(allocator.Allocate(SIZE_MAX), std::invalid_argument);
  EXPECT_THROW(DeviceAllocator(runtime_, runtime_->DeviceCount()), std::invalid_argument);
  EXPECT_THROW(DeviceAllocator(runtime_, -1), std::invalid_argument);
}

// A runtime whose allocations fail with an error other than out-of-memory (as a sticky CUDA
// error does).
class ThrowingRuntime : public platform::FaultInjectionRuntime {
 public:
  using FaultInjectionRuntime::FaultInjectionRuntime;
  void* Malloc(int, std::size_t) override { throw platform::RuntimeError("injected malloc"); }
  void* HostMalloc(std::size_t) override { throw platform::RuntimeError("injected host"); }
};

// The error reaches the caller unchanged; under LeakSanitizer (STRATA_SANITIZE=address) this
// also checks that the Allocation object taken for the call is given back.
TEST(DeviceAllocatorEmulatedTest, RuntimeErrorPropagatesWithoutLeaking) {
  platform::EmulatedRuntime emulated({.device_count = 1, .capacity_bytes = 64 << 20});
  ThrowingRuntime runtime(&emulated);
  DeviceAllocator device(&runtime, 0);
  CUDAPinnedAllocator pinned(&runtime);
  // On a fresh thread the pool's cache is empty, so the object is new'd and, if lost, nothing
  // (no stale cache slot) points to it any more: LeakSanitizer sees it.
  std::thread([&] {
    EXPECT_THROW(device.Allocate(4096), platform::RuntimeError);
    EXPECT_THROW(pinned.Allocate(4096), platform::RuntimeError);
  }).join();
  EXPECT_EQ(device.reserved_bytes(), 0);
}

INSTANTIATE_TEST_SUITE_P(Emulated, DeviceAllocatorTest,
                         ::testing::Values(testing::RuntimeKind::kEmulated));
INSTANTIATE_TEST_SUITE_P(CUDA, DeviceAllocatorTest, ::testing::Values(testing::RuntimeKind::kCuda));

TEST(DeviceAllocatorEmulatedTest, MemoryReturnsToZero) {
  platform::EmulatedRuntime runtime({.device_count = 2, .capacity_bytes = 64 << 20});
  DeviceAllocator allocator(&runtime, 1);
  std::vector<AllocationPtr> live;
  for (int i = 0; i < 10; ++i) live.push_back(allocator.Allocate(1 << 20));
  EXPECT_EQ(runtime.used_bytes(1), 20u << 20);
  EXPECT_EQ(runtime.used_bytes(0), 0u);
  live.clear();
  EXPECT_EQ(runtime.used_bytes(1), 0u);
}

}  // namespace
}  // namespace strata::raw
