#include "strategies/vmm_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "absl/synchronization/notification.h"
#include "allocation/bad_alloc.h"
#include "allocation/memory_snapshot.h"
#include "allocation/memory_stats.h"
#include "platform/emulated_runtime.h"
#include "platform/fault_injection_runtime.h"
#include "support/spin_kernel.h"
#include "support/vmm_pool_fixture.h"

namespace strata::strategies {
namespace {

using allocation::Allocation;
using platform::Stream;
using vmm_test::CUDAVirtualMemoryPoolTest;
using vmm_test::kMiB;
using vmm_test::kPlace;
using vmm_test::LimitedPageOptions;
using vmm_test::PageOptions;
using vmm_test::Small;
using vmm_test::Stats;
using vmm_test::VirtualMemoryPoolTest;

// Streams a and b of `runtime` for the cross-stream tests: HoldA enqueues on a work that runs
// until BRanAfterA, which enqueues a task on b, lets a's work finish, waits for b on the host and
// says whether b's task ran after a's work. The streams go with this object.
class HeldStreamA {
 public:
  explicit HeldStreamA(platform::DeviceRuntime* runtime)
      : runtime_(runtime), a_(runtime->CreateStream(0)), b_(runtime->CreateStream(0)) {}
  ~HeldStreamA() {
    if (!release_a_.HasBeenNotified()) release_a_.Notify();  // a failed test must not hang
    // The streams' tasks use this object: they end before it does (a destroyed stream's work
    // still runs, as in CUDA).
    runtime_->SynchronizeStream(a_);
    runtime_->SynchronizeStream(b_);
    runtime_->DestroyStream(a_);
    runtime_->DestroyStream(b_);
  }
  HeldStreamA(const HeldStreamA&) = delete;
  HeldStreamA& operator=(const HeldStreamA&) = delete;

  Stream a() const { return a_; }
  Stream b() const { return b_; }
  void HoldA() {
    runtime_->LaunchHostTask(a_, [this] {
      release_a_.WaitForNotification();
      a_done_ = true;
    });
  }
  bool BRanAfterA() {
    std::atomic<bool> b_saw_a_done{false};
    runtime_->LaunchHostTask(b_, [&] { b_saw_a_done = a_done_.load(); });
    release_a_.Notify();
    runtime_->SynchronizeStream(b_);
    return b_saw_a_done;
  }

 private:
  platform::DeviceRuntime* const runtime_;
  const Stream a_;
  const Stream b_;
  absl::Notification release_a_;
  std::atomic<bool> a_done_{false};
};

TEST_F(VirtualMemoryPoolTest, RefusesADeviceWithoutVirtualMemoryAndBadOptions) {
  EXPECT_THROW(VirtualMemoryPool(nullptr, kPlace, {}), std::invalid_argument);
  VirtualMemoryPool::Options o = PageOptions();
  o.alignment = 384;
  EXPECT_THROW(VirtualMemoryPool(&runtime_, kPlace, o), std::invalid_argument);
}

TEST_F(VirtualMemoryPoolTest, MapsPagesOnDemandAndGivesThemBack) {
  const std::size_t g = pool_->granularity();
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
  const std::size_t g = pool_->granularity();
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
  const std::size_t g = pool_->granularity();
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
  const std::size_t g = pool_->granularity();
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

// A physical page freed through one address by stream A and taken through another by stream B:
// B waits on the device for A's work, as for a block A freed.
TEST_F(VirtualMemoryPoolTest, APageTakenThroughAnotherAddressWaitsForItsLastStream) {
  const std::size_t g = pool_->granularity();
  HeldStreamA streams(&runtime_);
  const Stream a = streams.a(), b = streams.b();
  Allocation* hole = pool_->Allocate(4 * g, Stream{});
  Allocation* wall = pool_->Allocate(4 * g, Stream{});
  void* const hole_addr = hole->ptr();
  pool_->Free(hole);
  pool_->WaitForStreams();
  Allocation* big = pool_->Allocate(8 * g, a);  // the hole's 4 pages, stitched, and 4 more
  ASSERT_NE(big->ptr(), hole_addr);
  streams.HoldA();
  pool_->Free(big);  // A's work on the pages is pending
  const std::int64_t waits = pool_->num_stream_waits();
  const std::uint64_t syncs = faults_.SyncCount();
  Allocation* again = pool_->Allocate(4 * g, b);
  EXPECT_EQ(again->ptr(), hole_addr) << "the hole, still mapped";
  EXPECT_EQ(pool_->num_stream_waits(), waits + 1);
  EXPECT_TRUE(streams.BRanAfterA()) << "b used the pages before a's work on them finished";
  EXPECT_EQ(faults_.SyncCount(), syncs + 1);  // the test's own SynchronizeStream only
  pool_->Free(again);
  pool_->Free(wall);
  EmptyCache();
}

// Placement takes a larger free block whose pages are mapped over a best fit that would need
// pages mapped.
TEST_F(VirtualMemoryPoolTest, PrefersAMappedFreeBlockToABestFitThatNeedsMapping) {
  const std::size_t g = pool_->granularity();
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

// Free neighbours last used on two streams merge, so the free space is not split by stream: a
// request of their joint size takes both, mapped, with no driver call. The merged block keeps
// both last uses: while the other stream's is pending, the taker waits for it on the device (not
// the host); once it is done, no wait at all.
TEST_F(VirtualMemoryPoolTest, FreeNeighboursOfTwoStreamsMergeAndKeepBothUses) {
  const std::size_t g = pool_->granularity();
  const Stream s1 = runtime_.CreateStream(0), s2 = runtime_.CreateStream(0);
  for (const bool pending : {true, false}) {
    SCOPED_TRACE(pending ? "s1's use pending" : "s1's use done");
    MakePool();
    pool_->Free(pool_->Allocate(512, s2));  // two streams in use: fences every few frees
    Allocation* a = pool_->Allocate(4 * g, s1);
    Allocation* b = pool_->Allocate(4 * g, s2);
    Allocation* guard = pool_->Allocate(g, s1);
    void* const a_addr = a->ptr();
    ASSERT_EQ(static_cast<char*>(b->ptr()), static_cast<char*>(a_addr) + 4 * g);
    faults_.HoldEvents(pending);
    pool_->Free(a);
    // Frees on s1 until its periodic fence covers a's free.
    for (int i = 0; i < 40; ++i) pool_->Free(pool_->Allocate(512 + 512 * (i % 2), s1));
    if (!pending) runtime_.SynchronizeStream(s1);  // the test waits; the pool only queries
    const std::uint64_t syncs = faults_.SyncCount();
    pool_->Free(b);
    const allocation::MemoryStats before = Stats(*pool_);
    Allocation* joint = pool_->Allocate(8 * g, s2);
    EXPECT_EQ(joint->ptr(), a_addr);
    EXPECT_EQ(Stats(*pool_).num_device_map, before.num_device_map);
    EXPECT_EQ(Stats(*pool_).num_device_alloc, before.num_device_alloc);
    EXPECT_EQ(Stats(*pool_).num_stream_waits, before.num_stream_waits + (pending ? 1 : 0));
    EXPECT_EQ(faults_.SyncCount(), syncs) << "the host never waited";
    faults_.HoldEvents(false);
    for (Allocation* x : {joint, guard}) pool_->Free(x);
    EmptyCache();
  }
  runtime_.DestroyStream(s1);
  runtime_.DestroyStream(s2);
}

// Pending uses of three streams merged into one free block: its next user waits on the device
// for every stream, the host for none.
TEST_F(VirtualMemoryPoolTest, FreeNeighboursOfThreeStreamsMakeTheirNextUserWaitForEveryStream) {
  const std::size_t g = pool_->granularity();
  std::vector<Stream> s;
  for (int i = 0; i < 4; ++i) s.push_back(runtime_.CreateStream(0));
  std::vector<Allocation*> parts;
  for (int i = 0; i < 3; ++i) parts.push_back(pool_->Allocate(4 * g, s[i]));
  Allocation* guard = pool_->Allocate(g, s[0]);
  void* const first = parts[0]->ptr();
  faults_.HoldEvents(true);
  const std::uint64_t syncs = faults_.SyncCount();
  for (Allocation* p : parts) pool_->Free(p);
  const allocation::MemoryStats before = Stats(*pool_);
  Allocation* joint = pool_->Allocate(12 * g, s[3]);
  EXPECT_EQ(joint->ptr(), first);
  EXPECT_EQ(Stats(*pool_).num_device_map, before.num_device_map);
  EXPECT_EQ(Stats(*pool_).num_stream_waits, before.num_stream_waits + 3);
  EXPECT_EQ(faults_.SyncCount(), syncs) << "the host never waited";
  faults_.HoldEvents(false);
  for (Allocation* x : {joint, guard}) pool_->Free(x);
  EmptyCache();
  for (Stream x : s) runtime_.DestroyStream(x);
}

// Another stream taking a block waits on the device for the last user's work up to the block's
// free (the fence recorded after it), not for work the last user queued later.
TEST_F(VirtualMemoryPoolTest, CrossStreamWaitCoversOnlyWorkUpToTheFree) {
  const std::size_t g = pool_->granularity();
  const Stream a = runtime_.CreateStream(0), b = runtime_.CreateStream(0);
  pool_->Free(pool_->Allocate(512, b));  // two streams in use: fences every few frees
  absl::Notification before_free, later_work;
  runtime_.LaunchHostTask(a, [&] { before_free.WaitForNotification(); });
  // A's frees, the block last: the fence every 32 frees follows them.
  std::vector<Allocation*> small;
  for (int i = 0; i < 63; ++i) small.push_back(pool_->Allocate(512, a));
  Allocation* block = pool_->Allocate(4 * g, a);
  void* const addr = block->ptr();
  for (Allocation* x : small) pool_->Free(x);
  pool_->Free(block);
  runtime_.LaunchHostTask(a, [&] { later_work.WaitForNotification(); });  // A's later work
  const std::int64_t waits = pool_->num_stream_waits();
  Allocation* taken = pool_->Allocate(4 * g, b);
  EXPECT_EQ(taken->ptr(), addr);
  EXPECT_EQ(pool_->num_stream_waits(), waits + 1);
  absl::Notification b_ran;
  runtime_.LaunchHostTask(b, [&] { b_ran.Notify(); });
  before_free.Notify();
  // B's work runs once A's work up to the free ran, while A's later work still blocks. (Waiting
  // for a fence recorded at the allocation would block B until `later_work`.)
  EXPECT_TRUE(b_ran.WaitForNotificationWithTimeout(absl::Seconds(30)))
      << "B waited for A's later work";
  later_work.Notify();
  runtime_.SynchronizeDevice(0);  // the tasks use this test's notifications: they end first
  pool_->Free(taken);
  EmptyCache();
  runtime_.DestroyStream(a);
  runtime_.DestroyStream(b);
}

// Removing a mapping waits for the work through that address only. Here a page stitched from a
// hole into another stream's range has pending work there; the hole's own last use is done, so
// an allocation takes the hole (its mapping replaced) instead of avoiding it.
TEST_F(VirtualMemoryPoolTest, AMappingGoesOnceTheWorkThroughItsAddressIsDone) {
  const std::size_t g = pool_->granularity();
  MakePool(LimitedPageOptions(4 * g));  // no growth past four pages: stitching
  const Stream s1 = runtime_.CreateStream(0), s2 = runtime_.CreateStream(0);
  Allocation* k1 = pool_->Allocate(g, s1);
  Allocation* a = pool_->Allocate(g, s1);  // the hole to be
  Allocation* k2 = pool_->Allocate(g, s1);
  void* const hole = a->ptr();
  pool_->Free(a);
  // Two pages do not fit the hole: a fresh range, with the hole's page stitched in.
  Allocation* b = pool_->Allocate(2 * g, s2);
  EXPECT_EQ(Stats(*pool_).num_device_alloc, 4);
  absl::Notification release;
  runtime_.LaunchHostTask(s2, [&] { release.WaitForNotification(); });
  pool_->Free(b);  // its work pending
  // The range back (another size: b is filed, not handed back as it was), the hole's page in
  // use again.
  Allocation* d = pool_->Allocate(2 * g - 4096, s2);
  EXPECT_EQ(d->ptr(), b->ptr());
  pool_->Free(k2);                                // an idle page to stitch
  Allocation* e = pool_->Allocate(g - 4096, s1);  // not k2's size: no quick reuse
  EXPECT_EQ(e->ptr(), hole);
  std::memset(e->ptr(), 7, e->size());
  EXPECT_EQ(Stats(*pool_).num_device_unmap, 1);
  release.Notify();
  runtime_.SynchronizeDevice(0);  // the task uses `release`: it ends before the test does
  for (Allocation* x : {k1, d, e}) pool_->Free(x);
  EmptyCache();
  runtime_.DestroyStream(s1);
  runtime_.DestroyStream(s2);
}

// Pages whose last work has not completed stay mapped; another stream may still have them
// (stitched into its own range), waiting for that work on the device, not the host.
TEST_F(VirtualMemoryPoolTest, NeverUnmapsPagesOfPendingWork) {
  const std::size_t g = pool_->granularity();
  const Stream other = runtime_.CreateStream(0);
  Allocation* a = pool_->Allocate(4 * g, Stream{});
  Allocation* b = pool_->Allocate(4 * g, Stream{});
  pool_->Free(a);
  faults_.HoldEvents(true);  // nothing looks complete
  const std::uint64_t syncs = faults_.SyncCount();
  Allocation* c = pool_->Allocate(8 * g, other);
  EXPECT_EQ(pool_->reserved_bytes(), 12 * g) << "a's 4 pages stitched under c, 4 created";
  EXPECT_EQ(pool_->num_stream_waits(), 1) << "c's stream waits for a's free on the device";
  pool_->Free(c);
  EXPECT_EQ(pool_->Release(), 0u) << "nothing safe to release";
  EXPECT_EQ(Stats(*pool_).num_device_unmap, 0);
  EXPECT_EQ(faults_.SyncCount(), syncs) << "the host never waited";
  faults_.HoldEvents(false);
  pool_->Free(b);
  EXPECT_EQ(EmptyCache(), 12 * g);
  runtime_.DestroyStream(other);
}

// Idle pages whose last work, on stream A, is still running are stitched into stream B's new
// range rather than more memory created: B's later work runs after A's.
TEST_F(VirtualMemoryPoolTest, StitchingPagesOfAnotherStreamsPendingWorkOrdersOnTheDevice) {
  const std::size_t g = pool_->granularity();
  HeldStreamA streams(&runtime_);
  const Stream a = streams.a(), b = streams.b();
  Allocation* x = pool_->Allocate(4 * g, a);
  Allocation* keep = pool_->Allocate(4 * g, a);  // x's range cannot grow into a fit for y
  streams.HoldA();
  pool_->Free(x);
  const std::uint64_t syncs = faults_.SyncCount();
  Allocation* y = pool_->Allocate(8 * g, b);
  EXPECT_EQ(pool_->reserved_bytes(), 12 * g) << "x's pages serve y";
  EXPECT_EQ(Stats(*pool_).num_device_map, 16) << "x's 4 pages mapped a second time, under y";
  EXPECT_EQ(pool_->num_stream_waits(), 1);
  EXPECT_TRUE(streams.BRanAfterA())
      << "b's work on the stitched pages ran before a's work finished";
  EXPECT_EQ(faults_.SyncCount(), syncs + 1);  // the test's own SynchronizeStream only
  pool_->Free(y);
  pool_->Free(keep);
  EXPECT_EQ(EmptyCache(), 12 * g);
}

// A block freed by stream A and taken by stream B: B's later work runs after A's.
TEST_F(VirtualMemoryPoolTest, CrossStreamReuseWaitsOnTheDeviceNotTheHost) {
  HeldStreamA streams(&runtime_);
  const Stream a = streams.a(), b = streams.b();
  Allocation* x = pool_->Allocate(kMiB, a);
  void* const addr = x->ptr();
  streams.HoldA();
  pool_->Free(x);
  const std::uint64_t syncs = faults_.SyncCount();
  Allocation* y = pool_->Allocate(kMiB, b);
  EXPECT_EQ(y->ptr(), addr) << "the same block, reused across streams";
  EXPECT_EQ(pool_->num_stream_waits(), 1);
  EXPECT_TRUE(streams.BRanAfterA()) << "b's work ran before a's work on the block finished";
  EXPECT_EQ(faults_.SyncCount(), syncs + 1);  // the test's own SynchronizeStream only
  pool_->Free(y);
  // Same stream: no wait. A stream whose fence completed: no wait either.
  Allocation* z = pool_->Allocate(kMiB, b);
  pool_->Free(z);
  EXPECT_EQ(pool_->num_stream_waits(), 1);
  EmptyCache();
}

TEST_F(VirtualMemoryPoolTest, FailedCreateOrMapIsACleanBadAllocAndLosesNothing) {
  const std::size_t g = pool_->granularity();
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

// Quick reuse: a block freed and asked for again (same size, same stream) comes back as it
// was, with no page or driver work; another size or stream gets the filed (merged) state.
TEST_F(VirtualMemoryPoolTest, AFreedBlockOfTheSameSizeAndStreamComesBackAtOnce) {
  const std::size_t g = pool_->granularity();
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

// A free whose periodic fence cannot be recorded (its stream was destroyed) still frees: the
// block is reusable and nothing is lost.
TEST_F(VirtualMemoryPoolTest, FreesAfterTheirStreamIsDestroyedStillFree) {
  const std::size_t g = pool_->granularity();
  const Stream s = runtime_.CreateStream(0);
  std::vector<Allocation*> blocks;
  for (int i = 0; i < 40; ++i) blocks.push_back(pool_->Allocate(g, s));  // page-sized: fenced
  runtime_.DestroyStream(s);
  for (Allocation* b : blocks) EXPECT_NO_THROW(pool_->Free(b));
  EXPECT_EQ(pool_->allocated_bytes(), 0u);
  Allocation* again = pool_->Allocate(g, Stream{});
  EXPECT_EQ(Stats(*pool_).num_device_alloc, 40);  // a freed page, not a new one
  pool_->Free(again);
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

// The same guarantees on a real GPU, with a real kernel: a block whose last user is a slow
// kernel on another stream is reused only after that kernel (the device orders it, the host
// never waits), and its pages are not unmapped while the kernel runs.
TEST_F(CUDAVirtualMemoryPoolTest, ReuseAcrossStreamsWaitsForTheKernelOnTheDevice) {
#if STRATA_WITH_CUDA
  const Stream s1 = NewStream(), s2 = NewStream();
  VirtualMemoryPool pool(runtime_, kPlace, {});
  const std::size_t bytes = pool.granularity();
  Allocation* used = pool.Allocate(bytes, s2);
  testing::LaunchSpinWriteKernel(used->ptr(), bytes, 0xBB, 300'000'000, s2.handle);
  void* const addr = used->ptr();
  pool.Free(used);
  const std::uint64_t syncs = runtime_->SyncCount();
  // Nothing else fits but fresh address space; the kernel's block is the cheapest (no map).
  EXPECT_EQ(pool.Release(), 0u) << "no page may go while the kernel runs";
  Allocation* again = pool.Allocate(bytes, s1);
  EXPECT_EQ(again->ptr(), addr);
  EXPECT_FALSE(runtime_->QueryStream(s2)) << "the kernel finished before the test could reuse";
  EXPECT_EQ(pool.num_stream_waits(), 1);
  EXPECT_EQ(runtime_->SyncCount(), syncs) << "the host never waited";
  runtime_->MemsetAsync(again->ptr(), 0xAA, bytes, s1);
  std::vector<unsigned char> host(bytes);
  runtime_->MemcpyAsync(host.data(), again->ptr(), bytes, s1);
  runtime_->SynchronizeStream(s1);
  EXPECT_EQ(host[0], 0xAA) << "the kernel's write came after s1's: reused too early";
  EXPECT_EQ(host[bytes - 1], 0xAA);
  pool.Free(again);
  pool.WaitForStreams();
  EXPECT_EQ(pool.Release(), bytes);
  allocation::MemoryStats s;
  pool.CollectStats(&s);
  EXPECT_EQ(s.reserved_bytes[allocation::kAggregate].current, 0);
  EXPECT_EQ(s.num_device_map, s.num_device_unmap);
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

// Stitching on a real device: one physical page mapped at two addresses, used through each in
// turn, keeps the bytes written through the address in use, and the two ranges take turns with
// no driver call.
TEST_F(CUDAVirtualMemoryPoolTest, StitchedPagesServeBothAddressesInTurn) {
  const Stream s = NewStream();
  VirtualMemoryPool pool(runtime_, kPlace, PageOptions());
  const std::size_t g = pool.granularity();
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
}  // namespace strata::strategies
