// The DeviceRuntime contract for virtual memory (fixture and runtimes:
// support/runtime_conformance_fixture.h): the granularity, reserve/create/map/unmap/release/free
// as a round trip counted in MemInfo, one physical allocation mapped at two addresses and
// allocations stitched side by side, out-of-memory as an empty handle, and bad arguments. Run
// against the emulated runtime and, as CUDA/..., the CUDA one; skipped on a device without VMM.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "platform/device_runtime.h"
#include "platform/physical_memory.h"
#include "support/runtime_conformance_fixture.h"

namespace strata::platform::conformance_test {
namespace {

#define REQUIRE_VMM(g)                          \
  const std::size_t g = rt().VmmGranularity(0); \
  if (g == 0) GTEST_SKIP() << "no virtual memory management on device 0"

TEST_P(RuntimeConformanceTest, VmmGranularityIsAPowerOfTwo) {
  REQUIRE_VMM(g);
  EXPECT_EQ(g & (g - 1), 0u) << g;
  EXPECT_GE(g, 4096u);
  EXPECT_THROW(rt().VmmGranularity(rt().DeviceCount()), RuntimeError);
}

// Reserve, create, map, write, read back, unmap, release, free: the memory is counted in MemInfo
// while it exists and usable through the mapping.
TEST_P(RuntimeConformanceTest, VmmRoundTrip) {
  REQUIRE_VMM(g);
  Stream s = NewStream();
  unsigned char* host = NewHost(2 * g);
  ASSERT_NE(host, nullptr);
  std::size_t free0 = 0, total = 0;
  rt().MemInfo(0, &free0, &total);

  auto* base = static_cast<unsigned char*>(NewReservation(4 * g));
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(base) % g, 0u) << "reservation not aligned";
  PhysicalMemory mem = NewPhysical(2 * g);
  ASSERT_TRUE(mem.valid());
  std::size_t free1 = 0;
  rt().MemInfo(0, &free1, nullptr);
  EXPECT_LE(free1 + 2 * g, free0) << "physical memory not counted";

  MapTracked(base + g, 2 * g, mem, 0);
  rt().MemsetAsync(base + g, 0x5C, 2 * g, s);
  EXPECT_EQ(Mismatches(ReadBack(base + g, 2 * g, s, host), 0x5C), 0u);

  UnmapTracked(base + g, 2 * g);
  ReleaseTracked(mem);
  std::size_t free2 = 0;
  rt().MemInfo(0, &free2, nullptr);
  EXPECT_GT(free2, free1) << "physical memory not given back";
  FreeAddressTracked(base, 4 * g);
}

// Pages of one physical allocation mapped at two addresses show the same bytes; pages of two
// allocations mapped side by side form one range that a single operation covers.
TEST_P(RuntimeConformanceTest, VmmMappingsShareAndStitchPages) {
  REQUIRE_VMM(g);
  Stream s = NewStream();
  unsigned char* host = NewHost(2 * g);
  ASSERT_NE(host, nullptr);
  auto* base = static_cast<unsigned char*>(NewReservation(5 * g));
  PhysicalMemory first = NewPhysical(g);
  PhysicalMemory a = NewPhysical(g);
  PhysicalMemory b = NewPhysical(g);
  ASSERT_TRUE(first.valid() && a.valid() && b.valid());

  // a is at base + g and again at base + 3g; [base, base + 2g) is first's page then a's.
  MapTracked(base, g, first, 0);
  MapTracked(base + g, g, a, 0);
  MapTracked(base + 3 * g, g, a, 0);
  rt().MemsetAsync(base, 0x11, 2 * g, s);
  rt().MemsetAsync(base + g, 0x22, g, s);
  EXPECT_EQ(Mismatches(ReadBack(base + 3 * g, g, s, host), 0x22), 0u);
  rt().MemsetAsync(base + 3 * g, 0x33, g, s);
  EXPECT_EQ(Mismatches(ReadBack(base + g, g, s, host), 0x33), 0u);
  EXPECT_EQ(Mismatches(ReadBack(base, g, s, host), 0x11), 0u) << "the first page changed";

  // b right after the second mapping of a: [base + 3g, base + 5g) is a's page then b's.
  MapTracked(base + 4 * g, g, b, 0);
  rt().MemsetAsync(base + 3 * g, 0x44, 2 * g, s);
  EXPECT_EQ(Mismatches(ReadBack(base + 3 * g, 2 * g, s, host), 0x44), 0u);
  EXPECT_EQ(Mismatches(ReadBack(base + g, g, s, host), 0x44), 0u) << "a's page is shared";

  // Releasing a while mapped keeps its pages until the last mapping goes.
  ReleaseTracked(a);
  EXPECT_EQ(Mismatches(ReadBack(base + g, g, s, host), 0x44), 0u);
  UnmapTracked(base, g);
  UnmapTracked(base + g, g);
  EXPECT_EQ(Mismatches(ReadBack(base + 3 * g, g, s, host), 0x44), 0u);
  UnmapTracked(base + 3 * g, g);
  UnmapTracked(base + 4 * g, g);
}

TEST_P(RuntimeConformanceTest, VmmOutOfMemoryIsAnEmptyHandleAndLeavesTheRuntimeUsable) {
  REQUIRE_VMM(g);
  std::size_t total = 0;
  rt().MemInfo(0, nullptr, &total);
  const std::size_t too_much = (total / g + 1) * g;
  const PhysicalMemory none = rt().CreatePhysical(0, too_much);
  EXPECT_FALSE(none.valid()) << too_much << " bytes on a device of " << total;
  // A reservation is address space only: larger than the device is fine.
  void* va = NewReservation(too_much);
  PhysicalMemory mem = NewPhysical(g);
  ASSERT_TRUE(mem.valid());
  MapTracked(va, g, mem, 0);
  Stream s = NewStream();
  rt().MemsetAsync(va, 0x66, g, s);
  EXPECT_EQ(Mismatches(ReadBack(va, g, s), 0x66), 0u);
}

// Each bad call throws and changes nothing: the runtime stays usable.
TEST_P(RuntimeConformanceTest, VmmBadArgumentsThrow) {
  REQUIRE_VMM(g);
  EXPECT_THROW(rt().CreatePhysical(0, 0), RuntimeError);
  EXPECT_THROW(rt().CreatePhysical(0, g / 2), RuntimeError);
  EXPECT_THROW(rt().CreatePhysical(0, g + g / 2), RuntimeError);
  EXPECT_THROW(rt().ReserveAddress(0, 0), RuntimeError);
  EXPECT_THROW(rt().ReserveAddress(0, g / 2), RuntimeError);
  EXPECT_THROW(rt().CreatePhysical(rt().DeviceCount(), g), RuntimeError);

  auto* base = static_cast<unsigned char*>(NewReservation(4 * g));
  PhysicalMemory mem = NewPhysical(2 * g);
  ASSERT_TRUE(mem.valid());
  EXPECT_THROW(rt().Map(base, g / 2, mem, 0, 0), RuntimeError);      // size
  EXPECT_THROW(rt().Map(base, g, mem, g / 2, 0), RuntimeError);      // offset
  EXPECT_THROW(rt().Map(base, g, mem, g, 0), RuntimeError);          // offset: only 0, as CUDA
  EXPECT_THROW(rt().Map(base + g / 2, g, mem, 0, 0), RuntimeError);  // address

  PhysicalMemory page = NewPhysical(g);
  ASSERT_TRUE(page.valid());
  EXPECT_THROW(rt().Map(base, g, mem, 0, 0), RuntimeError);  // part of an allocation
  MapTracked(base + g, g, page, 0);
  if (GetParam().name == std::string("emulated")) {
    // Caller errors that CUDA does not always report; the emulated runtime does.
    EXPECT_THROW(rt().Map(base, 3 * g, mem, 0, 0), RuntimeError);   // larger than the memory
    EXPECT_THROW(rt().Unmap(base + 2 * g, g), RuntimeError);        // nothing mapped there
    EXPECT_THROW(rt().Map(base + g, g, page, 0, 0), RuntimeError);  // over a mapped range
    EXPECT_THROW(rt().Map(base, 2 * g, mem, 0, 0), RuntimeError);   // overlapping it
  }

  // Still usable: the valid mapping works.
  Stream s = NewStream();
  rt().MemsetAsync(base + g, 0x77, g, s);
  EXPECT_EQ(Mismatches(ReadBack(base + g, g, s), 0x77), 0u);
}

INSTANTIATE_TEST_SUITE_P(Emulated, RuntimeConformanceTest, EmulatedCase(), CaseName);
INSTANTIATE_TEST_SUITE_P(CUDA, RuntimeConformanceTest, CudaCase(), CaseName);

}  // namespace
}  // namespace strata::platform::conformance_test
