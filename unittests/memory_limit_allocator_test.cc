// MemoryLimitAllocator alone, over a recording allocator: what it counts against the limit, and
// that a refusal (its own or the device's) counts nothing.
#include "layers/memory_limit_allocator.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>

#include "allocation/bad_alloc.h"
#include "platform/place.h"
#include "support/test_allocators.h"

namespace strata::layers {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

class MemoryLimitAllocatorTest : public ::testing::Test {
 protected:
  std::shared_ptr<testing::RecordingAllocator> device_ =
      std::make_shared<testing::RecordingAllocator>(platform::CUDAPlace(0));
  MemoryLimitAllocator limit_{device_, platform::CUDAPlace(0), 8 * kMiB};
};

TEST_F(MemoryLimitAllocatorTest, CountsWholeDevicePages) {
  auto a = limit_.Allocate(3 * kMiB + 1);
  auto b = limit_.Allocate(1 * kMiB);
  EXPECT_EQ(limit_.reserved_bytes(), 6 * kMiB);  // the limit counts whole 2 MiB pages
  a.reset();
  EXPECT_EQ(limit_.reserved_bytes(), 2 * kMiB);
}

TEST_F(MemoryLimitAllocatorTest, ARefusalCountsNothing) {
  auto a = limit_.Allocate(6 * kMiB);
  EXPECT_THROW(limit_.Allocate(4 * kMiB), allocation::BadAlloc);  // the limit refuses
  device_->FailNext(1);
  EXPECT_THROW(limit_.Allocate(1 * kMiB), allocation::BadAlloc);  // the device refuses
  EXPECT_EQ(limit_.reserved_bytes(), 6 * kMiB);
  EXPECT_EQ(device_->live_blocks(), 1u);
}

}  // namespace
}  // namespace strata::layers
