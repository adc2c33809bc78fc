// The C ABI's lifecycle on the emulated device: set_flags validates and names the key, a
// reconfiguration waits for the calls in flight (and frees racing it finish on the old allocator)
// or is refused and keeps the allocator, the last error is per thread, without the emulated device
// the CUDA runtime is used, and dlopen resolves the functions by name as PyTorch does; threads
// that called and left, or call during their exit, leave nothing in flight.
// This binary, c_api_test, links libstrata_c.so only (never the static strata library: both would
// register the same Abseil flags), so everything here goes through the exported C functions.
// Fixtures: support/c_api_fixture.h.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "strata/c_api.h"
#include "support/c_api_fixture.h"

namespace strata::capi_test {
namespace {

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

// Each calling thread counts its calls in a counter of its own, handed back at its exit: threads
// that called and left are not in flight, and their counters serve the threads after them.
TEST_F(CApiTest, ThreadsThatLeftAreNotInFlight) {
  for (int round = 0; round < 3; ++round) {
    std::vector<std::thread> threads;
    for (int t = 0; t < 16; ++t) {
      threads.emplace_back([] {
        void* p = strata_malloc(static_cast<ssize_t>(kMiB), 0, nullptr);
        EXPECT_NE(p, nullptr) << strata_last_error();
        strata_free(p, 0, 0, nullptr);
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(strata_set_flags(round % 2 == 0 ? "max_split_size_mb:0" : "max_split_size_mb:64"),
              STRATA_OK)
        << strata_last_error();
  }
}

// A thread_local's destructor may call after the thread's counter went back (it was constructed
// before the thread's first call, so it is destroyed after): the call still works and counts,
// and leaves nothing in flight.
TEST_F(CApiTest, CallsDuringThreadExitWorkAndLeaveNothingInFlight) {
  struct FreesAtExit {
    void* p = nullptr;
    ~FreesAtExit() {
      strata_free(p, 0, 0, nullptr);
      void* q = strata_malloc(static_cast<ssize_t>(kMiB), 0, nullptr);
      EXPECT_NE(q, nullptr) << strata_last_error();
      strata_free(q, 0, 0, nullptr);
    }
  };
  std::thread([] {
    thread_local FreesAtExit at_exit;  // before the thread's first call
    at_exit.p = strata_malloc(static_cast<ssize_t>(kMiB), 0, nullptr);
    ASSERT_NE(at_exit.p, nullptr) << strata_last_error();
  }).join();
  EXPECT_EQ(strata_live_allocations(), 0);
  EXPECT_EQ(strata_set_flags("max_split_size_mb:0"), STRATA_OK) << strata_last_error();
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

// Mallocs racing reconfigurations: a malloc that read the old allocator and returned while the
// reconfiguration looked must make it refuse; a success with a block live would leave that block
// (and the device memory of the retired allocator) behind for good.
TEST_F(CApiTest, MallocsRacingReconfigurationsNeverStrandAnAllocator) {
  ASSERT_EQ(strata_use_emulated_device(1, 256 * kMiB), STRATA_OK) << strata_last_error();
  std::atomic<bool> stop{false};
  std::atomic<void*> held{nullptr};
  std::atomic<int> mallocs{0};
  std::thread worker([&] {
    while (!stop.load()) {
      void* p = strata_malloc(static_cast<ssize_t>(kMiB), 0, nullptr);
      if (p == nullptr) continue;
      mallocs.fetch_add(1);
      held.store(p);
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // live most of the time
      held.store(nullptr);
      strata_free(p, static_cast<ssize_t>(kMiB), 0, nullptr);
    }
  });
  // Successes come only while the worker is between a free and its next malloc: try until a few
  // have happened (a few hundred a second).
  int succeeded = 0, stranded = 0;
  while (mallocs.load() == 0) std::this_thread::yield();
  for (int i = 0; i < 2000000 && succeeded < 5; ++i) {
    if (strata_set_flags(i % 2 == 0 ? "thread_cache_mb:8" : "thread_cache_mb:16") != STRATA_OK) {
      continue;
    }
    ++succeeded;
    // Right after a success, a block still held must belong to the new allocator.
    if (void* p = held.load(); p != nullptr) {
      char stats[1 << 14];
      ASSERT_GT(strata_memory_stats_json(0, stats, sizeof stats), 0);
      const bool still_held = held.load() == p;
      if (still_held &&
          std::string(stats).find("\"allocated_bytes.all.current\": 0,") != std::string::npos) {
        ++stranded;
      }
    }
  }
  stop.store(true);
  worker.join();
  EXPECT_EQ(stranded, 0) << "of " << succeeded << " successful reconfigurations";
  ASSERT_EQ(strata_live_allocations(), 0);
  // Nothing of the device is left with a retired allocator.
  ASSERT_EQ(strata_empty_cache(0), STRATA_OK);
  void* big = strata_malloc(static_cast<ssize_t>(240 * kMiB), 0, nullptr);
  EXPECT_NE(big, nullptr) << strata_last_error();
  strata_free(big, static_cast<ssize_t>(240 * kMiB), 0, nullptr);
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
  for (const char* name : {"strata_malloc_or_throw",
                           "strata_begin_allocate_to_pool",
                           "strata_end_allocate_to_pool",
                           "strata_release_pool",
                           "strata_free_checked",
                           "strata_record_stream",
                           "strata_empty_cache",
                           "strata_memory_stats_json",
                           "strata_memory_stats_values",
                           "strata_memory_summary",
                           "strata_reset_peak_stats",
                           "strata_reset_accumulated_stats",
                           "strata_set_memory_fraction",
                           "strata_live_allocations",
                           "strata_set_flags",
                           "strata_last_error",
                           "strata_use_emulated_device",
                           "strata_emulated_stream_create",
                           "strata_emulated_stream_destroy",
                           "strata_emulated_stream_pause",
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
}  // namespace strata::capi_test
