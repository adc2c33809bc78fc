#include "allocation/cuda_allocator.h"

#include <gtest/gtest.h>

#include <string>

#include "allocation/bad_alloc.h"
#include "platform/cuda_runtime.h"

namespace strata::allocation {
namespace {

TEST(CUDAAllocatorWithoutGpuTest, RefusesClearlyWhenNoDeviceIsUsable) {
  std::string why;
  if (platform::CudaRuntime::Available(&why)) GTEST_SKIP() << "a GPU is present";
  try {
    CUDAAllocator allocator(0);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("CUDAAllocator(0)"), std::string::npos) << e.what();
  }
}

class CudaAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!platform::CudaRuntime::Available(&why)) GTEST_SKIP() << why;
  }
};

TEST_F(CudaAllocatorTest, MallocsAndFreesOnTheDevice) {
  CUDAAllocator allocator(0);
  EXPECT_STREQ(allocator.Name(), "cuda");
  {
    AllocationPtr a = allocator.Allocate(3 << 20);
    ASSERT_NE(a->ptr(), nullptr);
    EXPECT_EQ(a->place(), platform::CUDAPlace(0));
    EXPECT_EQ(allocator.reserved_bytes(), 4 << 20);
  }
  EXPECT_EQ(allocator.device_mallocs(), 1);
  EXPECT_EQ(allocator.device_frees(), 1);
  EXPECT_EQ(allocator.reserved_bytes(), 0);
}

TEST_F(CudaAllocatorTest, OutOfMemoryIsBadAlloc) {
  CUDAAllocator allocator(0);
  std::size_t free_bytes = 0, total = 0;
  platform::CudaRuntime::Instance().MemInfo(0, &free_bytes, &total);
  EXPECT_THROW(allocator.Allocate(total + (std::size_t{1} << 30)), BadAlloc);
  EXPECT_THROW(CUDAAllocator(platform::CudaRuntime::Instance().DeviceCount()),
               std::invalid_argument);
}

}  // namespace
}  // namespace strata::allocation
