// How the facade gives memory back and reuses it: an out-of-memory releases every stream's cache
// and retries (and says so when nothing helps), the retry layer finds a deferred free once its
// stream is done, garbage collection is per device, RecordStream holds a block (pinned ones too)
// until its streams' work is done or is refused where it cannot, and named caches keep their blocks
// across iterations until invalidated.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "allocation/bad_alloc.h"
#include "facade/allocator_facade.h"
#include "facade/cache_scope.h"
#include "facade/named_cache.h"
#include "platform/emulated_runtime.h"
#include "support/facade_fixture.h"

namespace strata::facade::test_facade {
namespace {

TEST(AllocatorFacadeTest, OomReleasesEveryStreamsCacheThenRetries) {
  platform::EmulatedRuntime runtime(Small(std::size_t{64} << 20));
  AllocatorFacade facade(&runtime, Flags());
  Stream s1 = runtime.CreateStream(0), s2 = runtime.CreateStream(0);
  // Stream 1 caches 40 MiB after its free; stream 2 then needs 40 MiB of the 64.
  facade.Alloc(CUDAPlace(0), std::size_t{40} << 20, s1).reset();
  EXPECT_GE(runtime.used_bytes(0), std::size_t{40} << 20);
  AllocationPtr b = facade.Alloc(CUDAPlace(0), std::size_t{40} << 20, s2);
  EXPECT_NE(b->ptr(), nullptr);
  b.reset();
  facade.EmptyCache(CUDAPlace(0));
  EXPECT_EQ(runtime.used_bytes(0), 0u);
  runtime.DestroyStream(s1);
  runtime.DestroyStream(s2);
}

TEST(AllocatorFacadeTest, OomMessageWhenNothingHelps) {
  platform::EmulatedRuntime runtime(Small(std::size_t{64} << 20));
  AllocatorFacade facade(&runtime, Flags());
  AllocationPtr a = facade.Alloc(CUDAPlace(0), std::size_t{40} << 20);
  try {
    facade.Alloc(CUDAPlace(0), std::size_t{40} << 20);
    FAIL();
  } catch (const allocation::BadAlloc& e) {
    EXPECT_NE(std::string(e.what()).find("Tried to allocate 40.00 MiB"), std::string::npos)
        << e.what();
  }
  // One OOM surfaced: counted once (by the statistics layer), after one recovery attempt.
  const allocation::MemoryStats s = facade.GetMemoryStats(CUDAPlace(0));
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_GE(s.num_alloc_retries, 1);
}

// PyTorch's record_stream OOM scenario: the memory a request needs is a block freed on stream A
// while stream B still uses it. Once B's work ends, the deferred free is reclaimed below the
// retry layer, which notices within milliseconds, not at the end of its retry time.
TEST(AllocatorFacadeTest, RetryFindsADeferredFreeOnceItsStreamIsDone) {
  platform::EmulatedRuntime runtime(Small(std::size_t{64} << 20));
  AllocatorFlags f = Flags();
  f.gpu_allocator_retry_time = 20'000;
  AllocatorFacade facade(&runtime, f);
  Stream a = runtime.CreateStream(0), b = runtime.CreateStream(0);
  absl::Notification b_may_finish;
  AllocationPtr big = facade.Alloc(CUDAPlace(0), 48 << 20, a);
  runtime.LaunchHostTask(b, [&] { b_may_finish.WaitForNotification(); });
  facade.RecordStream(*big, b);
  big.reset();  // deferred: b's work may still use it
  absl::Notification got;
  std::thread t([&] {
    AllocationPtr again = facade.Alloc(CUDAPlace(0), 48 << 20, a);
    got.Notify();
  });
  while (facade.GetMemoryStats(CUDAPlace(0)).num_alloc_retries == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  b_may_finish.Notify();
  EXPECT_TRUE(got.WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "the retry layer slept through the reclaimed memory";
  t.join();
  DestroyStreams(runtime, facade, {a, b});
}

// garbage_collection_threshold is per device, as in PyTorch: three streams each caching 300 MiB
// would hold 900 MiB against a 512 MiB target (0.5 of 1 GiB); growth past the device's target
// releases the other streams' idle memory.
TEST(AllocatorFacadeTest, GarbageCollectionThresholdIsPerDevice) {
  platform::EmulatedRuntime runtime(Small());  // 1 GiB
  AllocatorFlags f = Flags();
  f.garbage_collection_threshold = 0.5;
  AllocatorFacade facade(&runtime, f);
  std::vector<Stream> streams;
  for (int i = 0; i < 3; ++i) {
    streams.push_back(runtime.CreateStream(0));
    AllocationPtr a = facade.Alloc(CUDAPlace(0), std::size_t{300} << 20, streams.back());
  }
  const auto reserved = facade.GetMemoryStats(CUDAPlace(0)).reserved_bytes[kAggregate].current;
  EXPECT_LE(reserved, std::int64_t{512} << 20) << "the device's target was ignored";
  EXPECT_GE(reserved, std::int64_t{300} << 20);
  for (Stream s : streams) runtime.DestroyStream(s);
}

// PyTorch's test_caching_pinned_memory: a long kernel, an async copy out of a pinned buffer, free,
// allocate again: the new block must not be the one the copy still reads. Pinned memory belongs
// to no stream, so a copy on the default stream holds it too.
TEST(AllocatorFacadeTest, PinnedBlocksWaitForTheStreamsThatUseThem) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, Flags());
  const platform::Place pinned = platform::CUDAPinnedPlace();
  for (Stream s : {runtime.CreateStream(0), Stream{}}) {
    absl::Notification kernel_done;
    AllocationPtr device = facade.Alloc(CUDAPlace(0), 1 << 20, s);
    AllocationPtr host = facade.Alloc(pinned, 1 << 20);
    void* const first = host->ptr();
    runtime.LaunchHostTask(s, [&] { kernel_done.WaitForNotification(); });  // the long kernel
    runtime.MemcpyAsync(device->ptr(), host->ptr(), 1 << 20, s);
    EXPECT_TRUE(facade.RecordStream(*host, s));
    host.reset();
    AllocationPtr again = facade.Alloc(pinned, 1 << 20);
    EXPECT_NE(again->ptr(), first) << "a pinned block was handed out while a copy reads it";
    kernel_done.Notify();
    runtime.SynchronizeStream(s);
    again.reset();
    device.reset();
    if (!s.is_default()) runtime.DestroyStream(s);
  }
  // With the stream-safe layer off, RecordStream on pinned memory says it cannot be honoured.
  AllocatorFlags off = Flags();
  off.use_stream_safe_cuda_allocator = false;
  AllocatorFacade plain(&runtime, off);
  AllocationPtr host = plain.Alloc(pinned, 4096);
  EXPECT_THROW(plain.RecordStream(*host, Stream{}), std::invalid_argument);
}

// Strategies without the stream-safe layer, and pinned memory, cannot honour RecordStream: an
// error naming why, not a silent false.
TEST(AllocatorFacadeTest, RecordStreamThatCannotBeHonouredIsRefused) {
  platform::EmulatedRuntime runtime(Small());
  for (auto strategy : {AllocatorStrategy::kNaiveBestFit, AllocatorStrategy::kThreadLocal}) {
    AllocatorFlags f = Flags(strategy);
    f.initial_gpu_memory_in_mb = 64;
    AllocatorFacade facade(&runtime, f);
    Stream s = runtime.CreateStream(0);
    AllocationPtr a = facade.Alloc(CUDAPlace(0), 1 << 20);
    try {
      facade.RecordStream(*a, s);
      ADD_FAILURE() << "RecordStream pretended to guard a block it cannot";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(flags::AllocatorStrategyName(strategy))),
                std::string::npos)
          << e.what();
    }
    a.reset();
    runtime.DestroyStream(s);
  }
  AllocatorFlags f = Flags();
  f.use_system_allocator = true;  // cudaFree waits: nothing to record, no error
  AllocatorFacade facade(&runtime, f);
  Stream s = runtime.CreateStream(0);
  AllocationPtr a = facade.Alloc(CUDAPlace(0), 1 << 20);
  EXPECT_FALSE(facade.RecordStream(*a, s));
  a.reset();
  runtime.DestroyStream(s);
}

TEST(AllocatorFacadeTest, ScopedCacheSecondIterationMakesNoDeviceMalloc) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, Flags());
  auto iteration = [&] {
    CacheScope scope(facade, CUDAPlace(0), "loop");
    std::vector<AllocationPtr> tensors;
    for (int i = 1; i <= 50; ++i) tensors.push_back(facade.Alloc(CUDAPlace(0), i * 100003));
  };
  iteration();
  const auto mallocs = runtime.malloc_count();
  NamedCache* cache = facade.GetNamedCache(CUDAPlace(0), "loop");
  EXPECT_EQ(cache->cached_blocks(), 50u);
  iteration();
  EXPECT_EQ(runtime.malloc_count(), mallocs);
  EXPECT_EQ(cache->hits(), 50u);
  EXPECT_GT(facade.InvalidateCache(CUDAPlace(0), "loop"), 0u);
  EXPECT_EQ(cache->cached_blocks(), 0u);
  facade.EmptyCache(CUDAPlace(0));
  EXPECT_EQ(runtime.used_bytes(0), 0u);
}

// A block allocated in a named scope but freed after the scope closed still returns to that
// cache (GPUArrays.jl's rule), until the cache is invalidated.
TEST(AllocatorFacadeTest, BlocksOutlivingTheirScopeReturnToItsCache) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, Flags());
  NamedCache* cache = facade.GetNamedCache(CUDAPlace(0), "outputs");
  AllocationPtr out;
  {
    CacheScope scope(facade, CUDAPlace(0), "outputs");
    out = facade.Alloc(CUDAPlace(0), 3 << 20);
  }
  void* const addr = out->ptr();
  out.reset();  // no scope active any more
  EXPECT_EQ(cache->cached_blocks(), 1u) << "the block left its cache";
  {
    CacheScope scope(facade, CUDAPlace(0), "outputs");
    out = facade.Alloc(CUDAPlace(0), 3 << 20);
    EXPECT_EQ(out->ptr(), addr);
    EXPECT_EQ(cache->hits(), 1u);
  }
  facade.InvalidateCache(CUDAPlace(0), "outputs");
  out.reset();  // allocated before the invalidation: freed down the chain
  EXPECT_EQ(cache->cached_blocks(), 0u);
  facade.EmptyCache(CUDAPlace(0));
  EXPECT_EQ(runtime.used_bytes(0), 0u);
}

// A scope belongs to its facade: a second facade on the same thread never sees it, and a scope
// that outlives its facade is never used again (it named a cache that is gone).
TEST(AllocatorFacadeTest, AScopeServesItsOwnFacadeOnly) {
  platform::EmulatedRuntime runtime(Small());
  auto first = std::make_unique<AllocatorFacade>(&runtime, Flags());
  AllocatorFacade second(&runtime, Flags());
  second.GetNamedCache(CUDAPlace(0), "loop");  // its chains have the scoped-cache layer too
  {
    auto scope = std::make_unique<CacheScope>(*first, CUDAPlace(0), "loop");
    AllocationPtr theirs = second.Alloc(CUDAPlace(0), 1 << 20);
    theirs.reset();
    EXPECT_EQ(second.GetNamedCache(CUDAPlace(0), "loop")->cached_blocks(), 0u)
        << "another facade's scope took this facade's free";
    EXPECT_EQ(first->GetNamedCache(CUDAPlace(0), "loop")->cached_blocks(), 0u);
    first.reset();                                              // the scope outlives its facade
    AllocationPtr after = second.Alloc(CUDAPlace(0), 1 << 20);  // never reaches the dead cache
    after.reset();
    second.InvalidateCache(CUDAPlace(0), "loop");
  }
  second.EmptyCache(CUDAPlace(0));
  EXPECT_EQ(runtime.used_bytes(0), 0u);
}

// A scope destroyed on another thread than its own ends there; its thread stops using it.
TEST(AllocatorFacadeTest, AScopeEndedOnAnotherThreadStopsServingItsThread) {
  platform::EmulatedRuntime runtime(Small());
  AllocatorFacade facade(&runtime, Flags());
  NamedCache* cache = facade.GetNamedCache(CUDAPlace(0), "loop");
  auto scope = std::make_unique<CacheScope>(facade, CUDAPlace(0), "loop");
  facade.Alloc(CUDAPlace(0), 1 << 20).reset();
  EXPECT_EQ(cache->cached_blocks(), 1u);
  std::thread([&scope] { scope.reset(); }).join();
  facade.Alloc(CUDAPlace(0), 3 << 20).reset();
  EXPECT_EQ(cache->cached_blocks(), 1u) << "the ended scope still caught this thread's free";
  {
    CacheScope again(facade, CUDAPlace(0), "loop");  // the thread's scopes still work
    facade.Alloc(CUDAPlace(0), 1 << 20).reset();
    EXPECT_EQ(cache->hits(), 1u);
  }
  facade.InvalidateCache(CUDAPlace(0), "loop");
  facade.EmptyCache(CUDAPlace(0));
  EXPECT_EQ(runtime.used_bytes(0), 0u);
}

// A capture strata was not told of (no BeginAllocateToPool) is underway on another stream: CUDA
// refuses device frees until it ends. Frees and cache releases then wait, never abort (a free
// runs in a destructor), and go through once the capture is over.
TEST(AllocatorFacadeTest, DeviceFreesDuringAnUnannouncedCaptureWaitForItsEnd) {
  struct Case {
    const char* name;
    AllocatorFlags flags;
  };
  std::vector<Case> cases;
  for (const bool idle : {false, true}) {
    AllocatorFlags f = ChunkPoolFlags();
    f.free_idle_chunk = idle;
    cases.push_back({idle ? "chunk pool, free_idle_chunk" : "chunk pool", f});
  }
  cases.push_back({"system allocator", Flags(AllocatorStrategy::kAutoGrowth, /*system=*/true)});
  AllocatorFlags naive = Flags(AllocatorStrategy::kNaiveBestFit);
  naive.initial_gpu_memory_in_mb = 10;
  cases.push_back({"naive_best_fit", naive});
  cases.push_back({"vmm pool", PoolFlags(true)});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = std::size_t{1} << 30});
    {
      AllocatorFacade facade(&runtime, c.flags);
      const Stream s = runtime.CreateStream(0);
      AllocationPtr a = facade.Alloc(CUDAPlace(0), 1 << 20);
      AllocationPtr b = facade.Alloc(CUDAPlace(0), 64 << 20);
      runtime.BeginCapture(s);
      EXPECT_NO_THROW(a.reset());
      EXPECT_NO_THROW(b.reset());
      EXPECT_NO_THROW(facade.EmptyCache(CUDAPlace(0)));
      runtime.EndCapture(s);
      facade.EmptyCache(CUDAPlace(0));
      if (!c.flags.use_virtual_memory_auto_growth || c.flags.use_system_allocator) {
        EXPECT_LE(runtime.used_bytes(0), std::size_t{10} << 20) << "the frees went through";
      }
      facade.EndStream(CUDAPlace(0), s);
      runtime.DestroyStream(s);
    }
    EXPECT_EQ(runtime.used_bytes(0), 0u);
  }
}

}  // namespace
}  // namespace strata::facade::test_facade
