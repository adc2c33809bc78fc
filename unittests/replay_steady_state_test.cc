// The steady state on traces recorded end to end (tools/traces, PyTorch 2.11 on an H200): a
// training or inference loop repeats its step, and with default flags the third repetition of a
// step makes no device call (no create, release, map or unmap) and no host wait, also while the
// device runs 64 kernels behind the host; the lag costs at most 2 % of peak reserved. These are
// the replay targets for the traces that meet them today. The traces that do not are
// named below with their figures, so that a change that brings them in can add them.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "flags/allocator_flags.h"
#include "platform/emulated_runtime.h"
#include "support/test_paths.h"
#include "tools/replay.h"
#include "tools/trace.h"

namespace strata::tools {
namespace {

// `repeat` repetitions of the trace on one facade, untimed, on an emulated H200
// (strata-replay's default) `lag` kernels behind the host, the lag counted in kernels only, so
// that the figures are strata-replay's and repeat exactly; with `tail_percent`, the last pass's
// calls of that share of its events reported apart.
ReplayResult Replay(const Trace& trace, std::uint64_t lag, int repeat,
                    std::uint64_t tail_percent = 0) {
  platform::EmulatedRuntime runtime({.device_count = 1,
                                     .capacity_bytes = 144ull << 30,
                                     .event_lag = lag,
                                     .deterministic_lag = true});
  Replayer::Options options;
  options.timed_pass = false;
  options.repeat = repeat;
  options.device_lag = lag;
  options.tail_percent = tail_percent;
  ReplayResult r =
      Replayer(&runtime, "emulated", flags::AllocatorFlags::Defaults()).Run(trace, options);
  EXPECT_EQ(runtime.used_bytes(0), 0u) << "the replay gave every page back at its end";
  return r;
}
ReplayResult RepeatThree(const Trace& trace, std::uint64_t lag) { return Replay(trace, lag, 3); }

// The third pass makes no device call and no host wait at lag 0 and at lag 64, holds no more
// than PyTorch did, and the lag costs at most 2 % of peak reserved.
void ExpectSteadyState(const Trace& trace) {
  const ReplayResult at0 = RepeatThree(trace, 0);
  const ReplayResult at64 = RepeatThree(trace, 64);
  for (const ReplayResult* r : {&at0, &at64}) {
    SCOPED_TRACE(::testing::Message() << "device lag " << r->device_lag);
    ASSERT_TRUE(r->oom_message.empty()) << r->oom_message;
    EXPECT_EQ(r->syncs, 0u);
    EXPECT_EQ(r->last_pass.device_mallocs, 0);
    EXPECT_EQ(r->last_pass.device_frees, 0);
    EXPECT_EQ(r->last_pass.num_device_map, 0);
    EXPECT_EQ(r->last_pass.num_device_unmap, 0);
    EXPECT_LE(r->fragmentation, r->torch_fragmentation) << "PyTorch's own figure for the trace";
  }
  EXPECT_LE(static_cast<double>(at64.peak_reserved_bytes),
            1.02 * static_cast<double>(at0.peak_reserved_bytes))
      << "lag 0: " << at0.fragmentation << ", lag 64: " << at64.fragmentation;
}

class RecordedTraceTest : public ::testing::TestWithParam<const char*> {};

TEST_P(RecordedTraceTest, TheThirdStepMakesNoDeviceCallWithOrWithoutLag) {
  const std::string dir = testing::BundledTracesDir();
  ASSERT_FALSE(dir.empty()) << "tools/traces not found";
  ExpectSteadyState(Trace::Load(dir + "/" + GetParam() + ".trace.gz"));
}

// The replay target on the shared traces (gpt2_train, bert_infer_dynamic,
// multistream_prefetch; resnet50_train is bundled): skipped where they are not found.
TEST(SharedTraceTest, TheThirdStepMakesNoDeviceCallWithOrWithoutLag) {
  std::string why;
  const std::string dir = testing::SharedTracesDir(&why);
  if (dir.empty()) GTEST_SKIP() << why;
  for (const char* name : {"gpt2_train", "bert_infer_dynamic", "multistream_prefetch"}) {
    SCOPED_TRACE(name);
    ExpectSteadyState(Trace::Load(dir + "/" + name + ".trace.gz"));
  }
}

// A batch drawn at random each step (16 to 96): by the second half of forty recorded steps the
// pool has met its largest batch, and the warm steps make no device call, at lag 0 and at lag
// 64. Not yet (tools/traces/long, the last 20 steps' calls at lag 0 / 64, run 34):
// bert_infer_dynamic remaps (592 / 415), multi_model_streams (17 / 647), seq2seq_random_len_train
// (12 / 12) and detection_varsize_train (8 / 8) still meet new peaks, resnet18_side_stream
// (12 / 0).
TEST(LongRecordingTest, TheWarmHalfOfARandomBatchRunMakesNoDeviceCall) {
  const std::string dir = testing::BundledTracesDir();
  ASSERT_FALSE(dir.empty()) << "tools/traces not found";
  const Trace trace = Trace::Load(dir + "/long/resnet50_varbatch_train_40steps.trace.gz");
  for (const std::uint64_t lag : {0, 64}) {
    SCOPED_TRACE(::testing::Message() << "device lag " << lag);
    const ReplayResult r = Replay(trace, lag, /*repeat=*/1, /*tail_percent=*/50);
    ASSERT_TRUE(r.oom_message.empty()) << r.oom_message;
    EXPECT_GT(r.device_mallocs, 0) << "the first half grew the pool";
    EXPECT_GT(r.tail_from_event, trace.events().size() / 3) << "no warm half reported";
    EXPECT_EQ(r.tail.device_mallocs, 0);
    EXPECT_EQ(r.tail.device_frees, 0);
    EXPECT_EQ(r.tail.num_device_map, 0);
    EXPECT_EQ(r.tail.num_device_unmap, 0);
    EXPECT_EQ(r.syncs, 0u);
    EXPECT_LE(r.fragmentation, r.torch_fragmentation) << "PyTorch's own figure for the trace";
  }
}

// Not yet (2026-11-28, last pass of three at lag 64, device calls; peak reserved over requested
// at lag 0 and 64): bert_infer_dynamic_recorded remaps (200; 1.0683 and 1.0862),
// resnet18_side_stream creates (27), multi_model_streams too (238; 1.0296 and 1.0627):
// docs/benchmarks/2026-11-28-run33.md.
INSTANTIATE_TEST_SUITE_P(Bundled, RecordedTraceTest,
                         ::testing::Values("resnet50_train", "resnet50_varbatch_train",
                                           "detection_varsize_train", "seq2seq_random_len_train",
                                           "llm_decode_kv", "llm_generate_hf"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace strata::tools
