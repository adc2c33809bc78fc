// The C ABI (strata/c_api.h) allocating on the emulated device, as PyTorch's pluggable allocator
// and CuPy do: round trips, the stream argument's pool, zero sizes, bad arguments and out of
// memory as null with a message, unknown and double frees, record_stream, the graph-pool hooks,
// device faults injected from the environment, and many threads at once, over both device pools.
// This binary, c_api_test, links libstrata_c.so only (never the static strata library: both would
// register the same Abseil flags), so everything here goes through the exported C functions.
// Fixtures: support/c_api_fixture.h.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "strata/c_api.h"
#include "support/c_api_fixture.h"
#include "support/threads.h"

namespace strata::capi_test {
namespace {

TEST_F(CApiTest, MallocFreeRoundTrip) {
  void* p = strata_malloc(static_cast<ssize_t>(kMiB), 0, nullptr);
  ASSERT_NE(p, nullptr) << strata_last_error();
  std::memset(p, 0xAB, kMiB);  // emulated device memory is host memory
  void* q = strata_malloc(3000, 1, nullptr);
  ASSERT_NE(q, nullptr) << strata_last_error();
  EXPECT_NE(p, q);
  EXPECT_EQ(strata_live_allocations(), 2);
  EXPECT_GE(Stat(0, "allocated_bytes.all.current"), static_cast<std::int64_t>(kMiB));
  EXPECT_GE(Stat(1, "allocated_bytes.all.current"), 3000);
  EXPECT_EQ(Stat(0, "allocation.all.current"), 1);
  EXPECT_EQ(Stat(0, "requested_bytes.all.current"), static_cast<std::int64_t>(kMiB));

  strata_free(p, static_cast<ssize_t>(kMiB), 0, nullptr);
  strata_free(q, 3000, 1, nullptr);
  EXPECT_EQ(strata_live_allocations(), 0);
  EXPECT_EQ(Stat(0, "allocated_bytes.all.current"), 0);
  EXPECT_EQ(Stat(1, "allocated_bytes.all.current"), 0);
  EXPECT_GT(Stat(0, "reserved_bytes.all.current"), 0);  // cached, not returned
  // The cache serves the next request of the same size.
  void* again = strata_malloc(static_cast<ssize_t>(kMiB), 0, nullptr);
  EXPECT_EQ(again, p);
  strata_free(again, static_cast<ssize_t>(kMiB), 0, nullptr);
}

TEST_F(CApiTest, StreamArgumentSelectsThatStreamsPool) {
  void* stream = nullptr;
  ASSERT_EQ(strata_emulated_stream_create(0, &stream), STRATA_OK) << strata_last_error();
  void* a = strata_malloc(static_cast<ssize_t>(kMiB), 0, stream);
  ASSERT_NE(a, nullptr) << strata_last_error();
  strata_free(a, static_cast<ssize_t>(kMiB), 0, stream);
  // A block cached by `stream`'s pool is not handed to the default stream...
  void* b = strata_malloc(static_cast<ssize_t>(kMiB), 0, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(b, a);
  // ...but is to `stream` again.
  void* c = strata_malloc(static_cast<ssize_t>(kMiB), 0, stream);
  EXPECT_EQ(c, a);
  strata_free(b, static_cast<ssize_t>(kMiB), 0, nullptr);
  // The free's stream argument does not matter: the block goes back to its own stream's pool.
  strata_free(c, static_cast<ssize_t>(kMiB), 0, nullptr);
  void* d = strata_malloc(static_cast<ssize_t>(kMiB), 0, stream);
  EXPECT_EQ(d, a);
  strata_free(d, static_cast<ssize_t>(kMiB), 0, stream);
  EXPECT_EQ(strata_emulated_stream_destroy(stream), STRATA_OK) << strata_last_error();
}

TEST_F(CApiTest, ZeroSizeReturnsNullWithoutError) {
  int not_ours = 0;
  strata_free(&not_ours, 4, 0, nullptr);  // sets a known last error
  const std::string before = strata_last_error();
  ASSERT_FALSE(before.empty());
  EXPECT_EQ(strata_malloc(0, 0, nullptr), nullptr);
  EXPECT_EQ(strata_last_error(), before);
  EXPECT_EQ(strata_live_allocations(), 0);
  strata_free(nullptr, 0, 0, nullptr);  // what a framework might do with it: harmless
  EXPECT_EQ(strata_last_error(), before);
}

TEST_F(CApiTest, BadArgumentsReturnNullWithAMessage) {
  EXPECT_EQ(strata_malloc(-5, 0, nullptr), nullptr);
  EXPECT_TRUE(Contains(strata_last_error(), "negative size -5")) << strata_last_error();
  EXPECT_EQ(strata_malloc(64, -1, nullptr), nullptr);
  EXPECT_TRUE(Contains(strata_last_error(), "invalid device ordinal -1")) << strata_last_error();
  EXPECT_EQ(strata_malloc(64, 2, nullptr), nullptr);  // 2 emulated devices: 0 and 1
  EXPECT_TRUE(Contains(strata_last_error(), "cuda:2")) << strata_last_error();
  EXPECT_TRUE(Contains(strata_last_error(), "strata_malloc(size=64, device=2"))
      << strata_last_error();
  EXPECT_EQ(strata_empty_cache(9), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_memory_stats_json(-3, nullptr, 0), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_use_emulated_device(-1, 1), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_use_emulated_device(1, 0), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_use_emulated_device(200000, 1 << 20), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(strata_last_error(), "device_count must be at most")) << strata_last_error();
  EXPECT_EQ(strata_use_emulated_device(1, std::size_t{1} << 62), STRATA_ERROR_INVALID_ARGUMENT);
  // A garbage stream handle, and one destroyed before its first use.
  int not_a_stream = 0;
  EXPECT_EQ(strata_malloc(64, 0, &not_a_stream), nullptr);
  EXPECT_TRUE(Contains(strata_last_error(), "is not a stream of cuda:0")) << strata_last_error();
  void* gone = nullptr;
  ASSERT_EQ(strata_emulated_stream_create(0, &gone), STRATA_OK) << strata_last_error();
  ASSERT_EQ(strata_emulated_stream_destroy(gone), STRATA_OK) << strata_last_error();
  EXPECT_EQ(strata_malloc(64, 0, gone), nullptr);
  EXPECT_TRUE(Contains(strata_last_error(), "is not a stream of cuda:0")) << strata_last_error();
  EXPECT_EQ(strata_live_allocations(), 0);
}

TEST_F(CApiTest, OutOfMemoryReturnsNullWithTheAllocatorsMessage) {
  ASSERT_EQ(strata_use_emulated_device(1, 64 * kMiB), STRATA_OK) << strata_last_error();
  void* p = strata_malloc(static_cast<ssize_t>(48 * kMiB), 0, nullptr);
  ASSERT_NE(p, nullptr) << strata_last_error();
  EXPECT_EQ(strata_malloc(static_cast<ssize_t>(32 * kMiB), 0, nullptr), nullptr);
  const std::string error = strata_last_error();
  EXPECT_TRUE(Contains(error, "strata_malloc(size=33554432, device=0")) << error;
  EXPECT_TRUE(Contains(error, "out of memory")) << error;
  EXPECT_GE(Stat(0, "num_ooms"), 1);
  strata_free(p, static_cast<ssize_t>(48 * kMiB), 0, nullptr);
  // Memory is usable again afterwards.
  void* q = strata_malloc(static_cast<ssize_t>(32 * kMiB), 0, nullptr);
  EXPECT_NE(q, nullptr) << strata_last_error();
  strata_free(q, 0, 0, nullptr);
}

TEST_F(CApiTest, UnknownPointerFreeIsReportedNotFatal) {
  int not_ours = 0;
  strata_free(&not_ours, 4, 0, nullptr);
  const std::string error = strata_last_error();
  EXPECT_TRUE(Contains(error, "strata_free(")) << error;
  EXPECT_TRUE(Contains(error, "unknown pointer")) << error;
  EXPECT_EQ(strata_free_checked(&not_ours), STRATA_ERROR_UNKNOWN_POINTER);
  EXPECT_TRUE(Contains(strata_last_error(), "strata_free_checked(")) << strata_last_error();
  EXPECT_EQ(strata_free_checked(nullptr), STRATA_OK);
  // An interior pointer of a live allocation is not that allocation.
  char* p = static_cast<char*>(strata_malloc(4096, 0, nullptr));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(strata_free_checked(p + 16), STRATA_ERROR_UNKNOWN_POINTER);
  EXPECT_EQ(strata_live_allocations(), 1);
  EXPECT_EQ(strata_free_checked(p), STRATA_OK);
}

TEST_F(CApiTest, DoubleFreeIsReported) {
  void* p = strata_malloc(4096, 0, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(strata_free_checked(p), STRATA_OK);
  EXPECT_EQ(strata_free_checked(p), STRATA_ERROR_UNKNOWN_POINTER);
  EXPECT_TRUE(Contains(strata_last_error(), "already freed")) << strata_last_error();
  strata_free(p, 4096, 0, nullptr);  // the void version: reported, not fatal
  EXPECT_TRUE(Contains(strata_last_error(), "strata_free(")) << strata_last_error();
  EXPECT_EQ(Stat(0, "allocation.all.current"), 0);
  EXPECT_EQ(Stat(0, "allocation.all.freed"), 1);  // freed once, not twice
}

TEST_F(CApiTest, RecordStreamDefersReuseUntilTheStreamsWorkCompletes) {
  void* side = nullptr;
  ASSERT_EQ(strata_emulated_stream_create(0, &side), STRATA_OK) << strata_last_error();
  const ssize_t size = static_cast<ssize_t>(4 * kMiB);
  void* p = strata_malloc(size, 0, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(strata_record_stream(p, nullptr), 0);  // its own stream: nothing to record

  ASSERT_EQ(strata_emulated_stream_pause(side), STRATA_OK)
      << strata_last_error();  // "kernel" running
  EXPECT_EQ(strata_record_stream(p, side), 1) << strata_last_error();
  EXPECT_EQ(strata_record_stream(p, side), 1);  // twice is harmless
  strata_free(p, size, 0, nullptr);
  EXPECT_EQ(strata_live_allocations(), 0);
  // Freed, but still active: the side stream may be using it.
  EXPECT_EQ(Stat(0, "allocated_bytes.all.current"), 0);
  EXPECT_EQ(Stat(0, "active_bytes.all.current"), 4 * static_cast<std::int64_t>(kMiB));
  void* q = strata_malloc(size, 0, nullptr);
  ASSERT_NE(q, nullptr);
  EXPECT_NE(q, p) << "reused while the recorded stream was still busy";
  // empty_cache cannot return the pending block either.
  const std::int64_t reserved = Stat(0, "reserved_bytes.all.current");
  EXPECT_GE(reserved, 8 * static_cast<std::int64_t>(kMiB));
  EXPECT_EQ(strata_empty_cache(0), STRATA_OK);
  EXPECT_EQ(Stat(0, "reserved_bytes.all.current"), reserved);

  ASSERT_EQ(strata_emulated_stream_resume(side), STRATA_OK) << strata_last_error();
  // The side stream's work is done: the next allocation may reuse the block.
  void* r = strata_malloc(size, 0, nullptr);
  EXPECT_EQ(r, p);
  strata_free(q, size, 0, nullptr);
  strata_free(r, size, 0, nullptr);
  EXPECT_EQ(Stat(0, "active_bytes.all.current"), 0);
  EXPECT_EQ(strata_empty_cache(0), STRATA_OK);
  EXPECT_EQ(Stat(0, "reserved_bytes.all.current"), 0);

  int not_ours = 0;
  EXPECT_EQ(strata_record_stream(&not_ours, side), STRATA_ERROR_UNKNOWN_POINTER);
  EXPECT_TRUE(Contains(strata_last_error(), "strata_record_stream(")) << strata_last_error();
  EXPECT_EQ(strata_emulated_stream_destroy(side), STRATA_OK);
}

// Without the stream-safe layer nothing could keep the block from reuse: an error, not a
// silent 0.
// strata_end_stream before a stream is destroyed: the stream's memory stays usable, nothing is
// called on the dead handle, and bad arguments are refused with a message.
TEST_F(CApiTest, EndStreamBeforeDestroyingAStream) {
  void* side = nullptr;
  ASSERT_EQ(strata_emulated_stream_create(0, &side), STRATA_OK) << strata_last_error();
  EXPECT_EQ(strata_end_stream(0, side), STRATA_OK) << "never allocated on: nothing to end";
  const ssize_t size = static_cast<ssize_t>(4 * kMiB);
  void* p = strata_malloc(size, 0, side);
  ASSERT_NE(p, nullptr) << strata_last_error();
  EXPECT_EQ(strata_end_stream(0, nullptr), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(strata_last_error(), "default stream")) << strata_last_error();
  EXPECT_EQ(strata_end_stream(7, side), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_end_stream(0, side), STRATA_OK) << strata_last_error();
  EXPECT_EQ(strata_emulated_stream_destroy(side), STRATA_OK);
  strata_free(p, size, 0, side);  // freed after its stream is gone
  EXPECT_EQ(strata_live_allocations(), 0);
  EXPECT_EQ(strata_end_stream(0, side), STRATA_ERROR_INVALID_ARGUMENT) << "already destroyed";
  void* q = strata_malloc(size, 0, nullptr);
  ASSERT_NE(q, nullptr) << strata_last_error();
  strata_free(q, size, 0, nullptr);
  EXPECT_EQ(strata_empty_cache(0), STRATA_OK) << strata_last_error();
}

TEST_F(CApiTest, RecordStreamIsRefusedWithoutTheStreamSafeLayer) {
  ASSERT_EQ(strata_set_flags("use_stream_safe_cuda_allocator:false"), STRATA_OK)
      << strata_last_error();
  void* side = nullptr;
  ASSERT_EQ(strata_emulated_stream_create(0, &side), STRATA_OK);
  void* p = strata_malloc(4096, 0, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(strata_record_stream(p, side), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(strata_last_error(), "use_stream_safe_cuda_allocator=false"))
      << strata_last_error();
  strata_free(p, 4096, 0, nullptr);
  EXPECT_EQ(strata_emulated_stream_destroy(side), STRATA_OK);
}

// PyTorch's graph-pool hooks, called with the C++ types PyTorch calls them with: allocations
// of the claimed stream come from the pool, which goes back to the device after its release.
TEST_F(CApiTest, GraphPoolHooksRouteAndRelease) {
  void* s = nullptr;
  ASSERT_EQ(strata_emulated_stream_create(0, &s), STRATA_OK) << strata_last_error();
  const strata_pool_id pool{3, 4};
  strata_begin_allocate_to_pool(0, pool, [s](CUstream_st* stream) { return stream == s; });
  void* in_pool = strata_malloc(5 * static_cast<ssize_t>(kMiB), 0, s);
  ASSERT_NE(in_pool, nullptr) << strata_last_error();
  strata_free(in_pool, 0, 0, s);
  void* again = strata_malloc(5 * static_cast<ssize_t>(kMiB), 0, s);
  EXPECT_EQ(again, in_pool) << "a freed pool block serves the capture's next request";
  strata_end_allocate_to_pool(0, pool);
  void* outside = strata_malloc(5 * static_cast<ssize_t>(kMiB), 0, s);
  EXPECT_NE(outside, in_pool);
  strata_free(outside, 0, 0, s);
  strata_free(again, 0, 0, s);
  strata_release_pool(0, pool);
  EXPECT_EQ(strata_empty_cache(0), STRATA_OK);
  EXPECT_EQ(Stat(0, "reserved_bytes.all.current"), 0);
  strata_release_pool(0, pool);  // no user left: reported, not fatal
  EXPECT_TRUE(Contains(strata_last_error(), "no user")) << strata_last_error();
  strata_end_allocate_to_pool(7, pool);
  EXPECT_TRUE(Contains(strata_last_error(), "device")) << strata_last_error();
  EXPECT_EQ(strata_emulated_stream_destroy(s), STRATA_OK);
}

// STRATA_C_FAULTS injects device faults under the whole chain (read when the allocator is built);
// a bad specification is an error naming the variable. The virtual-memory pool makes no device
// mallocs: its physical creates fail instead.
TEST_P(CApiPoolTest, FaultsFromTheEnvironmentReachTheChain) {
  setenv("STRATA_C_FAULTS", GetParam() ? "create_physical_every:1" : "malloc_every:1", 1);
  ASSERT_EQ(strata_use_emulated_device(1, std::size_t{1} << 30), STRATA_OK) << strata_last_error();
  void* failed = strata_malloc(4 * static_cast<ssize_t>(kMiB), 0, nullptr);
  EXPECT_EQ(failed, nullptr);
  EXPECT_TRUE(Contains(strata_last_error(), "out of memory")) << strata_last_error();
  if (failed != nullptr) strata_free(failed, 4 * static_cast<ssize_t>(kMiB), 0, nullptr);
  setenv("STRATA_C_FAULTS", "malloc_every:x", 1);
  ASSERT_EQ(strata_use_emulated_device(1, std::size_t{1} << 30), STRATA_OK) << strata_last_error();
  EXPECT_EQ(strata_malloc(4096, 0, nullptr), nullptr);
  EXPECT_TRUE(Contains(strata_last_error(), "STRATA_C_FAULTS")) << strata_last_error();
  unsetenv("STRATA_C_FAULTS");
  ASSERT_EQ(strata_use_emulated_device(2, std::size_t{1} << 30), STRATA_OK) << strata_last_error();
  void* p = strata_malloc(4096, 0, nullptr);
  EXPECT_NE(p, nullptr) << strata_last_error();
  strata_free(p, 4096, 0, nullptr);
  ExpectDrained(2);
}

TEST_P(CApiPoolTest, MultithreadedMallocFree) {
  constexpr int kThreads = 8;
  constexpr int kIterations = 3000;
  std::atomic<int> failures{0};
  strata::testing::RunThreads(kThreads, [&failures](int t) {
    std::mt19937 rng(static_cast<unsigned>(t) * 7919u + 1u);
    std::uniform_int_distribution<int> shift(8, 21);  // 256 B .. 2 MiB
    struct Block {
      std::uint64_t* p;
      std::size_t words;
      int device;
    };
    std::vector<Block> live;
    const std::uint64_t tag = 0x5157A7A000000000ull | static_cast<std::uint64_t>(t);
    for (int i = 0; i < kIterations; ++i) {
      if (live.size() < 16 && (live.empty() || rng() % 3 != 0)) {
        const std::size_t bytes = (std::size_t{1} << shift(rng)) + rng() % 512;
        const int device = static_cast<int>(rng() % 2);
        auto* p = static_cast<std::uint64_t*>(
            strata_malloc(static_cast<ssize_t>(bytes), device, nullptr));
        if (p == nullptr) {
          failures.fetch_add(1);
          continue;
        }
        const std::size_t words = bytes / sizeof(std::uint64_t);
        p[0] = p[words - 1] = tag;  // overlapping hand-outs would clobber another thread's tag
        live.push_back({p, words, device});
      } else {
        const std::size_t k = rng() % live.size();
        Block b = live[k];
        live[k] = live.back();
        live.pop_back();
        if (b.p[0] != tag || b.p[b.words - 1] != tag) failures.fetch_add(1);
        if (strata_free_checked(b.p) != STRATA_OK) failures.fetch_add(1);
      }
    }
    for (Block& b : live) {
      if (b.p[0] != tag || b.p[b.words - 1] != tag) failures.fetch_add(1);
      if (strata_free_checked(b.p) != STRATA_OK) failures.fetch_add(1);
    }
  });
  EXPECT_EQ(failures.load(), 0) << strata_last_error();
  EXPECT_EQ(strata_live_allocations(), 0);
  for (int device = 0; device < 2; ++device) {
    EXPECT_EQ(Stat(device, "allocation.all.current"), 0);
    EXPECT_EQ(Stat(device, "allocated_bytes.all.current"), 0);
    EXPECT_GT(Stat(device, "allocation.all.allocated"), 1000);
  }
  ExpectDrained(2);
}

INSTANTIATE_TEST_SUITE_P(Pools, CApiPoolTest, ::testing::Bool(), PoolName);

}  // namespace
}  // namespace strata::capi_test
