// The virtual-memory pool's placement and stitching (fixtures: support/vmm_pool_fixture.h): pages
// mapped on demand and given back, idle pages stitched into a new range before more memory is
// created (and found again after many cycles), never one physical page twice in a range, a mapped
// free block preferred to a best fit that needs mapping, quick reuse of a freed block (per stream),
// and the failures (device without VMM, bad options, failed creates and maps, limits, bad frees)
// that leave the pool whole. CUDAVirtualMemoryPoolTest stitches pages on a real GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "allocation/bad_alloc.h"
#include "allocation/memory_stats.h"
#include "platform/emulated_runtime.h"
#include "platform/fault_injection_runtime.h"
#include "strategies/vmm_pool.h"
#include "support/vmm_pool_fixture.h"

namespace strata::strategies::vmm_test {
namespace {

using allocation::Allocation;
using platform::Stream;

TEST_F(VirtualMemoryPoolTest, RefusesADeviceWithoutVirtualMemoryAndBadOptions) {
  EXPECT_THROW(VirtualMemoryPool(nullptr, kPlace, {}), std::invalid_argument);
  VirtualMemoryPool::Options o = PageOptions();
  o.alignment = 384;
  EXPECT_THROW(VirtualMemoryPool(&runtime_, kPlace, o), std::invalid_argument);
}

TEST_F(VirtualMemoryPoolTest, MapsPagesOnDemandAndGivesThemBack) {
  const std::size_t g = pool_->page_bytes();
  Allocation* a = pool_->Allocate(3 * kMiB, Stream{});
  std::memset(a->ptr(), 1, a->size());
  EXPECT_EQ(pool_->mapped_bytes(), 2 * g);
  EXPECT_EQ(pool_->reserved_bytes(), 2 * g);
  EXPECT_EQ(runtime_.used_bytes(0), 2 * g);
  // Small blocks share a page, of their own region: none lands between large blocks.
  Allocation* b = pool_->Allocate(1000, Stream{});
  Allocation* c = pool_->Allocate(1000, Stream{});
  EXPECT_EQ(pool_->reserved_bytes(), 3 * g);
  const auto distance = [](const Allocation* x, const Allocation* y) {
    return static_cast<std::size_t>(
        std::abs(static_cast<const char*>(x->ptr()) - static_cast<const char*>(y->ptr())));
  };
  EXPECT_LT(distance(b, c), g);
  EXPECT_GE(distance(a, b), 2 * g);
  pool_->Free(a);
  pool_->Free(b);
  pool_->Free(c);
  EXPECT_EQ(pool_->allocated_bytes(), 0u);
  EXPECT_EQ(EmptyCache(), 3 * g);
  EXPECT_EQ(pool_->reserved_bytes(), 0u);
  EXPECT_EQ(runtime_.used_bytes(0), 0u);
  const allocation::MemoryStats s = Stats(*pool_);
  EXPECT_EQ(s.num_device_alloc, s.num_device_free);
  EXPECT_EQ(s.segment[allocation::kAggregate].current, 0);
  EXPECT_EQ(s.reserved_bytes[allocation::kAggregate].current, 0);
  EXPECT_EQ(s.num_device_map, s.num_device_unmap);
  EXPECT_EQ(faults_.SyncCount(), 1u);  // EmptyCache's wait for the stream; nothing else
}

// Holes between live blocks cannot take a larger block; their pages can. They stay mapped
// where they were too, so either range takes them back later without driver calls.
TEST_F(VirtualMemoryPoolTest, StitchesIdlePagesIntoANewRangeBeforeCreatingMore) {
  const std::size_t g = pool_->page_bytes();
  std::vector<Allocation*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(pool_->Allocate(4 * g, Stream{}));
  const std::size_t peak = pool_->reserved_bytes();
  EXPECT_EQ(peak, 32 * g);
  // Free every other block: 16 pages idle in four holes of 4 pages.
  for (int i = 0; i < 8; i += 2) pool_->Free(blocks[i]);
  pool_->WaitForStreams();  // their work is done (the fences are recorded and complete)
  const allocation::MemoryStats before = Stats(*pool_);
  Allocation* big = pool_->Allocate(16 * g, Stream{});
  void* const big_addr = big->ptr();
  std::memset(big->ptr(), 7, big->size());
  EXPECT_EQ(Stats(*pool_).num_device_alloc, before.num_device_alloc) << "no new physical memory";
  EXPECT_EQ(pool_->reserved_bytes(), peak);
  EXPECT_EQ(Stats(*pool_).num_device_map, before.num_device_map + 16);
  EXPECT_EQ(Stats(*pool_).num_device_unmap, 0) << "the holes keep their mappings";
  EXPECT_EQ(pool_->mapped_bytes(), 48 * g);
  // Steady state: the holes and the big block take turns, with no driver call.
  const allocation::MemoryStats stitched = Stats(*pool_);
  for (int round = 0; round < 3; ++round) {
    pool_->Free(big);
    std::vector<Allocation*> holes;
    for (int i = 0; i < 4; ++i) {
      holes.push_back(pool_->Allocate(4 * g, Stream{}));
      std::memset(holes.back()->ptr(), 0x40 + i, holes.back()->size());
    }
    for (int i = 0; i < 4; ++i) {
      const auto* bytes = static_cast<const unsigned char*>(holes[i]->ptr());
      EXPECT_EQ(bytes[0], 0x40 + i);
      EXPECT_EQ(bytes[holes[i]->size() - 1], 0x40 + i);
      pool_->Free(holes[i]);
    }
    big = pool_->Allocate(16 * g, Stream{});
    EXPECT_EQ(big->ptr(), big_addr);
    std::memset(big->ptr(), 7, big->size());
  }
  EXPECT_EQ(Stats(*pool_).num_device_map, stitched.num_device_map);
  EXPECT_EQ(Stats(*pool_).num_device_unmap, stitched.num_device_unmap);
  EXPECT_EQ(pool_->reserved_bytes(), peak);
  for (int i = 1; i < 8; i += 2) {
    // The live blocks kept their bytes.
    std::memset(blocks[i]->ptr(), i, blocks[i]->size());
    pool_->Free(blocks[i]);
  }
  pool_->Free(big);
  EXPECT_EQ(EmptyCache(), peak);
  const allocation::MemoryStats s = Stats(*pool_);
  EXPECT_EQ(s.num_device_map, s.num_device_unmap) << "every mapping of a page goes with it";
  EXPECT_EQ(pool_->mapped_bytes(), 0u);
}

// Pages that go idle and live again thousands of times: a page idle since long before must still
// be found when stitching needs it (here the limit allows no growth, so a failure to find it is
// an out-of-memory).
TEST_F(VirtualMemoryPoolTest, IdlePagesAreFoundAfterManyIdleAndLiveCycles) {
  const std::size_t g = pool_->page_bytes();
  MakePool(LimitedPageOptions(10 * g));
  Allocation* a = pool_->Allocate(2 * g, Stream{});
  Allocation* b = pool_->Allocate(4 * g, Stream{});
  Allocation* c = pool_->Allocate(4 * g, Stream{});
  pool_->Free(a);
  // a's two pages idle first; then c's go idle and live again (two sizes defeat quick reuse;
  // a's hole is too small for c), thousands of times.
  for (int i = 0; i < 3000; ++i) {
    pool_->Free(c);
    c = pool_->Allocate(4 * g - (i % 2) * 4096, Stream{});
  }
  EXPECT_EQ(pool_->reserved_bytes(), 10 * g);
  pool_->Free(c);
  // Six pages in one piece: over c's range and the unmapped space after it, with a's two idle
  // pages stitched in (the limit allows no new page).
  const allocation::MemoryStats before = Stats(*pool_);
  Allocation* big = pool_->Allocate(6 * g, Stream{});
  std::memset(big->ptr(), 7, big->size());
  EXPECT_EQ(Stats(*pool_).num_device_alloc, before.num_device_alloc);
  EXPECT_EQ(Stats(*pool_).num_device_map, before.num_device_map + 2);
  for (Allocation* x : {big, b}) pool_->Free(x);
  EXPECT_EQ(EmptyCache(), 10 * g);
}

// A range that spans two mappings of one physical page (a hole and the range stitched from it,
// merged once everything is free) gets a page of its own for one of them: no two addresses of a
// live block share bytes.
TEST_F(VirtualMemoryPoolTest, ARangeNeverMapsOnePhysicalPageTwice) {
  const std::size_t g = pool_->page_bytes();
  std::vector<Allocation*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(pool_->Allocate(4 * g, Stream{}));
  pool_->Free(blocks[0]);
  pool_->Free(blocks[2]);
  pool_->WaitForStreams();
  Allocation* big = pool_->Allocate(8 * g, Stream{});  // stitched from the two holes
  EXPECT_EQ(pool_->reserved_bytes(), 16 * g);
  pool_->Free(blocks[1]);
  pool_->Free(blocks[3]);
  pool_->Free(big);
  // Everything is free and merged: one block over the holes and the stitched range.
  const std::size_t n = 24;
  Allocation* all = pool_->Allocate(n * g, Stream{});
  ASSERT_EQ(all->ptr(), blocks[0]->ptr());
  auto* bytes = static_cast<unsigned char*>(all->ptr());
  for (std::size_t i = 0; i < n; ++i) std::memset(bytes + i * g, static_cast<int>(i + 1), g);
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_EQ(bytes[i * g], i + 1) << "page " << i << " shares bytes with another page";
    EXPECT_EQ(bytes[i * g + g - 1], i + 1) << "page " << i;
  }
  EXPECT_EQ(pool_->reserved_bytes(), 24 * g);
  pool_->Free(all);
  EmptyCache();
}

// Placement takes a larger free block whose pages are mapped over a best fit that would need
// pages mapped.
TEST_F(VirtualMemoryPoolTest, PrefersAMappedFreeBlockToABestFitThatNeedsMapping) {
  const std::size_t g = pool_->page_bytes();
  Allocation* x = pool_->Allocate(3 * g, Stream{});
  Allocation* sep1 = pool_->Allocate(g, Stream{});
  Allocation* z = pool_->Allocate(6 * g, Stream{});
  Allocation* sep2 = pool_->Allocate(g, Stream{});
  void* const z_addr = z->ptr();
  pool_->Free(x);
  pool_->WaitForStreams();
  pool_->Release();  // x's pages are unmapped and given back
  pool_->Free(z);    // z's stay mapped
  const allocation::MemoryStats before = Stats(*pool_);
  Allocation* y = pool_->Allocate(3 * g, Stream{});
  EXPECT_EQ(y->ptr(), z_addr);
  EXPECT_EQ(Stats(*pool_).num_device_map, before.num_device_map);
  EXPECT_EQ(Stats(*pool_).num_device_alloc, before.num_device_alloc);
  for (Allocation* a : {y, sep1, sep2}) pool_->Free(a);
  EmptyCache();
}

// Quick reuse: a block freed and asked for again (same size, same stream) comes back as it
// was, with no page or driver work; another size or stream gets the filed (merged) state.
TEST_F(VirtualMemoryPoolTest, AFreedBlockOfTheSameSizeAndStreamComesBackAtOnce) {
  const std::size_t g = pool_->page_bytes();
  const Stream other = runtime_.CreateStream(0);
  Allocation* keep = pool_->Allocate(g, Stream{});
  Allocation* a = pool_->Allocate(3 * g, Stream{});
  void* const addr = a->ptr();
  const auto before = Stats(*pool_);
  for (int i = 0; i < 100; ++i) {
    pool_->Free(a);
    EXPECT_EQ(pool_->allocated_bytes(), g);
    a = pool_->Allocate(3 * g, Stream{});
    ASSERT_EQ(a->ptr(), addr);
  }
  EXPECT_EQ(Stats(*pool_).num_device_map, before.num_device_map);
  EXPECT_EQ(Stats(*pool_).num_device_unmap, before.num_device_unmap);
  // A parked block is not live: a second free is refused and loses nothing.
  pool_->Free(a);
  EXPECT_THROW(pool_->Free(a), std::invalid_argument);
  // Another stream does not take it back unordered: it gets the filed block, after the wait
  // the free calls for (a fence on the freeing stream is pending here, so one device wait).
  faults_.HoldEvents(true);
  const std::int64_t waits = pool_->num_stream_waits();
  Allocation* b = pool_->Allocate(3 * g, other);
  EXPECT_EQ(b->ptr(), addr);
  EXPECT_EQ(pool_->num_stream_waits(), waits + 1);
  faults_.HoldEvents(false);
  pool_->Free(b);
  pool_->Free(keep);
  // Parked blocks are filed before a release: every page goes back.
  EmptyCache();
  EXPECT_EQ(pool_->reserved_bytes(), 0u);
  EXPECT_EQ(pool_->mapped_bytes(), 0u);
  EXPECT_EQ(pool_->allocated_bytes(), 0u);
  runtime_.DestroyStream(other);
}

// Streams that interleave keep their parked blocks: another stream's allocation that finds a
// mapped fit elsewhere leaves them parked, and the freeing stream still takes its block back.
TEST_F(VirtualMemoryPoolTest, AnotherStreamsAllocationLeavesAParkedBlockParked) {
  const std::size_t g = pool_->page_bytes();
  const Stream a = NewStream();
  const Stream b = NewStream();
  Allocation* x = pool_->Allocate(2 * g, a);
  Allocation* spacer = pool_->Allocate(g, a);  // keeps x from merging with y
  Allocation* y = pool_->Allocate(4 * g, b);
  void* const x_addr = x->ptr();
  void* const y_addr = y->ptr();
  pool_->Free(y);
  pool_->Free(pool_->Allocate(4096, b));  // b's next allocation files y: free, mapped, larger
  pool_->Free(x);                         // parked for a
  const auto before = Stats(*pool_);
  // Filed, x would be b's best fit (exact, mapped); parked for a, y serves b.
  Allocation* on_b = pool_->Allocate(2 * g, b);
  EXPECT_EQ(on_b->ptr(), y_addr);
  Allocation* on_a = pool_->Allocate(2 * g, a);
  EXPECT_EQ(on_a->ptr(), x_addr);
  EXPECT_EQ(Stats(*pool_).num_device_map, before.num_device_map);
  for (Allocation* p : {on_a, on_b, spacer}) pool_->Free(p);
  EmptyCache();
  EXPECT_EQ(pool_->reserved_bytes(), 0u);
}

// The pool never maps pages while a parked block could serve: another stream's placement that
// would map files every parked block first, and takes one of them (after its stream's work).
TEST_F(VirtualMemoryPoolTest, APlacementThatWouldMapFilesEveryStreamsParkedBlocksFirst) {
  const std::size_t g = pool_->page_bytes();
  const Stream a = NewStream();
  const Stream b = NewStream();
  Allocation* x = pool_->Allocate(4 * g, a);
  void* const x_addr = x->ptr();
  pool_->Free(x);  // parked for a
  const auto before = Stats(*pool_);
  Allocation* on_b = pool_->Allocate(4 * g, b);
  EXPECT_EQ(on_b->ptr(), x_addr);
  EXPECT_EQ(Stats(*pool_).num_device_alloc, before.num_device_alloc);
  EXPECT_EQ(Stats(*pool_).num_device_map, before.num_device_map);
  pool_->Free(on_b);
  EmptyCache();
  EXPECT_EQ(pool_->reserved_bytes(), 0u);
}

TEST_F(VirtualMemoryPoolTest, FailedCreateOrMapIsACleanBadAllocAndLosesNothing) {
  const std::size_t g = pool_->page_bytes();
  Allocation* keep = pool_->Allocate(g, Stream{});
  faults_.FailNextCreatePhysical(2);  // one refusal is retried (vmm_pool_reliability_test)
  EXPECT_THROW(pool_->Allocate(3 * g, Stream{}), allocation::BadAlloc);
  faults_.FailNextMap(1);
  EXPECT_THROW(pool_->Allocate(3 * g, Stream{}), allocation::BadAlloc);
  EXPECT_EQ(pool_->allocated_bytes(), g);
  // Still works, and everything comes back.
  Allocation* a = pool_->Allocate(3 * g, Stream{});
  std::memset(a->ptr(), 3, a->size());
  pool_->Free(a);
  pool_->Free(keep);
  EmptyCache();
  EXPECT_EQ(pool_->reserved_bytes(), 0u);
  EXPECT_EQ(runtime_.used_bytes(0), 0u);
}

TEST_F(VirtualMemoryPoolTest, MemoryLimitAndDeviceCapacityAreBadAllocWithFigures) {
  MakePool(LimitedPageOptions(8 * kMiB));
  Allocation* a = pool_->Allocate(6 * kMiB, Stream{});
  try {
    pool_->Allocate(4 * kMiB, Stream{});
    FAIL() << "expected BadAlloc";
  } catch (const allocation::BadAlloc& e) {
    EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
  }
  pool_->Free(a);
  // Past the device (256 MiB).
  MakePool();
  EXPECT_THROW(pool_->Allocate(300 * kMiB, Stream{}), allocation::BadAlloc);
  EXPECT_EQ(pool_->allocated_bytes(), 0u);
}

// A reservation of fewer pages than the small region's divisor has one region: small requests
// share it with large ones instead of finding no region at all.
TEST_F(VirtualMemoryPoolTest, ATinyReservationServesSmallAndLargeRequests) {
  VirtualMemoryPool::Options o = PageOptions();
  o.reserve_bytes = 4 * runtime_.VmmGranularity(0);
  ASSERT_LT(o.reserve_bytes / runtime_.VmmGranularity(0), o.small_region_divisor);
  MakePool(o);
  Allocation* small = pool_->Allocate(1000, Stream{});
  Allocation* large = pool_->Allocate(2 * kMiB, Stream{});
  EXPECT_EQ(pool_->allocated_bytes(), small->size() + large->size());
  pool_->Free(small);
  pool_->Free(large);
  EmptyCache();
  EXPECT_EQ(pool_->reserved_bytes(), 0u);
}

TEST_F(VirtualMemoryPoolTest, BadFreesAndAbsurdSizesAreRefused) {
  Allocation* a = pool_->Allocate(100, Stream{});
  pool_->Free(a);
  EXPECT_THROW(pool_->Free(a), std::invalid_argument);
  EXPECT_THROW(pool_->Allocate(std::size_t{1} << 62, Stream{}), std::invalid_argument);
  VirtualMemoryPool other(&faults_, kPlace, {});
  Allocation* b = other.Allocate(100, Stream{});
  EXPECT_THROW(pool_->Free(b), std::invalid_argument);
  other.Free(b);
  other.WaitForStreams();
  other.Release();
  EmptyCache();
}

// Stitching on a real device: one physical page mapped at two addresses, used through each in
// turn, keeps the bytes written through the address in use, and the two ranges take turns with
// no driver call.
TEST_F(CUDAVirtualMemoryPoolTest, StitchedPagesServeBothAddressesInTurn) {
  const Stream s = NewStream();
  VirtualMemoryPool pool(runtime_, kPlace, PageOptions());
  const std::size_t g = pool.page_bytes();
  std::vector<Allocation*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(pool.Allocate(2 * g, s));
  pool.Free(blocks[0]);
  pool.Free(blocks[2]);
  pool.WaitForStreams();
  auto check = [&](const Allocation* a, unsigned char value) {
    std::vector<unsigned char> host(a->size());
    runtime_->MemcpyAsync(host.data(), a->ptr(), a->size(), s);
    runtime_->SynchronizeStream(s);
    EXPECT_EQ(host.front(), value);
    EXPECT_EQ(host[host.size() / 2], value);
    EXPECT_EQ(host.back(), value);
  };
  allocation::MemoryStats before;
  pool.CollectStats(&before);
  Allocation* big = pool.Allocate(4 * g, s);  // the two holes' pages, stitched
  runtime_->MemsetAsync(big->ptr(), 0x5A, big->size(), s);
  check(big, 0x5A);
  allocation::MemoryStats stitched;
  pool.CollectStats(&stitched);
  EXPECT_EQ(stitched.num_device_alloc, before.num_device_alloc);
  EXPECT_EQ(stitched.num_device_unmap, before.num_device_unmap);
  pool.Free(big);
  Allocation* hole = pool.Allocate(2 * g, s);  // through its first address again
  runtime_->MemsetAsync(hole->ptr(), 0x3C, hole->size(), s);
  check(hole, 0x3C);
  runtime_->MemsetAsync(blocks[1]->ptr(), 0x11, blocks[1]->size(), s);
  check(blocks[1], 0x11);
  pool.Free(hole);
  big = pool.Allocate(4 * g, s);
  runtime_->MemsetAsync(big->ptr(), 0x77, big->size(), s);
  check(big, 0x77);
  allocation::MemoryStats after;
  pool.CollectStats(&after);
  EXPECT_EQ(after.num_device_map, stitched.num_device_map) << "the ranges took turns";
  EXPECT_EQ(after.num_device_unmap, stitched.num_device_unmap);
  pool.Free(big);
  pool.Free(blocks[1]);
  pool.Free(blocks[3]);
  pool.WaitForStreams();
  pool.Release();
  allocation::MemoryStats end;
  pool.CollectStats(&end);
  EXPECT_EQ(end.reserved_bytes[allocation::kAggregate].current, 0);
  EXPECT_EQ(end.num_device_map, end.num_device_unmap);
}

}  // namespace
}  // namespace strata::strategies::vmm_test
