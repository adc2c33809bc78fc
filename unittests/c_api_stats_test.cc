// The C ABI's statistics and cache control on the emulated device: the stats JSON and summary
// follow snprintf's rules, empty_cache gives memory back to the device, the memory fraction caps
// it, and peaks can be reset.
// This binary, c_api_test, links libstrata_c.so only (never the static strata library: both would
// register the same Abseil flags), so everything here goes through the exported C functions.
// Fixtures: support/c_api_fixture.h.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "strata/c_api.h"
#include "support/c_api_fixture.h"

namespace strata::capi_test {
namespace {

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

TEST_F(CApiTest, StatsValuesReadFiguresByKeyAllOrNothing) {
  void* p = strata_malloc(static_cast<ssize_t>(3 * kMiB), 0, nullptr);
  ASSERT_NE(p, nullptr);
  const char* keys[] = {"allocated_bytes.all.current", "allocation.all.current",
                        "reserved_bytes.all.peak", "num_ooms"};
  std::int64_t values[4] = {-1, -1, -1, -1};
  ASSERT_EQ(strata_memory_stats_values(0, keys, values, 4), STRATA_OK) << strata_last_error();
  EXPECT_GE(values[0], static_cast<std::int64_t>(3 * kMiB));
  EXPECT_EQ(values[1], 1);
  EXPECT_GE(values[2], values[0]);
  EXPECT_EQ(values[3], 0);
  // The same figures as the JSON.
  const std::string json = StatsJson(0);
  EXPECT_TRUE(Contains(json, "\"allocated_bytes.all.current\": " + std::to_string(values[0])))
      << json;

  // An unknown key: an error naming it, and nothing written.
  const char* bad[] = {"allocated_bytes.all.current", "allocated_bytes.all.curent"};
  std::int64_t untouched[2] = {-7, -7};
  EXPECT_EQ(strata_memory_stats_values(0, bad, untouched, 2), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(strata_last_error(), "allocated_bytes.all.curent")) << strata_last_error();
  EXPECT_EQ(untouched[0], -7);
  const char* null_key[] = {nullptr};
  EXPECT_EQ(strata_memory_stats_values(0, null_key, untouched, 1), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_memory_stats_values(0, nullptr, untouched, 1), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_memory_stats_values(0, keys, nullptr, 1), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(strata_memory_stats_values(0, nullptr, nullptr, 0), STRATA_OK);
  EXPECT_EQ(strata_memory_stats_values(-1, keys, values, 1), STRATA_ERROR_INVALID_ARGUMENT);
  strata_free(p, 0, 0, nullptr);

  // Accumulated figures go back to 0; current and peak stay.
  const char* acc[] = {"allocation.all.allocated", "allocation.all.freed",
                       "allocated_bytes.all.peak"};
  std::int64_t before[3];
  ASSERT_EQ(strata_memory_stats_values(0, acc, before, 3), STRATA_OK);
  EXPECT_EQ(before[0], 1);
  EXPECT_EQ(before[1], 1);
  ASSERT_EQ(strata_reset_accumulated_stats(0), STRATA_OK) << strata_last_error();
  std::int64_t after[3];
  ASSERT_EQ(strata_memory_stats_values(0, acc, after, 3), STRATA_OK);
  EXPECT_EQ(after[0], 0);
  EXPECT_EQ(after[1], 0);
  EXPECT_EQ(after[2], before[2]);
  EXPECT_EQ(strata_reset_accumulated_stats(-1), STRATA_ERROR_INVALID_ARGUMENT);
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

TEST_F(CApiTest, ResetPeakStats) {
  void* p = strata_malloc(8 * static_cast<ssize_t>(kMiB), 0, nullptr);
  ASSERT_NE(p, nullptr);
  strata_free(p, 0, 0, nullptr);
  EXPECT_EQ(Stat(0, "allocated_bytes.all.peak"), 8 * static_cast<std::int64_t>(kMiB));
  EXPECT_EQ(strata_reset_peak_stats(0), STRATA_OK);
  EXPECT_EQ(Stat(0, "allocated_bytes.all.peak"), 0);
}

}  // namespace
}  // namespace strata::capi_test
