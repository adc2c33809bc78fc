// CUDARuntime specifics. The shared DeviceRuntime contract runs against it in the
// runtime_conformance_*_test.cc files. Suites named CUDA* need a GPU (labelled gpu) and skip with
// the reason from Available() without one; RuntimeAvailabilityTest runs everywhere and checks that
// Available() matches what the runtime does.
#include "platform/cuda_runtime.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "support/error_of.h"

namespace strata::platform {
namespace {

using testing::ErrorOf;

TEST(RuntimeAvailabilityTest, AvailableMatchesBehaviour) {
  std::string why = "untouched";
  const bool available = CUDARuntime::Available(&why);
  std::string again;
  EXPECT_EQ(CUDARuntime::Available(&again), available);  // stable
  EXPECT_EQ(CUDARuntime::Available(), available);
  CUDARuntime& rt = CUDARuntime::Instance();  // never crashes
  EXPECT_EQ(&rt, &CUDARuntime::Instance());
  EXPECT_STREQ(rt.Name(), "cuda");
  CUDARuntime local;  // constructing one is always safe too
  EXPECT_EQ(local.SyncCount(), 0u);

  if (available) {
    EXPECT_EQ(why, "untouched");
    EXPECT_GE(rt.DeviceCount(), 1);
    void* p = rt.Malloc(0, 1 << 20);
    EXPECT_NE(p, nullptr);
    rt.Free(0, p);
    return;
  }
  EXPECT_EQ(why, again);
#if STRATA_WITH_CUDA
  EXPECT_EQ(why.rfind("no CUDA device: ", 0), 0u) << why;
  EXPECT_GT(why.size(), std::string("no CUDA device: ").size()) << why;
  // Every CUDA call fails with the CUDA error that made the runtime unavailable.
  const std::string m = ErrorOf<RuntimeError>([&] { rt.Malloc(0, 1024); });
  EXPECT_TRUE(std::regex_search(m, std::regex("cudaError[A-Za-z]+"))) << m;
#else
  EXPECT_EQ(why, "built without CUDA");
  const std::string m = ErrorOf<RuntimeError>([&] { rt.Malloc(0, 1024); });
  EXPECT_EQ(m, "strata was built without CUDA");
#endif
  EXPECT_THROW(rt.DeviceCount(), RuntimeError);
  EXPECT_THROW(rt.CreateStream(0), RuntimeError);
  EXPECT_THROW(rt.CreateEvent(0), RuntimeError);
  EXPECT_THROW(rt.SynchronizeDevice(0), RuntimeError);
  EXPECT_THROW(rt.HostMalloc(64), RuntimeError);
  EXPECT_THROW(local.MemInfo(0, nullptr, nullptr), RuntimeError);
  // Virtual memory and stream waits too (with CUDA: the driver cannot be reached).
  EXPECT_THROW(rt.VmmGranularity(0), RuntimeError);
  EXPECT_THROW(rt.ReserveAddress(0, std::size_t{2} << 20), RuntimeError);
  EXPECT_THROW(rt.CreatePhysical(0, std::size_t{2} << 20), RuntimeError);
  EXPECT_THROW(rt.StreamWaitEvent(Stream{}, Event{}), RuntimeError);
}

class CUDARuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!CUDARuntime::Available(&why)) GTEST_SKIP() << why;
    rt_.SetDevice(0);
  }
  // The runtime still works after an error (the error was cleared, nothing became sticky).
  void ExpectUsable() {
    void* p = rt_.Malloc(0, 1 << 20);
    EXPECT_NE(p, nullptr);
    rt_.Free(0, p);
    rt_.SynchronizeDevice(0);
  }
  CUDARuntime& rt_ = CUDARuntime::Instance();
};

TEST_F(CUDARuntimeTest, FreeOfAnInvalidPointerNamesTheCallAndTheCudaError) {
  int local = 0;
  const std::string m = ErrorOf<RuntimeError>([&] { rt_.Free(0, &local); });
  EXPECT_NE(m.find("cudaFree("), std::string::npos) << m;
  EXPECT_TRUE(std::regex_search(m, std::regex("cudaError[A-Za-z]+: \\S"))) << m;
  ExpectUsable();
}

TEST_F(CUDARuntimeTest, InvalidDeviceOrdinalNamesTheCudaError) {
  const int bad = rt_.DeviceCount();
  std::string m = ErrorOf<RuntimeError>([&] { rt_.SetDevice(bad); });
  EXPECT_NE(m.find("cudaErrorInvalidDevice"), std::string::npos) << m;
  EXPECT_NE(m.find("cudaSetDevice(" + std::to_string(bad) + ")"), std::string::npos) << m;
  m = ErrorOf<RuntimeError>([&] { rt_.Malloc(bad, 1024); });
  EXPECT_NE(m.find("cudaErrorInvalidDevice"), std::string::npos) << m;
  EXPECT_EQ(rt_.GetDevice(), 0);
  ExpectUsable();
}

// (Not memset/memcpy on a bogus pointer: with HMM the GPU may legally write host stack memory,
// and a bad device address is reported asynchronously as a sticky error that kills the context.)
TEST_F(CUDARuntimeTest, HostFreeOfAnInvalidPointerNamesTheCallAndTheCudaError) {
  int local = 0;
  const std::string m = ErrorOf<RuntimeError>([&] { rt_.HostFree(&local); });
  EXPECT_NE(m.find("cudaFreeHost("), std::string::npos) << m;
  EXPECT_TRUE(std::regex_search(m, std::regex("cudaError[A-Za-z]+: \\S"))) << m;
  ExpectUsable();
}

TEST_F(CUDARuntimeTest, DestroyingTheDefaultStreamIsRejected) {
  EXPECT_THROW(rt_.DestroyStream(Stream{}), RuntimeError);
  ExpectUsable();
}

TEST_F(CUDARuntimeTest, OutOfMemoryIsNotAnError) {
  EXPECT_EQ(rt_.Malloc(0, std::size_t{1} << 50), nullptr);
  ExpectUsable();
}

TEST_F(CUDARuntimeTest, VmmGranularityIsTheDriversMinimum) {
  const std::size_t g = rt_.VmmGranularity(0);
  if (g == 0) GTEST_SKIP() << "device 0 has no virtual memory management";
  EXPECT_EQ(g % 4096, 0u) << g;         // 2 MiB on H100
  EXPECT_EQ(rt_.VmmGranularity(0), g);  // cached, stable
  const std::string m = ErrorOf<RuntimeError>([&] { rt_.VmmGranularity(rt_.DeviceCount()); });
  EXPECT_NE(m.find("cuDeviceGet("), std::string::npos) << m;
  EXPECT_NE(m.find("CUDA_ERROR_"), std::string::npos) << m;
}

// Driver errors name the call and the CUresult; the runtime stays usable.
TEST_F(CUDARuntimeTest, VmmDriverErrorsNameTheCallAndTheError) {
  const std::size_t g = rt_.VmmGranularity(0);
  if (g == 0) GTEST_SKIP() << "device 0 has no virtual memory management";
  void* va = rt_.ReserveAddress(0, 2 * g);
  const PhysicalMemory mem = rt_.CreatePhysical(0, g);
  ASSERT_TRUE(mem.valid());
  // A reservation no device can back: the driver refuses it.
  std::string m =
      ErrorOf<RuntimeError>([&] { rt_.ReserveAddress(0, (std::size_t{1} << 62) / g * g); });
  EXPECT_NE(m.find("cuMemAddressReserve("), std::string::npos) << m;
  EXPECT_TRUE(std::regex_search(m, std::regex("CUDA_ERROR_[A-Z_]+: \\S"))) << m;
  m = ErrorOf<RuntimeError>([&] { rt_.Map(va, g, mem, g, 0); });  // checked before the driver
  EXPECT_NE(m.find("the offset must be 0"), std::string::npos) << m;
  m = ErrorOf<RuntimeError>([&] { rt_.CreatePhysical(0, g / 2); });  // checked before the driver
  EXPECT_NE(m.find("is not a non-zero multiple of the granularity"), std::string::npos) << m;
  rt_.Map(va, g, mem, 0, 0);
  rt_.Unmap(va, g);
  rt_.ReleasePhysical(mem);
  rt_.FreeAddress(va, 2 * g);
  ExpectUsable();
}

// The driver calls run in the primary context, so memory mapped by the driver API is usable by
// the runtime API from a thread that never made a context current.
TEST_F(CUDARuntimeTest, VmmWorksFromAFreshThread) {
  const std::size_t g = rt_.VmmGranularity(0);
  if (g == 0) GTEST_SKIP() << "device 0 has no virtual memory management";
  std::string error;
  std::vector<unsigned char> back(g, 0);
  std::thread t([&] {
    try {
      void* va = rt_.ReserveAddress(0, g);
      const PhysicalMemory mem = rt_.CreatePhysical(0, g);
      if (!mem.valid()) throw RuntimeError("out of memory");
      rt_.Map(va, g, mem, 0, 0);
      rt_.MemsetAsync(va, 0x6B, g, Stream{});
      rt_.MemcpyAsync(back.data(), va, g, Stream{});
      rt_.SynchronizeDevice(0);
      rt_.Unmap(va, g);
      rt_.ReleasePhysical(mem);
      rt_.FreeAddress(va, g);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  t.join();
  EXPECT_EQ(error, "");
  std::size_t mismatches = 0;
  for (unsigned char c : back) mismatches += c != 0x6B;
  EXPECT_EQ(mismatches, 0u);
}

TEST_F(CUDARuntimeTest, MallocOnTheCurrentDeviceKeepsIt) {
  rt_.SetDevice(0);
  void* p = rt_.Malloc(0, 4096);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(rt_.GetDevice(), 0);
  rt_.Free(0, p);
}

}  // namespace
}  // namespace strata::platform
