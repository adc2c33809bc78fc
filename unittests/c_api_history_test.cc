// The C ABI's memory history, snapshot and out-of-memory observers, on the emulated device
// (linked with libstrata_c.so only, like the other c_api_*_test.cc of the c_api_test binary).
#include <gtest/gtest.h>
#include <zlib.h>

#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "strata/c_api.h"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

class CApiHistoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(strata_set_flags("allocator_strategy:auto_growth,use_system_allocator:false,"
                               "use_stream_safe_cuda_allocator:true,gpu_allocator_retry_time:0"),
              STRATA_OK)
        << strata_last_error();
    ASSERT_EQ(strata_use_emulated_device(1, 64 * kMiB), STRATA_OK) << strata_last_error();
  }
  void TearDown() override { EXPECT_EQ(strata_live_allocations(), 0); }
};

std::string ReadGzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  if (f == nullptr) return "";
  std::string text;
  char buf[4096];
  int n = 0;
  while ((n = gzread(f, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
  gzclose(f);
  return text;
}

std::size_t Context(char* buf, std::size_t len, void* user_data) {
  const std::string text = "frame " + std::to_string(++*static_cast<int*>(user_data)) +
                           std::string(300, 'x');  // longer than strata's first buffer
  std::snprintf(buf, len, "%s", text.c_str());
  return text.size();
}

TEST_F(CApiHistoryTest, RecordsToAFileWithContexts) {
  int calls = 0;
  ASSERT_EQ(strata_record_history(0, 1000, &Context, &calls), STRATA_OK) << strata_last_error();
  void* p = strata_malloc(4096, 0, nullptr);
  ASSERT_NE(p, nullptr);
  strata_free(p, 4096, 0, nullptr);
  const std::string path =
      ::testing::TempDir() + "/strata_c_history_" + std::to_string(::getpid()) + ".trace.gz";
  ASSERT_EQ(strata_stop_history(0, path.c_str()), STRATA_OK) << strata_last_error();
  const std::string text = ReadGzip(path);
  std::remove(path.c_str());
  EXPECT_EQ(text.rfind("# {", 0), 0u) << text;
  EXPECT_NE(text.find("\na 0 4096 0 "), std::string::npos) << text;
  EXPECT_NE(text.find("\nf 0 0 "), std::string::npos) << text;
  EXPECT_NE(text.find("\nctx 1 \"frame 2" + std::string(300, 'x') + "\"\n"), std::string::npos)
      << text.substr(0, 600);  // the second call got the whole text
  EXPECT_EQ(calls, 2);
  // Not recording now; bad arguments.
  EXPECT_EQ(strata_stop_history(0, path.c_str()), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(strata_last_error()).find("not recording"), std::string::npos);
  ASSERT_EQ(strata_record_history(0, 0, nullptr, nullptr), STRATA_OK);
  EXPECT_EQ(strata_stop_history(0, nullptr), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_stop_history(5, path.c_str()), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_record_history(0, std::size_t{1} << 40, nullptr, nullptr),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_stop_history(0, "/nonexistent-dir/x.trace"), STRATA_ERROR_INTERNAL);
  EXPECT_NE(std::string(strata_last_error()).find("/nonexistent-dir/x.trace"), std::string::npos);
}

TEST_F(CApiHistoryTest, SnapshotFollowsSnprintfRules) {
  void* p = strata_malloc(1000, 0, nullptr);
  ASSERT_NE(p, nullptr);
  const int n = strata_snapshot(0, nullptr, 0);
  ASSERT_GT(n, 0) << strata_last_error();
  std::string s(static_cast<std::size_t>(n) + 1, '\0');
  ASSERT_EQ(strata_snapshot(0, s.data(), s.size()), n);
  s.resize(static_cast<std::size_t>(n));
  const nlohmann::json j = nlohmann::json::parse(s);
  ASSERT_EQ(j["segments"].size(), 1u);
  EXPECT_EQ(j["segments"][0]["blocks"][0]["address"].get<std::uintptr_t>(),
            reinterpret_cast<std::uintptr_t>(p));
  EXPECT_EQ(j["segments"][0]["blocks"][0]["requested_size"], 1000);
  EXPECT_EQ(j["segments"][0]["blocks"][0]["state"], "allocated");
  strata_free(p, 1000, 0, nullptr);
}

struct Seen {
  int calls = 0;
  int device = -1;
  std::size_t requested = 0;
  std::string stats, snapshot;
};

void Observe(int device, std::size_t requested, const char* stats, const char* snapshot,
             void* user_data) {
  auto* seen = static_cast<Seen*>(user_data);
  ++seen->calls;
  seen->device = device;
  seen->requested = requested;
  seen->stats = stats;
  seen->snapshot = snapshot != nullptr ? snapshot : "";
}

TEST_F(CApiHistoryTest, OomObserversHearEachFailedMalloc) {
  Seen plain, with_snapshot;
  const int a = strata_add_oom_observer(&Observe, &plain, 0);
  const int b = strata_add_oom_observer(&Observe, &with_snapshot, 1);
  ASSERT_GT(a, 0) << strata_last_error();
  ASSERT_GT(b, 0) << strata_last_error();
  EXPECT_NE(a, b);
  void* live = strata_malloc(8 * kMiB, 0, nullptr);
  ASSERT_NE(live, nullptr);
  EXPECT_EQ(strata_malloc(100 * kMiB, 0, nullptr), nullptr);
  EXPECT_EQ(plain.calls, 1);
  EXPECT_EQ(plain.device, 0);
  EXPECT_EQ(plain.requested, 100 * kMiB);
  EXPECT_EQ(nlohmann::json::parse(plain.stats)["allocated_bytes.all.current"], 8 * kMiB);
  EXPECT_TRUE(plain.snapshot.empty());
  ASSERT_EQ(with_snapshot.calls, 1);
  EXPECT_EQ(nlohmann::json::parse(with_snapshot.snapshot)["segments"].size(), 1u);
  ASSERT_EQ(strata_remove_oom_observer(a), STRATA_OK);
  EXPECT_EQ(strata_malloc(100 * kMiB, 0, nullptr), nullptr);
  EXPECT_EQ(plain.calls, 1);
  EXPECT_EQ(with_snapshot.calls, 2);
  EXPECT_EQ(strata_remove_oom_observer(a), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_add_oom_observer(nullptr, nullptr, 0), STRATA_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(strata_remove_oom_observer(b), STRATA_OK);
  strata_free(live, 8 * kMiB, 0, nullptr);
}

// A thread may end inside a callback (pthread_exit, or Python ending a daemon thread that calls
// back into it at exit): the unwind passes through strata, which neither swallows it (abort:
// "exception not rethrown") nor stops it at a noexcept frame (terminate), and strata stays usable.
void EndThread(int, std::size_t, const char*, const char*, void*) { pthread_exit(nullptr); }

void* MallocPastTheDevice(void*) {
  strata_malloc(100 * kMiB, 0, nullptr);
  ADD_FAILURE() << "the observer should have ended this thread";
  return nullptr;
}

TEST_F(CApiHistoryTest, AThreadEndingInsideAnObserverEndsCleanly) {
  const int id = strata_add_oom_observer(&EndThread, nullptr, 0);
  ASSERT_GT(id, 0) << strata_last_error();
  pthread_t thread;
  ASSERT_EQ(pthread_create(&thread, nullptr, &MallocPastTheDevice, nullptr), 0);
  ASSERT_EQ(pthread_join(thread, nullptr), 0);
  ASSERT_EQ(strata_remove_oom_observer(id), STRATA_OK);
  Seen seen;
  const int again = strata_add_oom_observer(&Observe, &seen, 0);
  ASSERT_GT(again, 0) << strata_last_error();
  EXPECT_EQ(strata_malloc(100 * kMiB, 0, nullptr), nullptr);
  EXPECT_EQ(seen.calls, 1) << "observers are still called on this thread";
  void* p = strata_malloc(kMiB, 0, nullptr);
  EXPECT_NE(p, nullptr) << strata_last_error();
  strata_free(p, kMiB, 0, nullptr);
  ASSERT_EQ(strata_remove_oom_observer(again), STRATA_OK);
}

// Observer ids are never reused: an id kept across a reconfiguration cannot remove the observer
// that a later registration got.
TEST_F(CApiHistoryTest, AnObserverIdFromBeforeAReconfigurationRemovesNothingNew) {
  Seen old_seen, new_seen;
  const int old_id = strata_add_oom_observer(&Observe, &old_seen, 0);
  ASSERT_GT(old_id, 0) << strata_last_error();
  ASSERT_EQ(strata_use_emulated_device(1, 64 * kMiB), STRATA_OK) << strata_last_error();
  const int new_id = strata_add_oom_observer(&Observe, &new_seen, 0);
  ASSERT_GT(new_id, 0) << strata_last_error();
  EXPECT_NE(new_id, old_id);
  EXPECT_EQ(strata_remove_oom_observer(old_id), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_malloc(100 * kMiB, 0, nullptr), nullptr);
  EXPECT_EQ(new_seen.calls, 1);
  EXPECT_EQ(old_seen.calls, 0);
  ASSERT_EQ(strata_remove_oom_observer(new_id), STRATA_OK);
}

}  // namespace
