// The JSON strata writes (ReplayResult::ToJson, MemoryStatsToJson), read back with a JSON parser:
// valid documents, the documented keys in order, exact values, and null for non-finite numbers.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "allocation/memory_stats.h"
#include "nlohmann/json.hpp"
#include "reporting/memory_summary.h"
#include "tools/replay.h"

namespace strata {
namespace {

using nlohmann::ordered_json;

std::vector<std::string> Keys(const ordered_json& j) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : j.items()) keys.push_back(key);
  return keys;
}

tools::ReplayResult SampleResult() {
  tools::ReplayResult r;
  r.trace = "gpt2 \"train\"\n";  // quotes and a control character must be escaped
  r.strategy = "auto_growth";
  r.device = "emulated";
  r.events = 12355;
  r.peak_requested_bytes = std::numeric_limits<std::uint64_t>::max();
  r.peak_allocated_bytes = 13594220032;
  r.peak_reserved_bytes = 14396948480;
  r.fragmentation = 1.0590502678621874;
  r.device_mallocs = 143;
  r.device_frees = -1;
  r.syncs = 7;
  r.ooms = 0;
  r.ns_per_event = 96.5;
  r.torch_peak_reserved_bytes = 15286140928;
  r.torch_fragmentation = 1.1244599275233043;
  return r;
}

TEST(JsonOutputTest, ReplayResultRoundTrips) {
  const tools::ReplayResult r = SampleResult();
  const std::string text = r.ToJson();
  EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  const ordered_json j = ordered_json::parse(text);
  EXPECT_EQ(Keys(j), (std::vector<std::string>{
                         "trace", "strategy", "device", "events", "peak_requested_bytes",
                         "peak_allocated_bytes", "peak_reserved_bytes", "fragmentation",
                         "device_mallocs", "device_frees", "syncs", "ooms", "ns_per_event",
                         "torch_peak_reserved_bytes", "torch_fragmentation", "num_device_map",
                         "num_device_unmap", "num_stream_waits", "device_lag"}));
  EXPECT_EQ(j["trace"], r.trace);
  EXPECT_EQ(j["events"].get<std::uint64_t>(), r.events);
  EXPECT_EQ(j["peak_requested_bytes"].get<std::uint64_t>(), r.peak_requested_bytes);
  EXPECT_EQ(j["device_frees"].get<std::int64_t>(), -1);
  EXPECT_EQ(j["fragmentation"].get<double>(), r.fragmentation);  // exact: shortest round trip
  EXPECT_EQ(j["torch_fragmentation"].get<double>(), r.torch_fragmentation);
  EXPECT_TRUE(j["ns_per_event"].is_number_float());
}

TEST(JsonOutputTest, ReplayResultHasTheOomFieldsOnlyAfterAnOom) {
  tools::ReplayResult r = SampleResult();
  EXPECT_FALSE(ordered_json::parse(r.ToJson()).contains("oom_event"));
  r.oom_event = 42;
  r.oom_message = "out of memory \xff (limit)";  // invalid UTF-8 is replaced, not thrown on
  const ordered_json j = ordered_json::parse(r.ToJson());
  EXPECT_EQ(j["oom_event"].get<std::uint64_t>(), 42u);
  EXPECT_EQ(j["oom_message"].get<std::string>().rfind("out of memory ", 0), 0u);
  EXPECT_EQ(Keys(j).back(), "oom_message");
}

TEST(JsonOutputTest, NonFiniteNumbersAreNull) {
  tools::ReplayResult r = SampleResult();
  r.fragmentation = std::numeric_limits<double>::quiet_NaN();
  r.ns_per_event = std::numeric_limits<double>::infinity();
  r.torch_fragmentation = -std::numeric_limits<double>::infinity();
  const ordered_json j = ordered_json::parse(r.ToJson());
  EXPECT_TRUE(j["fragmentation"].is_null());
  EXPECT_TRUE(j["ns_per_event"].is_null());
  EXPECT_TRUE(j["torch_fragmentation"].is_null());
}

TEST(JsonOutputTest, MemoryStatsHaveTorchKeysInPythonLayout) {
  allocation::MemoryStats s;
  s.allocation[allocation::kAggregate].current = 2;
  s.reserved_bytes[allocation::kLargePool].peak = std::numeric_limits<std::int64_t>::max();
  s.inactive_split_bytes[allocation::kSmallPool].freed = -5;
  s.oversize_segments.allocated = 9;
  s.num_ooms = 3;
  s.max_split_size = 33554432;
  const std::string text = reporting::MemoryStatsToJson(s);
  // json.dumps()'s layout, which C ABI users grep: one line, ": " and ", " separators.
  EXPECT_EQ(text.find('\n'), std::string::npos);
  EXPECT_EQ(text.rfind("{\"allocation.all.current\": 2, \"allocation.all.peak\": 0, ", 0), 0u)
      << text;
  EXPECT_NE(text.find("\"max_split_size\": 33554432}"), std::string::npos) << text;

  const ordered_json j = ordered_json::parse(text);
  // 9 arrays x 3 pools + 2 oversize values, 4 figures each, and 12 scalars: PyTorch's keys
  // (num_sync_all_streams and oversize_allocations among them) plus strata's device and
  // thread-cache counters.
  EXPECT_EQ(j.size(), (9u * 3 + 2) * 4 + 12);
  for (const char* torch_key :
       {"num_sync_all_streams", "oversize_allocations.current", "oversize_allocations.peak",
        "oversize_allocations.allocated", "oversize_allocations.freed", "num_device_alloc"}) {
    EXPECT_TRUE(j.contains(torch_key)) << torch_key;
  }
  EXPECT_EQ(Keys(j)[4], "allocation.small_pool.current");
  EXPECT_EQ(j["reserved_bytes.large_pool.peak"].get<std::int64_t>(),
            std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(j["inactive_split_bytes.small_pool.freed"].get<std::int64_t>(), -5);
  EXPECT_EQ(j["oversize_segments.allocated"].get<std::int64_t>(), 9);
  EXPECT_EQ(j["num_ooms"].get<std::int64_t>(), 3);
  for (const auto& [key, value] : j.items()) EXPECT_TRUE(value.is_number_integer()) << key;
}

}  // namespace
}  // namespace strata
