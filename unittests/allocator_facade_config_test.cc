// The facade's configuration: the process-wide instance reads the environment, the memory limit
// is enforced before the device is asked, the per-process memory fraction caps the device and can
// change at run time, and the host pools refill modestly under their fraction of the host's memory.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "allocation/bad_alloc.h"
#include "facade/allocator_facade.h"
#include "platform/emulated_runtime.h"
#include "support/facade_fixture.h"

namespace strata::facade::test_facade {
namespace {

// The process-wide facade reads FLAGS_<name> and STRATA_ALLOC_CONF even when the program never
// parsed a command line. Run in a child process: Instance() is built once per process.
TEST(AllocatorFacadeTest, InstanceReadsTheEnvironment) {
  EXPECT_EXIT(
      {
        setenv("FLAGS_gpu_memory_limit_mb", "123", 1);
        setenv("STRATA_ALLOC_CONF", "max_split_size_mb:64", 1);
        const flags::AllocatorFlags& f = AllocatorFacade::Instance().flags();
        std::exit(f.gpu_memory_limit_mb == 123 && f.max_split_size_mb == 64 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(AllocatorFacadeTest, MemoryLimitIsEnforcedBeforeTheDevice) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFlags f = Flags();
  f.gpu_memory_limit_mb = 16;
  AllocatorFacade facade(&runtime, f);
  AllocationPtr a = facade.Alloc(CUDAPlace(0), std::size_t{10} << 20);
  const auto mallocs = runtime.malloc_count();
  try {
    facade.Alloc(CUDAPlace(0), std::size_t{10} << 20);
    FAIL();
  } catch (const allocation::BadAlloc& e) {
    EXPECT_NE(std::string(e.what()).find("gpu_memory_limit_mb"), std::string::npos) << e.what();
  }
  EXPECT_EQ(runtime.malloc_count(), mallocs);
}

// set_per_process_memory_fraction: a cap on the device, lowered and raised at run time, under
// both device pools; the flag's lower limit still holds.
TEST(AllocatorFacadeTest, MemoryFractionCapsTheDeviceAndCanChange) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  for (bool vmm : {false, true}) {
    SCOPED_TRACE(vmm ? "virtual memory pool" : "per-stream pools");
    platform::EmulatedRuntime runtime(Small());  // 1 GiB
    AllocatorFlags f = Flags();
    f.use_virtual_memory_auto_growth = vmm;
    f.gpu_allocator_retry_time = 0;
    AllocatorFacade facade(&runtime, f);
    const platform::Place gpu = CUDAPlace(0);
    facade.SetMemoryFraction(gpu, 0.25);
    AllocationPtr a = facade.Alloc(gpu, 200 * kMiB);
    try {
      facade.Alloc(gpu, 100 * kMiB);
      FAIL() << "300 MiB fit under a quarter of 1 GiB";
    } catch (const allocation::BadAlloc& e) {
      EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
    }
    facade.SetMemoryFraction(gpu, 0.5);
    AllocationPtr b = facade.Alloc(gpu, 100 * kMiB);
    facade.SetMemoryFraction(gpu, 0.0);
    EXPECT_THROW(facade.Alloc(gpu, 64 * kMiB), allocation::BadAlloc) << "fraction 0: nothing";
    a.reset();
    b.reset();
    facade.SetMemoryFraction(gpu, 1.0);
    AllocationPtr c = facade.Alloc(gpu, 600 * kMiB);
    c.reset();
    EXPECT_THROW(facade.SetMemoryFraction(gpu, -0.1), std::invalid_argument);
    EXPECT_THROW(facade.SetMemoryFraction(gpu, 1.5), std::invalid_argument);
    EXPECT_THROW(facade.SetMemoryFraction(gpu, std::nan("")), std::invalid_argument);
    EXPECT_THROW(facade.SetMemoryFraction(CPUPlace(), 0.5), std::invalid_argument);
    facade.EmptyCache(gpu);
  }
  // The flag's limit is lower than the fraction's: the flag's holds.
  platform::EmulatedRuntime runtime(Small());
  AllocatorFlags f = Flags();
  f.gpu_memory_limit_mb = 64;
  f.gpu_allocator_retry_time = 0;
  AllocatorFacade facade(&runtime, f);
  facade.SetMemoryFraction(CUDAPlace(0), 0.5);
  EXPECT_THROW(facade.Alloc(CUDAPlace(0), 100 * kMiB), allocation::BadAlloc);
}

// virtual_memory_page_mb: physical allocations of that size; one smaller than the device's
// granularity is refused with both figures, and the facade keeps serving the host.
TEST(AllocatorFacadeTest, VirtualMemoryPageSizeComesFromTheFlag) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  platform::EmulatedRuntime runtime(Small());  // granularity 2 MiB
  AllocatorFlags f = Flags();
  f.virtual_memory_page_mb = 16;
  {
    AllocatorFacade facade(&runtime, f);
    AllocationPtr a = facade.Alloc(CUDAPlace(0), 3 * kMiB);
    EXPECT_EQ(runtime.used_bytes(0), 16 * kMiB);
  }
  f.virtual_memory_page_mb = 1;
  AllocatorFacade facade(&runtime, f);
  try {
    facade.Alloc(CUDAPlace(0), kMiB);
    FAIL() << "1 MB pages on a device of 2 MB granularity";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("virtual_memory_page_mb=1"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("(2 MB)"), std::string::npos) << e.what();
  }
  EXPECT_NE(facade.Alloc(CPUPlace(), 64), nullptr);
}

// virtual_memory_stitch_slack_permille: how far physical memory may pass the live peak before
// idle pages are remapped instead of more created. Forty blocks of ten pages make a peak of 400
// pages; every other one is freed, leaving holes of ten mapped pages; a block of twelve fits in
// none, so it needs twelve pages where nothing is mapped. With a slack of 0 (and its two pages)
// twelve more would pass the peak: twelve idle pages are remapped. With the default 31 (12.4
// pages of a peak of 400) they are created.
TEST(AllocatorFacadeTest, StitchingSlackComesFromTheFlag) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  constexpr std::size_t kPage = 2 * kMiB;  // the emulated device's granularity
  for (const std::uint64_t slack : {std::uint64_t{0}, std::uint64_t{31}}) {
    platform::EmulatedRuntime runtime(Small());  // 1 GiB
    AllocatorFlags f = Flags();
    f.virtual_memory_stitch_slack_permille = slack;
    f.virtual_memory_extent_mb = 0;  // single pages, which stitching can lend
    AllocatorFacade facade(&runtime, f);
    std::vector<AllocationPtr> blocks;
    for (int i = 0; i < 40; ++i) blocks.push_back(facade.Alloc(CUDAPlace(0), 10 * kPage));
    ASSERT_EQ(runtime.used_bytes(0), 400 * kPage);
    for (std::size_t i = 0; i < blocks.size(); i += 2) blocks[i].reset();
    AllocationPtr wider = facade.Alloc(CUDAPlace(0), 12 * kPage);
    EXPECT_EQ(runtime.used_bytes(0), (slack == 0 ? 400 : 412) * kPage) << "slack " << slack;
  }
}

// Host pools refill modestly and hold at most their fraction of the host's memory: one small
// pinned allocation does not page-lock half the machine.
TEST(AllocatorFacadeTest, HostPoolsRefillModestlyUnderTheirFraction) {
  const std::size_t host = static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) *
                           static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  platform::EmulatedRuntime runtime(Small());
  AllocatorFlags f = Flags(AllocatorStrategy::kAutoGrowth);
  f.gpu_allocator_retry_time = 0;
  {
    AllocatorFacade facade(&runtime, f);
    AllocationPtr p = facade.Alloc(platform::CUDAPinnedPlace(), 1000);
    AllocationPtr c = facade.Alloc(CPUPlace(), 1000);
    const auto pinned =
        facade.GetMemoryStats(platform::CUDAPinnedPlace()).reserved_bytes[kAggregate].current;
    const auto cpu = facade.GetMemoryStats(CPUPlace()).reserved_bytes[kAggregate].current;
    EXPECT_LE(static_cast<double>(pinned), 0.5 * static_cast<double>(host) / 256 + 4096);
    EXPECT_LE(static_cast<std::size_t>(cpu), std::size_t{500} << 20);
    EXPECT_GT(pinned, 0);
    EXPECT_GT(cpu, 0);
  }
  // The fraction is a cap on what the pool holds.
  f.fraction_of_cuda_pinned_memory_to_use = 64.0 * (1 << 20) / static_cast<double>(host);
  AllocatorFacade facade(&runtime, f);
  AllocationPtr a = facade.Alloc(platform::CUDAPinnedPlace(), 40 << 20);
  try {
    facade.Alloc(platform::CUDAPinnedPlace(), 40 << 20);
    FAIL() << "80 MiB pinned under a 64 MiB cap";
  } catch (const allocation::BadAlloc& e) {
    EXPECT_NE(std::string(e.what()).find("fraction_of_cuda_pinned_memory_to_use"),
              std::string::npos)
        << e.what();
  }
}

TEST(AllocatorFacadeTest, AHostFractionTooSmallForAByteRefusesEverything) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFlags f = Flags(AllocatorStrategy::kAutoGrowth);
  f.gpu_allocator_retry_time = 0;
  f.fraction_of_cpu_memory_to_use = 1e-15;  // under one byte of any host: a cap, not "no cap"
  f.fraction_of_cuda_pinned_memory_to_use = 1e-15;
  AllocatorFacade facade(&runtime, f);
  EXPECT_THROW(facade.Alloc(CPUPlace(), 1 << 20), allocation::BadAlloc);
  EXPECT_THROW(facade.Alloc(platform::CUDAPinnedPlace(), 1 << 20), allocation::BadAlloc);
  EXPECT_EQ(facade.GetMemoryStats(CPUPlace()).reserved_bytes[kAggregate].current, 0);
}

TEST(AllocatorFacadeTest, PlacesThatDoNotExistAreRefused) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, Flags(AllocatorStrategy::kAutoGrowth));
  AllocationPtr cpu = facade.Alloc(CPUPlace(), 64);  // the host fast path is set up
  using platform::Place;
  for (const Place& bad :
       {Place(static_cast<platform::PlaceType>(7), 0), Place(platform::PlaceType::kCPU, 3),
        Place(platform::PlaceType::kCUDAPinned, 5)}) {
    EXPECT_THROW(facade.Alloc(bad, 64), std::invalid_argument) << bad.ToString();
    EXPECT_THROW(facade.GetMemoryStats(bad), std::invalid_argument) << bad.ToString();
  }
  EXPECT_EQ(runtime.used_bytes(0), 0u);  // nothing was taken from the device for them
  EXPECT_GT(facade.GetMemoryStats(CPUPlace()).allocated_bytes[kAggregate].current, 0);
}

}  // namespace
}  // namespace strata::facade::test_facade
