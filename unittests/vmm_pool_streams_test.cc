// The virtual-memory pool across streams (fixtures: support/vmm_pool_fixture.h): a block or page
// another stream takes waits on the device, never the host, for its last users' work up to their
// free; merged free neighbours keep every stream's use; mappings and pages of pending work stay
// until that work is done; and a free whose stream was destroyed still frees.
// CUDAVirtualMemoryPoolTest reuses a block behind a slow kernel on a real GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "absl/synchronization/notification.h"
#include "allocation/memory_stats.h"
#include "platform/emulated_runtime.h"
#include "platform/fault_injection_runtime.h"
#include "strategies/vmm_pool.h"
#include "support/spin_kernel.h"
#include "support/vmm_pool_fixture.h"

namespace strata::strategies::vmm_test {
namespace {

using allocation::Allocation;
using platform::Stream;

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

// A physical page freed through one address by stream A and taken through another by stream B:
// B waits on the device for A's work, as for a block A freed.
TEST_F(VirtualMemoryPoolTest, APageTakenThroughAnotherAddressWaitsForItsLastStream) {
  const std::size_t g = pool_->page_bytes();
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

// Free neighbours last used on two streams merge, so the free space is not split by stream: a
// request of their joint size takes both, mapped, with no driver call. The merged block keeps
// both last uses: while the other stream's is pending, the taker waits for it on the device (not
// the host); once it is done, no wait at all.
TEST_F(VirtualMemoryPoolTest, FreeNeighboursOfTwoStreamsMergeAndKeepBothUses) {
  const std::size_t g = pool_->page_bytes();
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
  const std::size_t g = pool_->page_bytes();
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
  const std::size_t g = pool_->page_bytes();
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
  const std::size_t g = pool_->page_bytes();
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
  const std::size_t g = pool_->page_bytes();
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
  const std::size_t g = pool_->page_bytes();
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

// A block freed by stream A and taken by stream B: B's later work runs after A's. (A page-sized
// block: B takes A's parked block only where nothing else is mapped for it.)
TEST_F(VirtualMemoryPoolTest, CrossStreamReuseWaitsOnTheDeviceNotTheHost) {
  HeldStreamA streams(&runtime_);
  const Stream a = streams.a(), b = streams.b();
  const std::size_t g = pool_->page_bytes();
  Allocation* x = pool_->Allocate(g, a);
  void* const addr = x->ptr();
  streams.HoldA();
  pool_->Free(x);
  const std::uint64_t syncs = faults_.SyncCount();
  Allocation* y = pool_->Allocate(g, b);
  EXPECT_EQ(y->ptr(), addr) << "the same block, reused across streams";
  EXPECT_EQ(pool_->num_stream_waits(), 1);
  EXPECT_TRUE(streams.BRanAfterA()) << "b's work ran before a's work on the block finished";
  EXPECT_EQ(faults_.SyncCount(), syncs + 1);  // the test's own SynchronizeStream only
  pool_->Free(y);
  // Same stream: no wait. A stream whose fence completed: no wait either.
  Allocation* z = pool_->Allocate(g, b);
  pool_->Free(z);
  EXPECT_EQ(pool_->num_stream_waits(), 1);
  EmptyCache();
}

// A free whose periodic fence cannot be recorded (its stream was destroyed) still frees: the
// block is reusable and nothing is lost.
TEST_F(VirtualMemoryPoolTest, FreesAfterTheirStreamIsDestroyedStillFree) {
  const std::size_t g = pool_->page_bytes();
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

// The same guarantees on a real GPU, with a real kernel: a block whose last user is a slow
// kernel on another stream is reused only after that kernel (the device orders it, the host
// never waits), and its pages are not unmapped while the kernel runs.
TEST_F(CUDAVirtualMemoryPoolTest, ReuseAcrossStreamsWaitsForTheKernelOnTheDevice) {
#if STRATA_WITH_CUDA
  const Stream s1 = NewStream(), s2 = NewStream();
  VirtualMemoryPool pool(runtime_, kPlace, {});
  const std::size_t bytes = pool.page_bytes();
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

}  // namespace
}  // namespace strata::strategies::vmm_test
