// The DeviceRuntime contract for devices and memory (fixture and runtimes:
// support/runtime_conformance_fixture.h): the current device, invalid ordinals, device memory
// against MemInfo, host (pinned) memory, copies both ways, and out-of-memory as a null that leaves
// the runtime usable. Run against the emulated runtime and, as CUDA/..., the CUDA one.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "platform/device_runtime.h"
#include "support/runtime_conformance_fixture.h"

namespace strata::platform::conformance_test {
namespace {

TEST_P(RuntimeConformanceTest, DevicesAndCurrentDevice) {
  ASSERT_GE(rt().DeviceCount(), 1);
  rt().SetDevice(0);
  EXPECT_EQ(rt().GetDevice(), 0);
  EXPECT_THROW(rt().SetDevice(rt().DeviceCount()), RuntimeError);
  EXPECT_THROW(rt().SetDevice(-1), RuntimeError);
  EXPECT_EQ(rt().GetDevice(), 0);
}

TEST_P(RuntimeConformanceTest, InvalidDeviceOrdinalThrowsAndLeavesTheRuntimeUsable) {
  const int bad = rt().DeviceCount();
  EXPECT_THROW(rt().Malloc(bad, 1024), RuntimeError);
  EXPECT_THROW(rt().CreateStream(bad), RuntimeError);
  EXPECT_THROW(rt().CreateEvent(bad), RuntimeError);
  std::size_t free_b = 0, total_b = 0;
  EXPECT_THROW(rt().MemInfo(bad, &free_b, &total_b), RuntimeError);
  // The failed calls left no error behind and did not change the current device.
  EXPECT_EQ(rt().GetDevice(), 0);
  EXPECT_NE(NewDevice(1024), nullptr);
}

TEST_P(RuntimeConformanceTest, MallocFreeAndMemInfoAreConsistent) {
  constexpr std::size_t kBytes = 64 * kMiB;
  std::size_t free0 = 0, total0 = 0;
  rt().MemInfo(0, &free0, &total0);
  ASSERT_GT(total0, 0u);
  ASSERT_LE(free0, total0);
  ASSERT_GE(free0, kBytes);

  void* p = rt().Malloc(0, kBytes);
  ASSERT_NE(p, nullptr);
  std::size_t free1 = 0, total1 = 0;
  rt().MemInfo(0, &free1, &total1);
  EXPECT_EQ(total1, total0);
  EXPECT_LE(free1 + kBytes, free0);

  // The memory is usable end to end.
  Stream s = NewStream();
  rt().MemsetAsync(p, 0x33, kBytes, s);
  EXPECT_EQ(Mismatches(ReadBack(p, kBytes, s), 0x33), 0u);

  rt().Free(0, p);
  std::size_t free2 = 0;
  rt().MemInfo(0, &free2, nullptr);
  EXPECT_GT(free2, free1);
  rt().Free(0, nullptr);  // no-op
}

TEST_P(RuntimeConformanceTest, OutOfMemoryReturnsNullAndLeavesTheRuntimeUsable) {
  EXPECT_EQ(rt().Malloc(0, 0), nullptr);
  std::size_t total = 0;
  rt().MemInfo(0, nullptr, &total);
  EXPECT_EQ(rt().Malloc(0, std::size_t{1} << 50), nullptr);  // 1 PiB
  EXPECT_EQ(rt().Malloc(0, total + kMiB), nullptr);
  void* p = NewDevice(kMiB);
  EXPECT_NE(p, nullptr);
}

TEST_P(RuntimeConformanceTest, HostMemoryIsUsable) {
  EXPECT_EQ(rt().HostMalloc(0), nullptr);
  void* p = rt().HostMalloc(1 * kMiB);
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x11, kMiB);
  EXPECT_EQ(static_cast<unsigned char*>(p)[kMiB - 1], 0x11);
  rt().HostFree(p);
  rt().HostFree(nullptr);  // no-op
}

TEST_P(RuntimeConformanceTest, HostToDeviceToHostRoundTrip) {
  constexpr std::size_t kBytes = 64 * 1024;
  Stream s = NewStream();
  unsigned char* src = NewHost(kBytes);
  ASSERT_NE(src, nullptr);
  for (std::size_t i = 0; i < kBytes; ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
  void* dev = NewDevice(kBytes);
  ASSERT_NE(dev, nullptr);
  rt().MemcpyAsync(dev, src, kBytes, s);
  std::vector<unsigned char> back = ReadBack(dev, kBytes, s);
  EXPECT_EQ(std::memcmp(back.data(), src, kBytes), 0);
}

INSTANTIATE_TEST_SUITE_P(Emulated, RuntimeConformanceTest, EmulatedCase(), CaseName);
INSTANTIATE_TEST_SUITE_P(CUDA, RuntimeConformanceTest, CudaCase(), CaseName);

}  // namespace
}  // namespace strata::platform::conformance_test
