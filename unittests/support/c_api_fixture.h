// The fixtures of the C ABI's tests (c_api_alloc_test.cc, c_api_stats_test.cc,
// c_api_lifecycle_test.cc; one binary, c_api_test, linked with libstrata_c.so only): a fresh
// emulated allocator per test, the same over both device pools, and reading the statistics JSON.
// Everything goes through the exported C functions. The test files live in this namespace.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "strata/c_api.h"

namespace strata::capi_test {

inline constexpr std::size_t kMiB = std::size_t{1} << 20;

// The statistics JSON of `device` (strata_memory_stats_json).
inline std::string StatsJson(int device) {
  const int n = strata_memory_stats_json(device, nullptr, 0);
  EXPECT_GT(n, 0) << strata_last_error();
  if (n <= 0) return "";
  std::string s(static_cast<std::size_t>(n) + 1, '\0');
  EXPECT_EQ(strata_memory_stats_json(device, s.data(), s.size()), n);
  s.resize(static_cast<std::size_t>(n));
  return s;
}

// One integer field of the stats JSON ("reserved_bytes.all.current", ...).
inline std::int64_t Stat(int device, const std::string& key) {
  const std::string json = StatsJson(device);
  const std::string needle = "\"" + key + "\": ";
  const std::size_t at = json.find(needle);
  if (at == std::string::npos) {
    ADD_FAILURE() << "no " << key << " in " << json;
    return -1;
  }
  return std::strtoll(json.c_str() + at + needle.size(), nullptr, 10);
}

inline bool Contains(const std::string& haystack, const std::string& needle) {
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

inline std::string PoolName(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "VmmPool" : "ChunkPool";
}

}  // namespace strata::capi_test
