#include "tools/replay.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "flags/allocator_flags.h"
#include "platform/emulated_runtime.h"
#include "support/test_paths.h"
#include "tools/trace.h"

namespace strata::tools {
namespace {

using flags::AllocatorFlags;

AllocatorFlags Defaults() { return AllocatorFlags::Defaults(); }

Trace Bundled() { return Trace::Load(testing::BundledTracesDir() + "/resnet50_train.trace.gz"); }

// Memory efficiency of the default strategy on the bundled real trace: at most PyTorch's own
// fragmentation, device mallocs within 2x PyTorch's segments, and no host wait but the device
// frees (each cudaFree synchronizes the device).
TEST(ReplayTest, DefaultStrategyBeatsPyTorchOnTheBundledTrace) {
  const Trace trace = Bundled();
  platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = 80ull << 30});
  Replayer replayer(&runtime, "emulated", Defaults());
  Replayer::Options options;
  options.timed_pass = false;
  const ReplayResult r = replayer.Run(trace, options);
  EXPECT_EQ(r.events, trace.num_events());
  EXPECT_EQ(r.peak_requested_bytes, trace.header().torch_peak_requested);
  EXPECT_GE(r.peak_allocated_bytes, r.peak_requested_bytes);
  EXPECT_GE(r.peak_reserved_bytes, r.peak_allocated_bytes);
  EXPECT_LE(r.fragmentation, r.torch_fragmentation);
  EXPECT_LE(r.device_mallocs, 2 * static_cast<std::int64_t>(trace.header().torch_segments_peak));
  EXPECT_EQ(r.syncs, static_cast<std::uint64_t>(r.device_frees));
  EXPECT_EQ(r.ooms, 0);
  EXPECT_TRUE(r.oom_message.empty());
  EXPECT_EQ(runtime.used_bytes(0), 0u);  // everything given back when the facade went away
}

TEST(ReplayTest, SharedTracesMeetTheMemoryTargets) {
  std::string why;
  const std::string dir = testing::SharedTracesDir(&why);
  if (dir.empty()) GTEST_SKIP() << why;
  double log_sum = 0;
  int n = 0;
  for (const char* name :
       {"resnet50_train", "gpt2_train", "bert_infer_dynamic", "multistream_prefetch"}) {
    const Trace trace = Trace::Load(dir + "/" + name + ".trace.gz");
    platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = 144ull << 30});
    Replayer::Options options;
    options.timed_pass = false;
    const ReplayResult r = Replayer(&runtime, "emulated", Defaults()).Run(trace, options);
    SCOPED_TRACE(name);
    EXPECT_LE(r.fragmentation, r.torch_fragmentation);
    EXPECT_LE(r.device_mallocs, 2 * static_cast<std::int64_t>(trace.header().torch_segments_peak));
    EXPECT_EQ(r.syncs, static_cast<std::uint64_t>(r.device_frees));
    log_sum += std::log(r.fragmentation);
    ++n;
  }
  EXPECT_LE(std::exp(log_sum / n), 1.10);
}

TEST(ReplayTest, MemoryLimitReportsTheEventAndTheMessage) {
  const Trace trace = Bundled();
  platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = 80ull << 30});
  AllocatorFlags f = Defaults();
  f.gpu_memory_limit_mb = 1024;  // the trace peaks near 3 GiB
  Replayer::Options options;
  options.timed_pass = false;
  const ReplayResult r = Replayer(&runtime, "emulated", f).Run(trace, options);
  EXPECT_GT(r.oom_event, 0u);
  EXPECT_LT(r.oom_event, trace.num_events());
  EXPECT_NE(r.oom_message.find("gpu_memory_limit_mb"), std::string::npos) << r.oom_message;
  EXPECT_EQ(runtime.used_bytes(0), 0u);
}

TEST(ReplayTest, JsonHasExactlyTheDocumentedKeys) {
  const Trace trace = Trace::Parse("a 1 1000 0\na 2 3000000 1\nf 1 0\nf 2 1\n", "tiny");
  platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = 1ull << 30});
  const ReplayResult r = Replayer(&runtime, "emulated", Defaults()).Run(trace, {});
  const std::string json = r.ToJson();
  for (const char* key :
       {"trace", "strategy", "device", "events", "peak_requested_bytes", "peak_allocated_bytes",
        "peak_reserved_bytes", "fragmentation", "device_mallocs", "device_frees", "syncs", "ooms",
        "ns_per_event", "torch_peak_reserved_bytes", "torch_fragmentation"}) {
    EXPECT_NE(json.find(std::string("\"") + key + "\":"), std::string::npos) << key << " " << json;
  }
  EXPECT_EQ(r.events, 4u);
  EXPECT_EQ(r.peak_requested_bytes, 3001000u);
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '}');
}

TEST(ReplayTest, EveryStrategyReplaysTheBundledTrace) {
  const Trace trace = Bundled();
  for (auto strategy :
       {flags::AllocatorStrategy::kNaiveBestFit, flags::AllocatorStrategy::kThreadLocal}) {
    platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = 80ull << 30});
    AllocatorFlags f = Defaults();
    f.allocator_strategy = strategy;
    Replayer::Options options;
    options.timed_pass = false;
    const ReplayResult r = Replayer(&runtime, "emulated", f).Run(trace, options);
    EXPECT_TRUE(r.oom_message.empty()) << r.oom_message;
    EXPECT_GE(r.peak_reserved_bytes, r.peak_requested_bytes);
    EXPECT_EQ(runtime.used_bytes(0), 0u);
  }
}

}  // namespace
}  // namespace strata::tools
