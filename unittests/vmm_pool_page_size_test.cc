// The virtual-memory pool with pages larger than the device's granularity (Options::page_bytes):
// every physical allocation is a whole page, stitching under a limit moves whole pages, and a
// page that is not a power-of-two multiple of the granularity, or larger than the device, is
// refused.
#include <gtest/gtest.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "allocation/allocation.h"
#include "allocation/memory_snapshot.h"
#include "allocation/memory_stats.h"
#include "platform/forwarding_runtime.h"
#include "support/vmm_pool_fixture.h"

namespace strata::strategies::vmm_test {
namespace {

using allocation::Allocation;
using allocation::kAggregate;

constexpr std::size_t kGranule = 2 * kMiB;  // the emulated device's granularity
constexpr std::size_t kPage = 8 * kMiB;

VirtualMemoryPool::Options BigPages(std::size_t limit = 0) {
  VirtualMemoryPool::Options o = LimitedPageOptions(limit);
  o.page_bytes = kPage;
  return o;
}

TEST_F(VirtualMemoryPoolTest, EveryPhysicalAllocationIsOneLargePage) {
  MakePool(BigPages());
  EXPECT_EQ(pool_->page_bytes(), kPage);
  const platform::Stream s = NewStream();
  std::vector<Allocation*> live;
  for (std::size_t mib : {3, 10, 1, 17, 8}) live.push_back(pool_->Allocate(mib * kMiB, s));
  const allocation::MemoryStats st = Stats(*pool_);
  ASSERT_GT(st.num_device_alloc, 0);
  EXPECT_EQ(st.reserved_bytes[kAggregate].current,
            static_cast<std::int64_t>(st.num_device_alloc * kPage));
  EXPECT_EQ(runtime_.used_bytes(0), st.num_device_alloc * kPage);
  // 3 + 10 + 17 + 8 MiB of large blocks fill 5 pages at most; the 1 MiB block has a page of the
  // small region to itself.
  EXPECT_LE(st.num_device_alloc, 6);
  for (Allocation* a : live) pool_->Free(a);
  const std::size_t held = runtime_.used_bytes(0);
  EXPECT_EQ(EmptyCache(), held) << "every page given back";
  EXPECT_EQ(runtime_.used_bytes(0), 0u);
}

// Under a limit of six pages the pool must stitch idle pages into new ranges (whole pages) to
// serve a churn of sizes whose live total stays under four pages.
TEST_F(VirtualMemoryPoolTest, LargePagesAreStitchedUnderALimit) {
  MakePool(BigPages(6 * kPage));
  const platform::Stream s = NewStream();
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::size_t> size(kMiB, 12 * kMiB);
  std::vector<Allocation*> live;
  std::size_t live_bytes = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::size_t n = size(rng) & ~std::size_t{511};
    while (live_bytes + n > 3 * kPage) {
      const std::size_t k = rng() % live.size();
      live_bytes -= live[k]->size();
      pool_->Free(live[k]);
      live[k] = live.back();
      live.pop_back();
    }
    Allocation* a = pool_->Allocate(n, s);
    live.push_back(a);
    live_bytes += a->size();
    ASSERT_LE(runtime_.used_bytes(0), 6 * kPage) << "at operation " << i;
  }
  const allocation::MemoryStats st = Stats(*pool_);
  EXPECT_GT(st.num_device_map, st.num_device_alloc) << "pages were stitched";
  EXPECT_EQ(runtime_.used_bytes(0) % kPage, 0u);
  for (Allocation* a : live) pool_->Free(a);
  EmptyCache();
  EXPECT_EQ(runtime_.used_bytes(0), 0u);
}

// Whether `a`'s bytes lie in a mapped segment of the pool's snapshot.
bool Mapped(const VirtualMemoryPool& pool, const Allocation* a) {
  allocation::MemorySnapshot snapshot;
  pool.Snapshot(&snapshot);
  const auto begin = reinterpret_cast<std::uintptr_t>(a->ptr());
  for (const allocation::SnapshotSegment& seg : snapshot.Segments()) {
    if (seg.address <= begin && begin + a->size() <= seg.address + seg.size) return true;
  }
  return false;
}

// CUDA aligns a reservation to the granularity only: a reservation one granule past a multiple of
// the large page, so that pages are not aligned to their own size in absolute addresses.
class OffsetReservations : public platform::ForwardingRuntime {
 public:
  explicit OffsetReservations(platform::DeviceRuntime* base)
      : ForwardingRuntime(base, "OffsetReservations") {}
  void* ReserveAddress(int device, std::size_t size) override {
    raw_size_ = size + 2 * kPage;
    raw_ = static_cast<char*>(base()->ReserveAddress(device, raw_size_));
    const auto at = reinterpret_cast<std::uintptr_t>(raw_);
    return raw_ + ((kPage - at % kPage) % kPage) + kGranule;
  }
  void FreeAddress(void*, std::size_t) override { base()->FreeAddress(raw_, raw_size_); }

 private:
  char* raw_ = nullptr;
  std::size_t raw_size_ = 0;
};

// A held free block split inside a page counts both halves on that page, wherever the
// reservation starts. (Judging "inside a page" by the absolute address, with a base not aligned
// to the page, missed the count: the page went idle and was unmapped under a live block.)
TEST_F(VirtualMemoryPoolTest, ASplitInsideALargePageCountsBothHalvesWhateverTheBase) {
  OffsetReservations offset(&faults_);
  pool_ = std::make_unique<VirtualMemoryPool>(&offset, kPlace, BigPages());
  const platform::Stream s = NewStream();
  Allocation* a = pool_->Allocate(7 * kMiB + kMiB / 2, s);  // the large region's first page
  ASSERT_NE(reinterpret_cast<std::uintptr_t>(a->ptr()) % kPage, 0u) << "the base is offset";
  Allocation* next = pool_->Allocate(2 * kMiB, s);  // after it: `a` will not merge
  pool_->Free(a);
  Allocation* other = pool_->Allocate(4096, s);  // files `a`: a held free block
  // Carved from it, cut 6 MiB into the page (an address that is a multiple of 8 MiB).
  Allocation* b = pool_->Allocate(6 * kMiB, s);
  Allocation* c = pool_->Allocate(kMiB + kMiB / 2, s);  // the rest of `a`, on the same page
  pool_->Free(b);
  pool_->Free(next);
  EmptyCache();  // b's and next's holds go: c still touches the page
  EXPECT_TRUE(Mapped(*pool_, c)) << "a page of a live block was unmapped";
  for (Allocation* x : {c, other}) pool_->Free(x);
  EmptyCache();
  EXPECT_EQ(runtime_.used_bytes(0), 0u) << "every page given back";
  pool_.reset();
}

TEST_F(VirtualMemoryPoolTest, APageThatIsNotAPowerOfTwoMultipleOfTheGranularityIsRefused) {
  for (std::size_t bytes : {kGranule / 2, 3 * kGranule, 6 * kGranule, kGranule + 512}) {
    VirtualMemoryPool::Options o = PageOptions();
    o.page_bytes = bytes;
    try {
      VirtualMemoryPool pool(&runtime_, kPlace, o);
      ADD_FAILURE() << bytes << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("page_bytes"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::to_string(bytes)), std::string::npos) << e.what();
    }
  }
  VirtualMemoryPool::Options o = PageOptions();
  o.page_bytes = kGranule;  // the granularity itself is a page
  EXPECT_NO_THROW(VirtualMemoryPool(&runtime_, kPlace, o));
}

TEST_F(VirtualMemoryPoolTest, APageLargerThanTheDeviceIsRefused) {
  std::size_t free_bytes = 0, total = 0;
  runtime_.MemInfo(0, &free_bytes, &total);
  VirtualMemoryPool::Options o = PageOptions();
  o.page_bytes = std::bit_ceil(total + 1);
  try {
    VirtualMemoryPool pool(&runtime_, kPlace, o);
    ADD_FAILURE() << o.page_bytes << " was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("larger than"), std::string::npos) << e.what();
  }
  o.page_bytes = std::bit_floor(total);  // the largest page the device holds
  EXPECT_NO_THROW(VirtualMemoryPool(&runtime_, kPlace, o));
}

}  // namespace
}  // namespace strata::strategies::vmm_test
