#include "tools/replay.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "flags/allocator_flags.h"
#include "nlohmann/json.hpp"
#include "platform/emulated_runtime.h"
#include "platform/fault_injection_runtime.h"
#include "support/test_paths.h"
#include "tools/trace.h"

namespace strata::tools {
namespace {

using flags::AllocatorFlags;

AllocatorFlags Defaults() { return AllocatorFlags::Defaults(); }

Trace Bundled() { return Trace::Load(testing::BundledTracesDir() + "/resnet50_train.trace.gz"); }

// A single untimed pass: tests read its figures, never its times.
Replayer::Options Untimed() {
  Replayer::Options options;
  options.timed_pass = false;
  return options;
}

// Two replays that placed every block alike asked the device for the same memory.
void ExpectSameDeviceFootprint(const ReplayResult& a, const ReplayResult& b) {
  EXPECT_EQ(a.peak_reserved_bytes, b.peak_reserved_bytes);
  EXPECT_EQ(a.device_mallocs, b.device_mallocs);
  EXPECT_EQ(a.num_device_map, b.num_device_map);
  EXPECT_EQ(a.num_device_unmap, b.num_device_unmap);
}

AllocatorFlags ChunkPool() {
  AllocatorFlags f = Defaults();
  f.use_virtual_memory_auto_growth = false;
  return f;
}

// Memory efficiency of the default pool (the virtual-memory pool) on the bundled real trace: at
// most PyTorch's own fragmentation, no host wait, and no physical page created twice (a cold pass
// creates at most the pages of its peak: nothing is given back and created again).
TEST(ReplayTest, DefaultStrategyBeatsPyTorchOnTheBundledTrace) {
  const Trace trace = Bundled();
  platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = 80ull << 30});
  Replayer replayer(&runtime, "emulated", Defaults());
  Replayer::Options options = Untimed();
  const ReplayResult r = replayer.Run(trace, options);
  EXPECT_EQ(r.events, trace.num_events());
  EXPECT_EQ(r.peak_requested_bytes, trace.header().torch_peak_requested);
  EXPECT_GE(r.peak_allocated_bytes, r.peak_requested_bytes);
  EXPECT_GE(r.peak_reserved_bytes, r.peak_allocated_bytes);
  EXPECT_LE(r.fragmentation, r.torch_fragmentation);
  EXPECT_GT(r.num_device_map, 0);  // the virtual-memory pool served it
  const auto page = static_cast<std::int64_t>(runtime.VmmGranularity(0));
  EXPECT_LE(r.device_mallocs, static_cast<std::int64_t>(r.peak_reserved_bytes) / page);
  EXPECT_EQ(r.syncs, 0u);
  EXPECT_EQ(r.ooms, 0);
  EXPECT_TRUE(r.oom_message.empty());
  EXPECT_EQ(runtime.used_bytes(0), 0u);  // everything given back when the facade went away
}

// The chunk pool (use_virtual_memory_auto_growth=false) on the same trace: at most PyTorch's
// fragmentation, device mallocs within 2x PyTorch's segments, and no host wait but the device
// frees (each cudaFree synchronizes the device).
TEST(ReplayTest, TheChunkPoolBeatsPyTorchOnTheBundledTrace) {
  const Trace trace = Bundled();
  platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = 80ull << 30});
  Replayer::Options options = Untimed();
  const ReplayResult r = Replayer(&runtime, "emulated", ChunkPool()).Run(trace, options);
  EXPECT_EQ(r.num_device_map, 0);
  EXPECT_LE(r.fragmentation, r.torch_fragmentation);
  EXPECT_LE(r.device_mallocs, 2 * static_cast<std::int64_t>(trace.header().torch_segments_peak));
  EXPECT_EQ(r.syncs, static_cast<std::uint64_t>(r.device_frees));
  EXPECT_EQ(r.ooms, 0);
  EXPECT_EQ(runtime.used_bytes(0), 0u);
}

// The shared traces: the default pool reserves no more than the best peer for each (PyTorch's
// expandable segments, or cudaMallocAsync for gpt2_train, end to end on an H100, 2026-11-25), with
// a geometric mean of at most 1.02, no host wait and no page created twice; the chunk pool at most
// PyTorch's own figure, with device mallocs within 2x PyTorch's segments.
TEST(ReplayTest, SharedTracesMeetTheMemoryTargets) {
  std::string why;
  const std::string dir = testing::SharedTracesDir(&why);
  if (dir.empty()) GTEST_SKIP() << why;
  struct Target {
    const char* name;
    double best_peer;
  };
  double log_sum = 0, chunk_log_sum = 0;
  int n = 0;
  for (const Target t :
       {Target{"resnet50_train", 1.017}, Target{"gpt2_train", 1.054},
        Target{"bert_infer_dynamic", 1.108}, Target{"multistream_prefetch", 1.122}}) {
    const Trace trace = Trace::Load(dir + "/" + t.name + ".trace.gz");
    SCOPED_TRACE(t.name);
    Replayer::Options options = Untimed();
    {
      platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = 144ull << 30});
      const ReplayResult r = Replayer(&runtime, "emulated", Defaults()).Run(trace, options);
      EXPECT_LE(r.fragmentation, t.best_peer);
      const auto page = static_cast<std::int64_t>(runtime.VmmGranularity(0));
      EXPECT_LE(r.device_mallocs, static_cast<std::int64_t>(r.peak_reserved_bytes) / page);
      EXPECT_EQ(r.syncs, 0u);
      log_sum += std::log(r.fragmentation);
    }
    {
      platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = 144ull << 30});
      const ReplayResult r = Replayer(&runtime, "emulated", ChunkPool()).Run(trace, options);
      EXPECT_LE(r.fragmentation, r.torch_fragmentation);
      EXPECT_LE(r.device_mallocs,
                2 * static_cast<std::int64_t>(trace.header().torch_segments_peak));
      EXPECT_EQ(r.syncs, static_cast<std::uint64_t>(r.device_frees));
      chunk_log_sum += std::log(r.fragmentation);
    }
    ++n;
  }
  EXPECT_LE(std::exp(log_sum / n), 1.02);
  EXPECT_LE(std::exp(chunk_log_sum / n), 1.10);
}

// The thread cache over the default pool parks blocks of one thread, which flushes them on its
// next miss: on a single-threaded replay the pool must place every block as it would with no
// cache above it (its before-growth hooks give nothing back there, and the pool keeps the
// placement it chose before asking them).
TEST(ReplayTest, TheThreadCacheLeavesTheDefaultPoolsPlacementAsItIs) {
  std::string why;
  std::vector<std::string> paths = {testing::BundledTracesDir() + "/resnet50_train.trace.gz"};
  if (const std::string dir = testing::SharedTracesDir(&why); !dir.empty()) {
    paths.push_back(dir + "/bert_infer_dynamic.trace.gz");
    paths.push_back(dir + "/multistream_prefetch.trace.gz");
  }
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    const Trace trace = Trace::Load(path);
    Replayer::Options options = Untimed();
    AllocatorFlags no_cache = Defaults();
    no_cache.thread_cache_mb = 0;
    platform::EmulatedRuntime a({.device_count = 1, .capacity_bytes = 144ull << 30});
    platform::EmulatedRuntime b({.device_count = 1, .capacity_bytes = 144ull << 30});
    const ReplayResult with = Replayer(&a, "emulated", Defaults()).Run(trace, options);
    const ReplayResult without = Replayer(&b, "emulated", no_cache).Run(trace, options);
    ExpectSameDeviceFootprint(with, without);
  }
}

TEST(ReplayTest, MemoryLimitReportsTheEventAndTheMessage) {
  const Trace trace = Bundled();
  platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = 80ull << 30});
  AllocatorFlags f = Defaults();
  f.gpu_memory_limit_mb = 1024;  // the trace peaks near 3 GiB
  Replayer::Options options = Untimed();
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
  // Exactly ReplayResult's fields but torch_segments_peak and summary (tools/replay.h), and the
  // OOM fields only after an OOM: nothing missing, nothing extra.
  std::set<std::string> keys;
  const nlohmann::json parsed = nlohmann::json::parse(json);
  for (const auto& [key, value] : parsed.items()) keys.insert(key);
  const std::set<std::string> documented = {"trace",
                                            "strategy",
                                            "device",
                                            "events",
                                            "peak_requested_bytes",
                                            "peak_allocated_bytes",
                                            "peak_reserved_bytes",
                                            "fragmentation",
                                            "device_mallocs",
                                            "device_frees",
                                            "syncs",
                                            "ooms",
                                            "ns_per_event",
                                            "torch_peak_reserved_bytes",
                                            "torch_fragmentation",
                                            "num_device_map",
                                            "num_device_unmap",
                                            "num_stream_waits",
                                            "device_lag"};
  EXPECT_EQ(keys, documented) << json;
  EXPECT_EQ(r.events, 4u);
  EXPECT_EQ(r.peak_requested_bytes, 3001000u);
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '}');
}

// Repeating the trace on one facade: peaks cover every pass, and the last pass alone is
// reported. The default pool reaches its steady state in the first pass (no device call after
// it); a single pass reports its totals as its last; the JSON gains `repeat`, `last_pass` and
// `passes` (each pass's calls and the peak reserved so far).
TEST(ReplayTest, RepeatReportsTheLastPassApart) {
  const Trace trace = Bundled();
  platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = 80ull << 30});
  Replayer::Options options = Untimed();
  const ReplayResult once = Replayer(&runtime, "emulated", Defaults()).Run(trace, options);
  EXPECT_EQ(once.repeat, 1u);
  EXPECT_EQ(once.last_pass.device_mallocs, once.device_mallocs);
  EXPECT_EQ(once.last_pass.syncs, once.syncs);
  EXPECT_EQ(nlohmann::json::parse(once.ToJson()).count("last_pass"), 0u);

  options.repeat = 3;
  options.timed_pass = true;
  const ReplayResult r = Replayer(&runtime, "emulated", Defaults()).Run(trace, options);
  EXPECT_EQ(r.repeat, 3u);
  EXPECT_TRUE(r.oom_message.empty()) << r.oom_message;
  EXPECT_EQ(r.peak_requested_bytes, once.peak_requested_bytes);
  EXPECT_EQ(r.peak_reserved_bytes, once.peak_reserved_bytes);
  EXPECT_GT(r.device_mallocs, 0);
  EXPECT_EQ(r.last_pass.device_mallocs, 0);
  EXPECT_EQ(r.last_pass.device_frees, 0);
  EXPECT_EQ(r.last_pass.syncs, 0u);
  EXPECT_GT(r.last_pass.ns_per_event, 0.0);
  const nlohmann::json j = nlohmann::json::parse(r.ToJson());
  EXPECT_EQ(j.at("repeat"), 3);
  EXPECT_EQ(j.at("last_pass").at("device_mallocs"), 0);
  EXPECT_EQ(runtime.used_bytes(0), 0u);
  EXPECT_TRUE(once.passes.empty());
  EXPECT_EQ(nlohmann::json::parse(once.ToJson()).count("passes"), 0u);

  // Each pass apart: the calls add up to the totals, the last is last_pass, and the peak so far
  // never falls and ends at the run's peak.
  ASSERT_EQ(r.passes.size(), 3u);
  std::int64_t mallocs = 0;
  std::uint64_t peak = 0;
  for (const ReplayResult::Pass& p : r.passes) {
    mallocs += p.calls.device_mallocs;
    EXPECT_GE(p.peak_reserved_bytes, peak);
    peak = p.peak_reserved_bytes;
  }
  EXPECT_EQ(mallocs, r.device_mallocs);
  EXPECT_EQ(r.passes.front().calls.device_mallocs, r.device_mallocs) << "only the first grows";
  EXPECT_EQ(r.passes.back().calls.num_device_map, r.last_pass.num_device_map);
  EXPECT_EQ(r.passes.back().calls.syncs, r.last_pass.syncs);
  EXPECT_EQ(peak, r.peak_reserved_bytes);
  ASSERT_EQ(j.at("passes").size(), 3u);
  EXPECT_EQ(j.at("passes")[0].at("device_mallocs"), r.device_mallocs);
  EXPECT_EQ(j.at("passes")[2].at("peak_reserved_bytes"), r.peak_reserved_bytes);
}

// The tail: the last pass's device calls from a point of the trace on, for traces recorded over
// many steps of random shapes. A block of 64 MiB (32 pages) allocated first, freed and taken
// again needs nothing new; one of 96 MiB at the end grows the pool by the difference, which
// only the tail counts. A tail above 99 % is refused; the JSON carries it only when asked.
TEST(ReplayTest, TailReportsTheLastEventsApart) {
  const Trace trace = Trace::Parse(
      "a 1 67108864 0\nf 1 0\na 2 67108864 0\nf 2 0\na 3 100663296 0\nf 3 0\n", "growth");
  platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = 1ull << 30});
  Replayer::Options options = Untimed();
  options.tail_percent = 34;  // the last two events
  const ReplayResult r = Replayer(&runtime, "emulated", Defaults()).Run(trace, options);
  EXPECT_EQ(r.tail_from_event, 4u);
  EXPECT_GT(r.tail.num_device_map, 0);
  EXPECT_LT(r.tail.num_device_map, r.num_device_map);
  EXPECT_GT(r.tail.device_mallocs, 0);
  EXPECT_LT(r.tail.device_mallocs, r.device_mallocs);
  EXPECT_EQ(r.tail.syncs, 0u);
  const nlohmann::json j = nlohmann::json::parse(r.ToJson());
  EXPECT_EQ(j.at("tail_percent"), 34);
  EXPECT_EQ(j.at("tail_from_event"), 4);
  EXPECT_EQ(j.at("tail").at("num_device_map"), r.tail.num_device_map);

  // Only the last pass counts: repeated, the same tail needs nothing new.
  options.repeat = 2;
  const ReplayResult twice = Replayer(&runtime, "emulated", Defaults()).Run(trace, options);
  EXPECT_EQ(twice.tail.device_mallocs, 0);
  EXPECT_EQ(twice.tail.num_device_map, 0);

  options.repeat = 1;
  options.tail_percent = 100;
  EXPECT_THROW(Replayer(&runtime, "emulated", Defaults()).Run(trace, options),
               std::invalid_argument);
  EXPECT_EQ(runtime.used_bytes(0), 0u);
}

// A device stream per stream the trace uses, not per number up to the largest; too many
// distinct streams are refused with the count.
TEST(ReplayTest, CreatesAStreamPerUsedStreamOnlyAndBoundsThem) {
  class Counting : public platform::FaultInjectionRuntime {
   public:
    using FaultInjectionRuntime::FaultInjectionRuntime;
    platform::Stream CreateStream(int device) override {
      ++created;
      return FaultInjectionRuntime::CreateStream(device);
    }
    int created = 0;
  };
  platform::EmulatedRuntime base({.device_count = 1, .capacity_bytes = 1ull << 30});
  Counting runtime(&base);
  const Trace sparse = Trace::Parse("a 1 1000 65535\nf 1 65535\n", "sparse");
  Replayer::Options options = Untimed();
  const ReplayResult r = Replayer(&runtime, "emulated", Defaults()).Run(sparse, options);
  EXPECT_TRUE(r.oom_message.empty()) << r.oom_message;
  EXPECT_EQ(r.peak_requested_bytes, 1000u);
  EXPECT_EQ(runtime.created, 1);
  std::string many;
  for (std::size_t i = 0; i <= Replayer::kMaxStreams; ++i) {
    many += "a " + std::to_string(i + 1) + " 512 " + std::to_string(i + 1) + "\n";
  }
  try {
    Replayer(&runtime, "emulated", Defaults()).Run(Trace::Parse(many, "many"), options);
    FAIL() << "a trace of " << Replayer::kMaxStreams + 1 << " streams was replayed";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("257 streams"), std::string::npos) << e.what();
  }
  EXPECT_EQ(runtime.created, 1);
  EXPECT_EQ(base.used_bytes(0), 0u);
}

TEST(ReplayTest, EveryStrategyReplaysTheBundledTrace) {
  const Trace trace = Bundled();
  for (auto strategy :
       {flags::AllocatorStrategy::kNaiveBestFit, flags::AllocatorStrategy::kThreadLocal}) {
    platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = 80ull << 30});
    AllocatorFlags f = Defaults();
    f.allocator_strategy = strategy;
    Replayer::Options options = Untimed();
    const ReplayResult r = Replayer(&runtime, "emulated", f).Run(trace, options);
    EXPECT_TRUE(r.oom_message.empty()) << r.oom_message;
    EXPECT_GE(r.peak_reserved_bytes, r.peak_requested_bytes);
    EXPECT_EQ(runtime.used_bytes(0), 0u);
  }
}

// Two streams: a 64 MiB block of stream 1 is freed on stream 2 (record_stream), then stream 1
// allocates 64 MiB again. Without lag the free's event is complete at once and the block is
// reused; with lag stream 2 has not run 8 kernels past the free, so the stream-safe layer still
// holds the block and the pool must reserve another.
Trace TwoStreamRecordStream() {
  return Trace::Parse(
      "a 1 67108864 1\n"
      "a 2 1024 2\n"
      "f 1 2\n"
      "a 3 67108864 1\n"
      "f 3 1\n"
      "f 2 2\n",
      "two_stream");
}

ReplayResult RunLagged(const Trace& trace, const AllocatorFlags& flags, std::uint64_t lag) {
  platform::EmulatedRuntime runtime(
      {.device_count = 1, .capacity_bytes = 8ull << 30, .event_lag = lag});
  Replayer::Options options;
  options.device_lag = lag;
  ReplayResult r = Replayer(&runtime, "emulated", flags).Run(trace, options);
  EXPECT_EQ(runtime.used_bytes(0), 0u);
  return r;
}

TEST(ReplayTest, DeviceLagHoldsFreesRecordedOnAnotherStream) {
  const Trace trace = TwoStreamRecordStream();
  const ReplayResult without = RunLagged(trace, Defaults(), 0);
  const ReplayResult with = RunLagged(trace, Defaults(), 8);
  EXPECT_TRUE(without.oom_message.empty()) << without.oom_message;
  EXPECT_TRUE(with.oom_message.empty()) << with.oom_message;
  EXPECT_EQ(without.device_lag, 0u);
  EXPECT_EQ(with.device_lag, 8u);
  EXPECT_GE(without.peak_reserved_bytes, 64ull << 20);
  EXPECT_GE(with.peak_reserved_bytes, without.peak_reserved_bytes + (64ull << 20));
  EXPECT_GT(with.fragmentation, without.fragmentation);
}

// The virtual-memory pool maps pages, and the replay reports the maps; with lag too.
TEST(ReplayTest, VirtualMemoryPoolReportsDeviceMaps) {
  const Trace trace = TwoStreamRecordStream();
  AllocatorFlags f = Defaults();
  f.use_virtual_memory_auto_growth = true;
  for (std::uint64_t lag : {0, 8}) {
    SCOPED_TRACE(lag);
    const ReplayResult r = RunLagged(trace, f, lag);
    EXPECT_TRUE(r.oom_message.empty()) << r.oom_message;
    EXPECT_GT(r.num_device_map, 0);
    EXPECT_GE(r.num_device_map, r.num_device_unmap);
    EXPECT_GE(r.peak_reserved_bytes, 64ull << 20);
  }
}

// The virtual-memory pool on a real multi-stream trace (three models, each training on its own
// stream): a device behind the host holds no more than 5 % more memory than one that keeps up,
// since pages of pending work on other streams are stitched with device-side waits.
TEST(ReplayTest, VirtualMemoryPoolUnderDeviceLagOnTheMultiModelTrace) {
  const Trace trace = Trace::Load(testing::BundledTracesDir() + "/multi_model_streams.trace.gz");
  AllocatorFlags f = Defaults();
  f.use_virtual_memory_auto_growth = true;
  const ReplayResult without = RunLagged(trace, f, 0);
  const ReplayResult with = RunLagged(trace, f, 200);
  EXPECT_TRUE(with.oom_message.empty()) << with.oom_message;
  EXPECT_LE(without.fragmentation, without.torch_fragmentation);
  EXPECT_LE(with.fragmentation, 1.05 * without.fragmentation);
  EXPECT_GT(with.num_stream_waits, 0);
  EXPECT_EQ(with.syncs, 0u);
}

TEST(ReplayTest, JsonHasTheDeviceCountersAndTheLag) {
  const ReplayResult r = RunLagged(TwoStreamRecordStream(), Defaults(), 3);
  const std::string json = r.ToJson();
  for (const char* key : {"num_device_map", "num_device_unmap", "num_stream_waits"}) {
    EXPECT_NE(json.find(std::string("\"") + key + "\":"), std::string::npos) << key << " " << json;
  }
  EXPECT_NE(json.find("\"device_lag\":3"), std::string::npos) << json;
}

}  // namespace
}  // namespace strata::tools

namespace strata::tools {
namespace {

// Recording round trip: the history a replay records, replayed under the same flags, gives the
// same figures (single-stream and multi-stream traces, record_stream frees included).
TEST(ReplayTest, ARecordedReplayReplaysToTheSameFigures) {
  for (const char* name : {"resnet50_train", "multi_model_streams"}) {
    for (const bool vmm : {false, true}) {
      SCOPED_TRACE(::testing::Message() << name << (vmm ? " vmm" : " auto_growth"));
      const Trace trace = Trace::Load(testing::BundledTracesDir() + "/" + name + ".trace.gz");
      AllocatorFlags flags = Defaults();
      flags.use_virtual_memory_auto_growth = vmm;
      platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = 80ull << 30});
      Replayer replayer(&runtime, "emulated", flags);
      Replayer::Options options = Untimed();
      std::string history;
      options.history = &history;
      const ReplayResult first = replayer.Run(trace, options);
      const Trace recording = Trace::Parse(history, "recording");
      EXPECT_EQ(recording.header().recorded_by, "strata");
      EXPECT_EQ(recording.header().dropped, 0u);
      EXPECT_EQ(recording.num_allocations(), trace.num_allocations());
      EXPECT_EQ(recording.num_streams(), trace.num_streams());
      EXPECT_TRUE(recording.has_attributes());
      EXPECT_FALSE(recording.other_events().empty());  // the device calls
      const ReplayResult second = replayer.Run(recording, Untimed());
      EXPECT_EQ(second.peak_requested_bytes, first.peak_requested_bytes);
      EXPECT_EQ(second.peak_allocated_bytes, first.peak_allocated_bytes);
      ExpectSameDeviceFootprint(second, first);
    }
  }
}

// The snapshot a replay takes at the trace's peak holds the peak's allocations.
TEST(ReplayTest, TheSnapshotAtThePeakHoldsThePeaksAllocations) {
  const Trace trace = Bundled();
  platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = 80ull << 30});
  Replayer::Options options = Untimed();
  std::string snapshot;
  options.snapshot = &snapshot;
  Replayer(&runtime, "emulated", Defaults()).Run(trace, options);
  const nlohmann::json j = nlohmann::json::parse(snapshot);
  std::uint64_t requested = 0, allocated = 0;
  for (const auto& s : j["segments"]) {
    for (const auto& b : s["blocks"]) {
      if (b["state"] != "allocated") continue;
      requested += b["requested_size"].get<std::uint64_t>();
      allocated += b["size"].get<std::uint64_t>();
    }
  }
  EXPECT_EQ(requested, trace.peak_requested_bytes());
  EXPECT_EQ(allocated, j["stats"]["allocated_bytes.all.current"].get<std::uint64_t>());
}

}  // namespace
}  // namespace strata::tools
