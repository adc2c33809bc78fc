// The C ABI (strata/c_api.h) on the emulated device: what PyTorch's pluggable allocator and CuPy
// rely on. This binary links libstrata_c.so only (never the static strata library: both would
// register the same Abseil flags), so everything here goes through the exported C functions.
#include "strata/c_api.h"
#include "support/threads.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

std::string StatsJson(int device) {
  const int n = strata_memory_stats_json(device, nullptr, 0);
  EXPECT_GT(n, 0) << strata_last_error();
  if (n <= 0) return "";
  std::string s(static_cast<std::size_t>(n) + 1, '\0');
  EXPECT_EQ(strata_memory_stats_json(device, s.data(), s.size()), n);
  s.resize(static_cast<std::size_t>(n));
  return s;
}

// One integer field of the stats JSON ("reserved_bytes.all.current", ...).
std::int64_t Stat(int device, const std::string& key) {
  const std::string json = StatsJson(device);
  const std::string needle = "\"" + key + "\": ";
  const std::size_t at = json.find(needle);
  if (at == std::string::npos) {
    ADD_FAILURE() << "no " << key << " in " << json;
    return -1;
  }
  return std::strtoll(json.c_str() + at + needle.size(), nullptr, 10);
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Every test starts on a fresh emulated allocator (2 devices of 1 GiB) with known flags.
class CApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(strata_live_allocations(), 0) << "a previous test leaked allocations";
    ASSERT_EQ(strata_set_flags("allocator_strategy:auto_growth,use_system_allocator:false,"
                               "use_stream_safe_cuda_allocator:true,max_split_size_mb:0,"
                               "gpu_allocator_retry_time:20,use_virtual_memory_auto_growth:false"),
              STRATA_OK)
        << strata_last_error();
    ASSERT_EQ(strata_use_emulated_device(2, std::size_t{1} << 30), STRATA_OK)
        << strata_last_error();
  }
  void TearDown() override { EXPECT_EQ(strata_live_allocations(), 0); }
};

// The stress and fault-injection tests run over the chunk pool (false) and the virtual-memory
// pool (true); after each, one strata_empty_cache per device gives every byte back.
class CApiPoolTest : public CApiTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    CApiTest::SetUp();
    if (GetParam()) {
      ASSERT_EQ(strata_set_flags("use_virtual_memory_auto_growth:true"), STRATA_OK)
          << strata_last_error();
    }
  }
  static void ExpectDrained(int devices) {
    for (int device = 0; device < devices; ++device) {
      ASSERT_EQ(strata_empty_cache(device), STRATA_OK) << strata_last_error();
      EXPECT_EQ(Stat(device, "reserved_bytes.all.current"), 0) << "device " << device;
    }
  }
};

std::string PoolName(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "VmmPool" : "ChunkPool";
}

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

TEST_F(CApiTest, StatsJsonAndSummaryFollowSnprintfRules) {
  void* p = strata_malloc(static_cast<ssize_t>(2 * kMiB), 0, nullptr);
  ASSERT_NE(p, nullptr);
  const std::string json = StatsJson(0);
  ASSERT_GT(json.size(), 100u);
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '}');
  EXPECT_TRUE(Contains(json, "\"reserved_bytes.all.peak\": ")) << json;

  // Too small: truncated, NUL-terminated, and the needed length is returned.
  char small[8];
  std::memset(small, 'x', sizeof(small));
  EXPECT_EQ(strata_memory_stats_json(0, small, sizeof(small)), static_cast<int>(json.size()));
  EXPECT_EQ(std::string(small), json.substr(0, sizeof(small) - 1));
  // Exactly too small by one (no room for the NUL).
  std::string almost(json.size(), 'x');
  EXPECT_EQ(strata_memory_stats_json(0, almost.data(), almost.size()),
            static_cast<int>(json.size()));
  EXPECT_EQ(std::string(almost.c_str()), json.substr(0, json.size() - 1));
  // len 1: only the NUL.
  char one = 'x';
  EXPECT_EQ(strata_memory_stats_json(0, &one, 1), static_cast<int>(json.size()));
  EXPECT_EQ(one, '\0');
  // NULL with a length is an error, not a crash.
  EXPECT_EQ(strata_memory_stats_json(0, nullptr, 16), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(strata_last_error(), "buf is NULL")) << strata_last_error();

  const int n = strata_memory_summary(0, nullptr, 0);
  ASSERT_GT(n, 0);
  std::string summary(static_cast<std::size_t>(n) + 1, '\0');
  EXPECT_EQ(strata_memory_summary(0, summary.data(), summary.size()), n);
  summary.resize(static_cast<std::size_t>(n));
  EXPECT_TRUE(Contains(summary, "strata memory summary, cuda:0")) << summary;
  EXPECT_TRUE(Contains(summary, "Allocated memory")) << summary;
  EXPECT_TRUE(Contains(summary, "2048 KiB") || Contains(summary, "2 MiB")) << summary;
  char tiny[4];
  EXPECT_EQ(strata_memory_summary(0, tiny, sizeof(tiny)), n);
  EXPECT_EQ(std::strlen(tiny), 3u);
  strata_free(p, 0, 0, nullptr);
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

TEST_F(CApiTest, SetFlagsValidatesAndNamesTheKey) {
  EXPECT_EQ(strata_set_flags("max_split_size_mb:5"), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(strata_last_error(), "max_split_size_mb")) << strata_last_error();
  EXPECT_TRUE(Contains(strata_last_error(), "strata_set_flags")) << strata_last_error();
  EXPECT_EQ(strata_set_flags("no_such_key:1"), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(strata_last_error(), "unknown key 'no_such_key'")) << strata_last_error();
  EXPECT_EQ(strata_set_flags("backend:cudaMallocAsync"), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(strata_last_error(), "'backend' is a PyTorch allocator option"))
      << strata_last_error();
  EXPECT_EQ(strata_set_flags("free_idle_chunk:maybe"), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(strata_last_error(), "free_idle_chunk")) << strata_last_error();
  EXPECT_EQ(strata_set_flags("garbage"), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_set_flags(nullptr), STRATA_ERROR_INVALID_ARGUMENT);

  // Long configs: bounded, and an error does not quote the whole config once per entry.
  std::string entries = "max_split_size_mb:0";
  while (entries.size() < 60 * 1024) entries += ",max_split_size_mb:0";
  ASSERT_EQ(strata_set_flags((entries + ",no_such_key:1").c_str()), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(strata_last_error(), "no_such_key")) << strata_last_error();
  EXPECT_LT(std::string(strata_last_error()).size(), 4096u);
  ASSERT_EQ(strata_set_flags((entries + "," + entries).c_str()), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(strata_last_error(), "bytes long")) << strata_last_error();
  EXPECT_LT(std::string(strata_last_error()).size(), 4096u);
  ASSERT_EQ(strata_set_flags(entries.c_str()), STRATA_OK) << strata_last_error();

  // All or nothing: the valid first entry of a failing string is not applied either.
  EXPECT_EQ(strata_set_flags("max_split_size_mb:256,no_such_key:1"), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Stat(0, "max_split_size"), 0);

  // A valid change takes effect for the next allocations.
  ASSERT_EQ(strata_set_flags("max_split_size_mb:64"), STRATA_OK) << strata_last_error();
  EXPECT_EQ(Stat(0, "max_split_size"), 64 * static_cast<std::int64_t>(kMiB));
  // A cached block above max_split_size is not split for a small request.
  char* big = static_cast<char*>(strata_malloc(100 * static_cast<ssize_t>(kMiB), 0, nullptr));
  ASSERT_NE(big, nullptr);
  strata_free(big, 0, 0, nullptr);
  // (With max_split_size_mb:0 this 8 MiB request is carved from the cached 100 MiB block, and
  // reserved stays 100 MiB; otherwise it grows a chunk of its own. Addresses prove nothing here:
  // the idle 100 MiB chunk may be given back and its address space handed out again.)
  char* p = static_cast<char*>(strata_malloc(8 * static_cast<ssize_t>(kMiB), 0, nullptr));
  ASSERT_NE(p, nullptr);
  EXPECT_NE(Stat(0, "reserved_bytes.all.current"), 100 * static_cast<std::int64_t>(kMiB))
      << "the oversize block was split";

  // Not while an allocation is live; nothing changes then.
  EXPECT_EQ(strata_set_flags("max_split_size_mb:128"), STRATA_ERROR_BUSY);
  EXPECT_TRUE(Contains(strata_last_error(), "no allocation is live")) << strata_last_error();
  EXPECT_EQ(strata_use_emulated_device(1, kMiB << 10), STRATA_ERROR_BUSY);
  strata_free(p, 0, 0, nullptr);
  EXPECT_EQ(Stat(0, "max_split_size"), 64 * static_cast<std::int64_t>(kMiB));
}

TEST_F(CApiTest, EmptyCacheReturnsMemoryToTheDevice) {
  std::vector<void*> blocks;
  for (ssize_t size : {512, 4096, 1 << 20, 3 << 20, 17 << 20}) {
    blocks.push_back(strata_malloc(size, 0, nullptr));
    ASSERT_NE(blocks.back(), nullptr);
  }
  for (void* b : blocks) strata_free(b, 0, 0, nullptr);
  EXPECT_GT(Stat(0, "reserved_bytes.all.current"), 20 << 20);
  EXPECT_EQ(strata_empty_cache(0), STRATA_OK) << strata_last_error();
  EXPECT_EQ(Stat(0, "reserved_bytes.all.current"), 0);
  EXPECT_EQ(Stat(0, "segment.all.current"), 0);
  EXPECT_GT(Stat(0, "reserved_bytes.all.peak"), 20 << 20);
}

// torch.cuda.set_per_process_memory_fraction through the hook's signature (fraction, device).
TEST_F(CApiTest, MemoryFractionCapsTheDevice) {
  EXPECT_EQ(strata_set_memory_fraction(0.25, 0), STRATA_OK) << strata_last_error();
  void* a = strata_malloc(200 * static_cast<ssize_t>(kMiB), 0, nullptr);
  ASSERT_NE(a, nullptr) << strata_last_error();
  EXPECT_EQ(strata_malloc(100 * static_cast<ssize_t>(kMiB), 0, nullptr), nullptr);
  EXPECT_TRUE(Contains(strata_last_error(), "limit")) << strata_last_error();
  void* other = strata_malloc(300 * static_cast<ssize_t>(kMiB), 1, nullptr);  // device 1: no cap
  ASSERT_NE(other, nullptr) << strata_last_error();
  EXPECT_EQ(strata_set_memory_fraction(1.0, 0), STRATA_OK);
  void* b = strata_malloc(100 * static_cast<ssize_t>(kMiB), 0, nullptr);
  EXPECT_NE(b, nullptr) << strata_last_error();
  for (void* p : {a, b, other}) strata_free(p, 0, 0, nullptr);
  try {  // the allocate function PyTorch gets: an exception, never a NULL tensor
    strata_malloc_or_throw(1536 * static_cast<ssize_t>(kMiB), 0, nullptr);
    ADD_FAILURE() << "1.5 GiB fit in 1 GiB";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(Contains(e.what(), "out of memory")) << e.what();
  }
  EXPECT_EQ(strata_malloc_or_throw(0, 0, nullptr), nullptr);
  void* c = strata_malloc_or_throw(1024, 0, nullptr);
  EXPECT_NE(c, nullptr);
  strata_free(c, 1024, 0, nullptr);
  EXPECT_EQ(strata_set_memory_fraction(1.5, 0), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(strata_last_error(), "[0, 1]")) << strata_last_error();
  EXPECT_EQ(strata_set_memory_fraction(0.5, 9), STRATA_ERROR_INVALID_ARGUMENT);
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

// A reconfiguration while another thread is inside a call is refused: that call's allocation
// would otherwise land in the retired allocator, whose cache nobody frees.
TEST_F(CApiTest, ReconfigurationWaitsForCallsInFlight) {
  ASSERT_EQ(strata_use_emulated_device(1, std::size_t{64} << 20), STRATA_OK);
  ASSERT_EQ(strata_set_flags("gpu_allocator_retry_time:20000"), STRATA_OK) << strata_last_error();
  void* side = nullptr;
  ASSERT_EQ(strata_emulated_stream_create(0, &side), STRATA_OK);
  void* p = strata_malloc(48 * static_cast<ssize_t>(kMiB), 0, nullptr);
  ASSERT_NE(p, nullptr) << strata_last_error();
  ASSERT_EQ(strata_record_stream(p, side), 1);
  ASSERT_EQ(strata_emulated_stream_pause(side), STRATA_OK);
  strata_free(p, 0, 0, nullptr);  // deferred: the side stream is blocked
  void* q = nullptr;
  std::thread waiter([&] { q = strata_malloc(48 * static_cast<ssize_t>(kMiB), 0, nullptr); });
  while (Stat(0, "num_alloc_retries") == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(strata_set_flags("max_split_size_mb:0"), STRATA_ERROR_BUSY);
  EXPECT_TRUE(Contains(strata_last_error(), "other threads")) << strata_last_error();
  ASSERT_EQ(strata_emulated_stream_resume(side), STRATA_OK);
  waiter.join();
  EXPECT_NE(q, nullptr) << "the waiting allocation got the reclaimed memory";
  strata_free(q, 0, 0, nullptr);
  EXPECT_EQ(strata_set_flags("max_split_size_mb:0"), STRATA_OK) << strata_last_error();
  EXPECT_EQ(strata_emulated_stream_destroy(side), STRATA_OK);
}

// Frees racing reconfigurations: a free has taken its pointer out of the registry before it
// reaches the allocator, so the reconfiguration may find nothing live while the free is still
// inside the old allocator's layers. That allocator must outlive the free (ThreadSanitizer and
// AddressSanitizer see the use after free otherwise; in a plain build it may pass unnoticed).
TEST_F(CApiTest, FreesRacingReconfigurationsFinishOnTheOldAllocator) {
  constexpr int kRounds = 60;
  constexpr int kThreads = 3;
  constexpr int kBlocks = 8;
  int reconfigured = 0;
  for (int round = 0; round < kRounds; ++round) {
    // Retry on; thread caches off in every other round, so that each free goes through the
    // retry layer, which reads its waiter count after the block went down.
    ASSERT_EQ(strata_set_flags(round % 2 == 0 ? "gpu_allocator_retry_time:1000,thread_cache_mb:0"
                                              : "gpu_allocator_retry_time:2000,thread_cache_mb:16"),
              STRATA_OK)
        << strata_last_error();
    std::vector<std::vector<void*>> blocks(kThreads);
    for (auto& mine : blocks) {
      for (int b = 0; b < kBlocks; ++b) {
        mine.push_back(strata_malloc(static_cast<ssize_t>(kMiB), 0, nullptr));
        ASSERT_NE(mine.back(), nullptr) << strata_last_error();
      }
    }
    std::atomic<bool> go{false};
    std::vector<std::thread> freers;
    freers.reserve(blocks.size());
    for (auto& mine : blocks) {
      freers.emplace_back([&go, &mine] {
        while (!go.load()) {
        }
        for (void* p : mine) strata_free(p, static_cast<ssize_t>(kMiB), 0, nullptr);
      });
    }
    go.store(true);
    // Refused while a block is live or a free is in flight; the first success comes as the last
    // free finishes.
    int rc = STRATA_ERROR_BUSY;
    while (rc == STRATA_ERROR_BUSY) rc = strata_set_flags("max_split_size_mb:0");
    EXPECT_EQ(rc, STRATA_OK) << strata_last_error();
    reconfigured += rc == STRATA_OK ? 1 : 0;
    for (std::thread& t : freers) t.join();
    ASSERT_EQ(strata_live_allocations(), 0);
  }
  EXPECT_EQ(reconfigured, kRounds);
}

// A refused reconfiguration keeps the allocator it had (its statistics show it).
TEST_F(CApiTest, ARefusedReconfigurationKeepsTheAllocator) {
  void* p = strata_malloc(8 * static_cast<ssize_t>(kMiB), 0, nullptr);
  ASSERT_NE(p, nullptr);
  strata_free(p, 0, 0, nullptr);
  ASSERT_EQ(Stat(0, "allocated_bytes.all.peak"), 8 * static_cast<std::int64_t>(kMiB));
  EXPECT_EQ(strata_set_flags("no_such_key:1"), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Stat(0, "allocated_bytes.all.peak"), 8 * static_cast<std::int64_t>(kMiB))
      << "a failed strata_set_flags replaced the allocator";
}

TEST_F(CApiTest, ResetPeakStats) {
  void* p = strata_malloc(8 * static_cast<ssize_t>(kMiB), 0, nullptr);
  ASSERT_NE(p, nullptr);
  strata_free(p, 0, 0, nullptr);
  EXPECT_EQ(Stat(0, "allocated_bytes.all.peak"), 8 * static_cast<std::int64_t>(kMiB));
  EXPECT_EQ(strata_reset_peak_stats(0), STRATA_OK);
  EXPECT_EQ(Stat(0, "allocated_bytes.all.peak"), 0);
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

TEST_F(CApiTest, LastErrorIsPerThread) {
  int not_ours = 0;
  strata_free(&not_ours, 4, 0, nullptr);
  const std::string mine = strata_last_error();
  ASSERT_TRUE(Contains(mine, "unknown pointer"));
  std::string other;
  std::thread([&other] {
    EXPECT_EQ(strata_malloc(-1, 0, nullptr), nullptr);
    other = strata_last_error();
  }).join();
  EXPECT_TRUE(Contains(other, "negative size")) << other;
  EXPECT_EQ(strata_last_error(), mine);
}

TEST_F(CApiTest, WithoutTheEmulatedDeviceUsesCuda) {
  ASSERT_EQ(strata_use_emulated_device(0, 0), STRATA_OK) << strata_last_error();
  void* p = strata_malloc(4096, 0, nullptr);
  if (p == nullptr) {  // no GPU here: the reason, and how to test without one
    EXPECT_TRUE(Contains(strata_last_error(), "no device runtime")) << strata_last_error();
    EXPECT_TRUE(Contains(strata_last_error(), "STRATA_C_DEVICE=emulated")) << strata_last_error();
    EXPECT_EQ(strata_emulated_stream_create(0, &p), STRATA_ERROR_INVALID_ARGUMENT);
  } else {
    EXPECT_EQ(strata_free_checked(p), STRATA_OK);
  }
}

// What PyTorch does: dlopen the library and resolve the functions by name.
TEST(CApiDlopenTest, ResolvesTheFunctionsByName) {
  void* lib = dlopen(STRATA_C_LIB_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  using AllocFn = void* (*)(ssize_t, int, void*);       // (size, device, cudaStream_t)
  using FreeFn = void (*)(void*, ssize_t, int, void*);  // (ptr, size, device, cudaStream_t)
  auto alloc = reinterpret_cast<AllocFn>(dlsym(lib, "strata_malloc"));
  auto free_fn = reinterpret_cast<FreeFn>(dlsym(lib, "strata_free"));
  ASSERT_NE(alloc, nullptr);
  ASSERT_NE(free_fn, nullptr);
  EXPECT_EQ(alloc, &strata_malloc);  // the same library instance as the linked one
  for (const char* name :
       {"strata_malloc_or_throw", "strata_begin_allocate_to_pool", "strata_end_allocate_to_pool",
        "strata_release_pool", "strata_free_checked", "strata_record_stream", "strata_empty_cache",
        "strata_memory_stats_json", "strata_memory_summary", "strata_reset_peak_stats",
        "strata_set_memory_fraction", "strata_live_allocations", "strata_set_flags",
        "strata_last_error", "strata_use_emulated_device", "strata_emulated_stream_create",
        "strata_emulated_stream_destroy", "strata_emulated_stream_pause",
        "strata_emulated_stream_resume"}) {
    EXPECT_NE(dlsym(lib, name), nullptr) << name;
  }
  // strata's C++ internals stay private to the library.
  EXPECT_EQ(dlsym(lib, "_ZN6strata6facade15AllocatorFacade8InstanceEv"), nullptr);

  auto use_emulated =
      reinterpret_cast<int (*)(int, std::size_t)>(dlsym(lib, "strata_use_emulated_device"));
  ASSERT_EQ(use_emulated(1, std::size_t{256} << 20), STRATA_OK) << strata_last_error();
  void* p = alloc(12345, 0, nullptr);
  ASSERT_NE(p, nullptr) << strata_last_error();
  EXPECT_EQ(strata_live_allocations(), 1);
  free_fn(p, 12345, 0, nullptr);
  EXPECT_EQ(strata_live_allocations(), 0);
  EXPECT_EQ(dlclose(lib), 0);
}

}  // namespace
