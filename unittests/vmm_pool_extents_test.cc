// The virtual-memory pool's extents (PageTable::MapExtents and the pool's use of it): physical
// allocations of several pages made at growth, on the emulated device and on a real GPU.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "allocation/bad_alloc.h"
#include "allocation/memory_snapshot.h"
#include "allocation/memory_stats.h"
#include "platform/device_runtime.h"
#include "strategies/vmm_pool.h"
#include "support/vmm_pool_fixture.h"

namespace strata::strategies {
namespace {

using allocation::Allocation;
using platform::Stream;
using vmm_test::CUDAVirtualMemoryPoolTest;
using vmm_test::ExtentOptions;
using vmm_test::kPlace;
using vmm_test::Stats;
using vmm_test::VirtualMemoryPoolTest;

// Growth to a new peak maps each run of missing pages as one physical allocation (up to the
// cap): three creates and three maps for 20 pages, not twenty. The pages then serve any block
// placed there without driver calls, and go back whole.
TEST_F(VirtualMemoryPoolTest, GrowthToANewPeakMapsEachRunAsOneExtent) {
  MakePool(ExtentOptions(8));
  const std::size_t g = pool_->page_bytes();
  Allocation* a = pool_->Allocate(20 * g - 100, Stream{});
  std::memset(a->ptr(), 0x21, a->size());
  allocation::MemoryStats s = Stats(*pool_);
  EXPECT_EQ(s.num_device_alloc, 3) << "8 + 8 + 4 pages";
  EXPECT_EQ(s.num_device_map, 3);
  EXPECT_EQ(s.segment[allocation::kAggregate].current, 3);
  EXPECT_EQ(pool_->reserved_bytes(), 20 * g);
  EXPECT_EQ(pool_->mapped_bytes(), 20 * g);
  EXPECT_EQ(runtime_.used_bytes(0), 20 * g);
  void* const addr = a->ptr();
  pool_->Free(a);
  // Other sizes land on the mapped pages: no driver call.
  Allocation* b = pool_->Allocate(5 * g, Stream{});
  Allocation* c = pool_->Allocate(11 * g, Stream{});
  EXPECT_EQ(b->ptr(), addr);
  std::memset(b->ptr(), 0x22, b->size());
  std::memset(c->ptr(), 0x23, c->size());
  EXPECT_EQ(Stats(*pool_).num_device_alloc, 3);
  EXPECT_EQ(Stats(*pool_).num_device_map, 3);
  allocation::MemorySnapshot snapshot;
  pool_->Snapshot(&snapshot);
  ASSERT_EQ(snapshot.Segments().size(), 1u) << "one run of mapped pages";
  EXPECT_EQ(snapshot.Segments()[0].mapped_bytes, 20 * g);
  pool_->Free(b);
  // The device is idle: the extent under b alone goes (one Release), those under c stay whole.
  EXPECT_EQ(pool_->Release(), 4 * g);
  pool_->Free(c);
  EXPECT_EQ(EmptyCache(), 16 * g);
  s = Stats(*pool_);
  EXPECT_EQ(s.num_device_free, 3);
  EXPECT_EQ(s.num_device_unmap, 3);
  EXPECT_EQ(pool_->mapped_bytes(), 0u);
}

// After the first free of a large block, growth maps pages one by one, except for a block that
// raises the live peak once the peak held through a slack window (a new largest input after the
// steps settled): its missing pages come as extents, while the growth leaves an eighth of the
// device free. A peak still growing, a growth near the top of the device, or a pool under a
// memory cap (from its first growth on) gets single pages.
TEST_F(VirtualMemoryPoolTest, ANewPeakAfterASteadyOneMapsExtents) {
  struct Case {
    bool settle;
    std::size_t other_pages;  // the device's memory taken beside the pool
    std::size_t limit_pages;  // 0: none
    int creates;
  };
  // The device has 128 pages; the pool 4 when the 8 more come.
  for (const Case c : {Case{false, 0, 0, 8}, Case{true, 0, 0, 1}, Case{true, 96, 0, 1},
                       Case{true, 104, 0, 8}, Case{true, 0, 16, 8}}) {
    SCOPED_TRACE(::testing::Message() << "settled " << c.settle << ", other " << c.other_pages
                                      << ", limit " << c.limit_pages);
    VirtualMemoryPool::Options o = ExtentOptions(8);
    MakePool(o);
    const std::size_t g = pool_->page_bytes();
    std::size_t free_bytes = 0, total = 0;
    runtime_.MemInfo(0, &free_bytes, &total);
    ASSERT_EQ(total, 128 * g);
    void* other = c.other_pages != 0 ? runtime_.Malloc(0, c.other_pages * g) : nullptr;
    pool_->SetMemoryLimit(c.limit_pages * g);
    pool_->Free(pool_->Allocate(4 * g, Stream{}));  // a set-up block; a large block freed
    // A window is 8 times the live peak's bytes of allocations: two of them at a peak of 4 pages.
    for (int i = 0; c.settle && i < 16; ++i) pool_->Free(pool_->Allocate(4 * g, Stream{}));
    const allocation::MemoryStats before = Stats(*pool_);
    EXPECT_EQ(before.num_device_alloc, c.limit_pages != 0 ? 4 : 1) << "one extent unless capped";
    Allocation* a = pool_->Allocate(12 * g, Stream{});  // 8 pages more than the 4 mapped
    std::memset(a->ptr(), 0x41, a->size());
    const allocation::MemoryStats after = Stats(*pool_);
    EXPECT_EQ(after.num_device_alloc - before.num_device_alloc, c.creates);
    EXPECT_EQ(after.num_device_map - before.num_device_map, c.creates);
    EXPECT_EQ(pool_->reserved_bytes(), 12 * g);
    pool_->Free(a);
    EXPECT_EQ(EmptyCache(), 12 * g);
    if (other != nullptr) runtime_.Free(0, other);
  }
}

// An extent is never stitched elsewhere page by page. When stitching is short of pages, an idle
// extent whose work is done is given back and pages are created in its stead: the pool holds
// no more than the most pages ever live.
TEST_F(VirtualMemoryPoolTest, AnIdleExtentMakesRoomWhenStitchingIsShortOfPages) {
  MakePool(ExtentOptions(4));
  const std::size_t g = pool_->page_bytes();
  Allocation* a = pool_->Allocate(4 * g, Stream{});
  Allocation* b = pool_->Allocate(4 * g, Stream{});
  EXPECT_EQ(Stats(*pool_).num_device_alloc, 2);
  pool_->Free(a);
  pool_->WaitForStreams();
  // Too big for a's hole; 8 more pages would pass the stitching threshold (12 pages live).
  Allocation* c = pool_->Allocate(8 * g, Stream{});
  std::memset(c->ptr(), 0x31, c->size());
  std::memset(b->ptr(), 0x32, b->size());
  const allocation::MemoryStats s = Stats(*pool_);
  EXPECT_EQ(s.num_device_free, 1) << "a's extent given back";
  EXPECT_EQ(s.num_device_alloc, 2 + 8) << "c's pages created one by one, stitchable later";
  EXPECT_EQ(pool_->reserved_bytes(), 12 * g);
  EXPECT_EQ(pool_->mapped_bytes(), 12 * g);
  pool_->Free(b);
  pool_->Free(c);
  EXPECT_EQ(EmptyCache(), 12 * g);
}

// ... but only once its work is done: an extent of pending work stays mapped (the pool creates
// instead), and the host never waits for it.
TEST_F(VirtualMemoryPoolTest, AnExtentOfPendingWorkStaysMapped) {
  MakePool(ExtentOptions(4));
  const std::size_t g = pool_->page_bytes();
  Allocation* a = pool_->Allocate(4 * g, Stream{});
  Allocation* b = pool_->Allocate(4 * g, Stream{});
  pool_->Free(a);
  faults_.HoldEvents(true);  // nothing looks complete
  const std::uint64_t syncs = faults_.SyncCount();
  Allocation* c = pool_->Allocate(8 * g, Stream{});
  EXPECT_EQ(Stats(*pool_).num_device_free, 0);
  EXPECT_EQ(Stats(*pool_).num_device_unmap, 0);
  EXPECT_EQ(pool_->reserved_bytes(), 16 * g);
  pool_->Free(c);
  EXPECT_EQ(pool_->Release(), 0u) << "nothing safe to release";
  EXPECT_EQ(faults_.SyncCount(), syncs) << "the host never waited";
  faults_.HoldEvents(false);
  pool_->Free(b);
  EXPECT_EQ(EmptyCache(), 16 * g);
}

// At a memory limit set after growth (a memory fraction set late) an idle extent makes room
// too; past it, a clean BadAlloc.
TEST_F(VirtualMemoryPoolTest, AtTheLimitAnIdleExtentIsGivenBackForPages) {
  MakePool(ExtentOptions(4));
  const std::size_t g = pool_->page_bytes();
  Allocation* a = pool_->Allocate(3 * g, Stream{});
  Allocation* b = pool_->Allocate(g, Stream{});
  EXPECT_EQ(Stats(*pool_).num_device_alloc, 2) << "a's extent, then b's page";
  pool_->SetMemoryLimit(5 * g);
  pool_->Free(a);
  pool_->WaitForStreams();
  Allocation* c = pool_->Allocate(4 * g, Stream{});  // after b: a's 3 pages go, 4 come
  std::memset(c->ptr(), 0x41, c->size());
  EXPECT_EQ(pool_->reserved_bytes(), 5 * g);
  EXPECT_EQ(Stats(*pool_).num_device_free, 1);
  EXPECT_THROW(pool_->Allocate(2 * g, Stream{}), allocation::BadAlloc);
  EXPECT_EQ(pool_->allocated_bytes(), 5 * g);
  pool_->Free(b);
  pool_->Free(c);
  EXPECT_EQ(EmptyCache(), 5 * g);
}

// Under a memory cap growth maps single pages: a set-up block freed and partly reused later
// lends its other pages to any range, where an extent would strand them at the cap.
TEST_F(VirtualMemoryPoolTest, UnderAMemoryCapPagesStaySingleSoThatStitchingCanLendThem) {
  VirtualMemoryPool::Options o = ExtentOptions(4);
  const std::size_t g = pool_->page_bytes();
  o.memory_limit = 5 * g;
  MakePool(o);
  Allocation* a = pool_->Allocate(3 * g, Stream{});  // set-up: pages 0-2
  Allocation* c = pool_->Allocate(g, Stream{});      // page 3
  EXPECT_EQ(Stats(*pool_).num_device_alloc, 4) << "one physical allocation per page";
  void* const start = a->ptr();
  pool_->Free(a);
  pool_->WaitForStreams();
  Allocation* a1 = pool_->Allocate(g, Stream{});
  EXPECT_EQ(a1->ptr(), start);
  // Three pages do not fit the two-page hole after a1: a range past c takes the hole's two
  // idle pages and one new page, at the cap (an extent under a would have needed three new).
  Allocation* d = pool_->Allocate(3 * g, Stream{});
  std::memset(d->ptr(), 0x5d, d->size());
  EXPECT_EQ(pool_->reserved_bytes(), 5 * g);
  EXPECT_EQ(Stats(*pool_).num_device_alloc, 5);
  pool_->Free(a1);
  pool_->Free(c);
  pool_->Free(d);
  EXPECT_EQ(EmptyCache(), 5 * g);
}

// A create or a map of an extent that fails: the first is served page by page instead, the
// second is a BadAlloc with nothing held; the pool works on.
TEST_F(VirtualMemoryPoolTest, AFailedExtentLosesNothing) {
  MakePool(ExtentOptions(8));
  const std::size_t g = pool_->page_bytes();
  faults_.FailNextCreatePhysical(1);
  Allocation* a = pool_->Allocate(4 * g, Stream{});
  EXPECT_EQ(Stats(*pool_).num_device_alloc, 4) << "one page at a time after the failure";
  faults_.FailNextMap(1);
  EXPECT_THROW(pool_->Allocate(6 * g, Stream{}), allocation::BadAlloc);
  EXPECT_EQ(pool_->reserved_bytes(), 4 * g) << "the extent whose map failed went back";
  Allocation* b = pool_->Allocate(6 * g, Stream{});
  std::memset(a->ptr(), 1, a->size());
  std::memset(b->ptr(), 2, b->size());
  EXPECT_EQ(pool_->reserved_bytes(), 10 * g);
  pool_->Free(a);
  pool_->Free(b);
  EXPECT_EQ(EmptyCache(), 10 * g);
}

// Extents on a real device: one physical allocation of several pages mapped in one call holds
// what is written through every page of it, and goes back whole.
TEST_F(CUDAVirtualMemoryPoolTest, AnExtentHoldsItsBytesOnEveryPage) {
  const Stream s = NewStream();
  VirtualMemoryPool pool(runtime_, kPlace, ExtentOptions(8));
  const std::size_t g = pool.page_bytes();
  Allocation* a = pool.Allocate(12 * g, s);
  allocation::MemoryStats stats;
  pool.CollectStats(&stats);
  EXPECT_EQ(stats.num_device_alloc, 2);
  EXPECT_EQ(stats.num_device_map, 2);
  std::vector<unsigned char> host(a->size());
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>(i / g + 1);
  runtime_->MemcpyAsync(a->ptr(), host.data(), host.size(), s);
  std::vector<unsigned char> back(a->size());
  runtime_->MemcpyAsync(back.data(), a->ptr(), back.size(), s);
  runtime_->SynchronizeStream(s);
  EXPECT_EQ(back, host);
  pool.Free(a);
  pool.WaitForStreams();
  EXPECT_EQ(pool.Release(), 12 * g);
  pool.CollectStats(&stats);
  EXPECT_EQ(stats.num_device_free, 2);
  EXPECT_EQ(stats.num_device_unmap, 2);
}

}  // namespace
}  // namespace strata::strategies
