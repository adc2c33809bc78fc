#include "history/history_recorder.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "allocation/bad_alloc.h"
#include "facade/allocator_facade.h"
#include "nlohmann/json.hpp"
#include "platform/emulated_runtime.h"
#include "platform/fault_injection_runtime.h"
#include "support/test_files.h"

namespace strata::history {
namespace {

using platform::CUDAPlace;
using platform::Stream;

struct Line {
  std::string kind;
  std::vector<std::string> fields;           // after the kind, before the attributes
  std::map<std::string, std::string> attrs;  // key=value
};

struct Recording {  // NOLINT(bugprone-exception-escape): a test's value type
  nlohmann::json header;
  std::vector<Line> lines;
  std::vector<Line> Of(const std::string& kind) const {
    std::vector<Line> out;
    for (const Line& l : lines) {
      if (l.kind == kind) out.push_back(l);
    }
    return out;
  }
};

Recording Parse(const std::string& text) {
  Recording r;
  std::vector<std::string> rows = absl::StrSplit(text, '\n', absl::SkipEmpty());
  EXPECT_FALSE(rows.empty());
  if (rows.empty()) return r;
  EXPECT_TRUE(absl::StartsWith(rows[0], "# {")) << rows[0];
  r.header = nlohmann::json::parse(rows[0].substr(2));
  for (std::size_t i = 1; i < rows.size(); ++i) {
    Line l;
    std::vector<std::string> tokens = absl::StrSplit(rows[i], ' ');
    l.kind = tokens[0];
    for (std::size_t k = 1; k < tokens.size(); ++k) {
      const std::size_t eq = tokens[k].find('=');
      if (l.kind != "ctx" && eq != std::string::npos) {
        l.attrs[tokens[k].substr(0, eq)] = tokens[k].substr(eq + 1);
      } else {
        l.fields.push_back(tokens[k]);
      }
    }
    r.lines.push_back(std::move(l));
  }
  return r;
}

std::uint64_t U(const std::string& s) {
  std::uint64_t v = 0;
  EXPECT_TRUE(absl::SimpleAtoi(s, &v)) << s;
  return v;
}

HistoryOptions Entries(std::size_t n) {
  HistoryOptions o;
  o.max_entries = n;
  return o;
}

flags::AllocatorFlags Flags() {
  flags::AllocatorFlags f = flags::AllocatorFlags::Defaults();
  f.gpu_allocator_retry_time = 0;
  return f;
}

TEST(HistoryRecorderTest, RecordsAllocationsFreesAndDeviceCallsOfAPlace) {
  platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = std::size_t{1} << 30});
  flags::AllocatorFlags f = Flags();
  f.use_virtual_memory_auto_growth = false;  // the chunk pool's mallocs (the pool's: below)
  facade::AllocatorFacade facade(&runtime, f);
  const Stream side = runtime.CreateStream(0);
  auto before = facade.Alloc(CUDAPlace(0), 512);  // allocated before: its free is left out
  facade.RecordHistory(CUDAPlace(0), {});
  EXPECT_TRUE(facade.IsRecordingHistory(CUDAPlace(0)));
  auto a = facade.Alloc(CUDAPlace(0), 1000);
  auto b = facade.Alloc(CUDAPlace(0), 3 << 20, side);
  a.reset();
  b.reset();
  before.reset();
  facade.EmptyCache(CUDAPlace(0));
  const Recording r = Parse(facade.StopHistory(CUDAPlace(0)));
  EXPECT_FALSE(facade.IsRecordingHistory(CUDAPlace(0)));

  EXPECT_EQ(r.header["recorded_by"], "strata");
  EXPECT_EQ(r.header["place"], "cuda:0");
  EXPECT_EQ(r.header["events"], 4);
  EXPECT_EQ(r.header["allocs"], 2);
  EXPECT_EQ(r.header["streams"], 2);
  EXPECT_EQ(r.header["left_out"], 1);  // the free of `before`
  EXPECT_EQ(r.header["trace_peak_live"], 1000 + (3 << 20));
  const auto allocs = r.Of("a");
  ASSERT_EQ(allocs.size(), 2u);
  EXPECT_EQ(allocs[0].fields, (std::vector<std::string>{"0", "1000", "0"}));
  EXPECT_EQ(allocs[1].fields, (std::vector<std::string>{"1", "3145728", "1"}));
  EXPECT_TRUE(absl::StartsWith(allocs[0].attrs.at("addr"), "0x"));
  EXPECT_EQ(allocs[0].attrs.at("th"), "1");
  const auto frees = r.Of("f");
  ASSERT_EQ(frees.size(), 2u);
  EXPECT_EQ(frees[0].fields, (std::vector<std::string>{"0", "0"}));
  EXPECT_EQ(frees[1].fields, (std::vector<std::string>{"1", "1"}));
  // The auto-growth pool's device allocations and their frees at EmptyCache.
  EXPECT_FALSE(r.Of("seg").empty());
  std::uint64_t malloced = 0, freed = 0;
  for (const Line& l : r.Of("seg")) {
    if (l.fields[0] == "malloc") malloced += U(l.fields[2]);
    if (l.fields[0] == "free") freed += U(l.fields[2]);
  }
  EXPECT_GT(malloced, 0u);
  EXPECT_GE(freed, malloced);
  const auto empty = r.Of("empty_cache");
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_EQ(U(empty[0].fields[0]), freed);
  // Timestamps never go backwards.
  std::uint64_t last = 0;
  for (const Line& l : r.lines) {
    if (l.kind == "ctx") continue;
    const std::uint64_t t = U(l.attrs.at("t"));
    EXPECT_GE(t, last);
    last = t;
  }
}

TEST(HistoryRecorderTest, ADeferredFreeIsPendingThenReclaimedAndReplaysOnItsStream) {
  platform::EmulatedRuntime emulated({.device_count = 1, .capacity_bytes = std::size_t{1} << 30});
  platform::FaultInjectionRuntime runtime(&emulated);
  facade::AllocatorFacade facade(&runtime, Flags());
  const Stream side = runtime.CreateStream(0);
  facade.RecordHistory(CUDAPlace(0), {});
  auto a = facade.Alloc(CUDAPlace(0), 4096);
  runtime.HoldEvents(true);
  ASSERT_TRUE(facade.RecordStream(*a, side));
  a.reset();
  facade.Release(CUDAPlace(0));  // still pending
  runtime.HoldEvents(false);
  facade.Release(CUDAPlace(0));  // reclaimed
  const Recording r = Parse(facade.StopHistory(CUDAPlace(0)));
  const auto frees = r.Of("f");
  ASSERT_EQ(frees.size(), 1u);
  // The replay records the block on the side stream before freeing it.
  EXPECT_EQ(frees[0].fields, (std::vector<std::string>{"0", "1"}));
  const auto pending = r.Of("p");
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].fields, (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(pending[0].attrs.at("n"), "1");
  const auto reclaimed = r.Of("r");
  ASSERT_EQ(reclaimed.size(), 1u);
  EXPECT_EQ(reclaimed[0].fields, (std::vector<std::string>{"0"}));
}

TEST(HistoryRecorderTest, TheRingKeepsTheNewestMaxEntriesEvents) {
  HistoryRecorder recorder("test");
  recorder.Start(Entries(100));
  for (std::uint64_t i = 0; i < 1000; ++i) {
    recorder.Record(EventKind::kAlloc, 0x1000 + i * 64, 64, Stream{});
    recorder.Record(EventKind::kFree, 0x1000 + i * 64, 64, Stream{});
  }
  const Recording r = Parse(recorder.Stop());
  EXPECT_EQ(r.header["recorded"], 2000);
  EXPECT_EQ(r.header["dropped"], 1900);
  EXPECT_EQ(r.header["max_entries"], 100);
  // The window starts on an allocation (2000 - 100 is even): 50 pairs, the newest ones.
  EXPECT_EQ(r.Of("a").size(), 50u);
  EXPECT_EQ(r.Of("f").size(), 50u);
  EXPECT_EQ(r.header["left_out"], 0);
  EXPECT_EQ(r.Of("a").back().attrs.at("addr"), "0x" + absl::StrCat(absl::Hex(0x1000 + 999 * 64)));

  // A window that starts on a free leaves that free out.
  recorder.Start(Entries(101));
  for (std::uint64_t i = 0; i < 1000; ++i) {
    recorder.Record(EventKind::kAlloc, 0x1000 + i * 64, 64, Stream{});
    recorder.Record(EventKind::kFree, 0x1000 + i * 64, 64, Stream{});
  }
  const Recording odd = Parse(recorder.Stop());
  EXPECT_EQ(odd.Of("a").size(), 50u);
  EXPECT_EQ(odd.Of("f").size(), 50u);
  EXPECT_EQ(odd.header["left_out"], 1);
}

TEST(HistoryRecorderTest, ANewRecorderNeverContinuesAnOldOnesChunk) {
  // Recorders made one after another get their rings at the same address, as a rule: the
  // thread's chunk of the last one must not be taken for a chunk of the new one.
  for (int round = 0; round < 4; ++round) {
    auto recorder = std::make_unique<HistoryRecorder>("test");
    recorder->Start(Entries(100));
    for (std::uint64_t i = 0; i < 1000u + 7u * static_cast<unsigned>(round); ++i) {
      recorder->Record(EventKind::kAlloc, 0x1000 + i * 64, 64, Stream{});
    }
    const Recording r = Parse(recorder->Stop());
    EXPECT_EQ(r.header["recorded"], 1000 + 7 * round);
    EXPECT_EQ(r.Of("a").size(), 100u);
    EXPECT_EQ(r.Of("a").back().attrs.at("addr"),
              "0x" + absl::StrCat(absl::Hex(0x1000 + (999 + 7 * round) * 64)));
  }
}

// Events read the time a ticker thread samples while some recorder records: it moves with the
// clock, and recorders starting and stopping in any order (over and over) neither stop it for
// the others nor hang.
TEST(HistoryRecorderTest, TimeAdvancesAndRecordersStartAndStopInAnyOrder) {
  HistoryRecorder a("a"), b("b");
  a.Start({});
  b.Start({});
  a.Record(EventKind::kAlloc, 0x1000, 64, Stream{});
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  a.Stop();  // b still records: the ticker goes on
  b.Record(EventKind::kAlloc, 0x2000, 64, Stream{});
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  b.Record(EventKind::kFree, 0x2000, 64, Stream{});
  const Recording r = Parse(b.Stop());
  ASSERT_EQ(r.Of("a").size(), 1u);
  ASSERT_EQ(r.Of("f").size(), 1u);
  const std::uint64_t elapsed = U(r.Of("f")[0].attrs.at("t")) - U(r.Of("a")[0].attrs.at("t"));
  EXPECT_GE(elapsed, 20'000'000u) << "30 ms apart, at the coarse clock's resolution";
  EXPECT_LT(elapsed, 10'000'000'000u);
  for (int i = 0; i < 200; ++i) {
    a.Start({});
    if (i % 2 == 0) b.Start({});
    a.Stop();
    if (i % 2 == 0) b.Stop();
  }
  a.Start({});  // destroyed while recording: its hold on the ticker goes with it
}

TEST(HistoryRecorderTest, ContextsAreWrittenOncePerText) {
  HistoryRecorder recorder("test");
  int calls = 0;
  HistoryOptions options;
  options.context = [&calls] { return ++calls <= 2 ? "train.py:10" : "train.py:20"; };
  recorder.Start(options);
  for (int i = 0; i < 4; ++i) recorder.Record(EventKind::kAlloc, 0x1000 + i * 64, 64, Stream{});
  recorder.Record(EventKind::kFree, 0x1000, 64, Stream{});  // frees take no context
  recorder.Record(EventKind::kOom, std::uint64_t{0}, 1 << 30, Stream{});
  const Recording r = Parse(recorder.Stop());
  EXPECT_EQ(calls, 5);
  const auto ctx = r.Of("ctx");
  ASSERT_EQ(ctx.size(), 2u);
  EXPECT_EQ(ctx[0].fields, (std::vector<std::string>{"1", "\"train.py:10\""}));
  EXPECT_EQ(ctx[1].fields, (std::vector<std::string>{"2", "\"train.py:20\""}));
  const auto allocs = r.Of("a");
  ASSERT_EQ(allocs.size(), 4u);
  EXPECT_EQ(allocs[0].attrs.at("c"), "1");
  EXPECT_EQ(allocs[2].attrs.at("c"), "2");
  EXPECT_EQ(r.Of("f")[0].attrs.count("c"), 0u);
  EXPECT_EQ(r.Of("oom")[0].attrs.at("c"), "2");
}

TEST(HistoryRecorderTest, BadCallsThrowAndRestartingDropsEarlierEvents) {
  HistoryRecorder recorder("test");
  EXPECT_THROW(recorder.Stop(), std::logic_error);
  EXPECT_THROW(recorder.Start(Entries(0)), std::invalid_argument);
  EXPECT_THROW(recorder.Start(Entries(HistoryRecorder::kMaxEntries + 1)), std::invalid_argument);
  EXPECT_FALSE(recorder.recording());
  recorder.Start(Entries(16));
  recorder.Record(EventKind::kAlloc, 0x1000, 64, Stream{});
  recorder.Start(Entries(16));
  recorder.Record(EventKind::kAlloc, 0x2000, 64, Stream{});
  const Recording r = Parse(recorder.Stop());
  ASSERT_EQ(r.Of("a").size(), 1u);
  EXPECT_EQ(r.Of("a")[0].attrs.at("addr"), "0x2000");
  EXPECT_THROW(recorder.Stop(), std::logic_error);
  EXPECT_THROW(recorder.StopTo("/nonexistent-dir/x.trace"), std::logic_error);
  recorder.Start({});
  try {
    recorder.StopTo("/nonexistent-dir/x.trace");
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), "/nonexistent-dir/x.trace")) << e.what();
  }
  // A path that cannot be opened leaves the recording running: a good path still gets it.
  EXPECT_TRUE(recorder.recording());
  recorder.Record(EventKind::kAlloc, 0x3000, 64, Stream{});
  const std::string good = strata::testing::TempPath("kept.trace");
  recorder.StopTo(good);
  EXPECT_EQ(Parse(strata::testing::ReadFile(good)).Of("a").size(), 1u);
  std::remove(good.c_str());
}

// The file a link names gets the trace (the link stays); a file named like a temporary is left
// alone; a device is refused, not replaced.
TEST(HistoryRecorderTest, WritesThroughLinksAndNeverReplacesWhatIsNotARegularFile) {
  const std::string target = strata::testing::TempPath("target.trace");
  const std::string link = strata::testing::TempPath("link.trace");
  strata::testing::WriteFile(target, "old\n");
  std::remove(link.c_str());
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  strata::testing::WriteFile(link + ".tmp", "mine\n");
  HistoryRecorder::WriteFile(link, "new\n");
  struct stat st {};
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link stays a link";
  EXPECT_EQ(strata::testing::ReadFile(target), "new\n");
  EXPECT_EQ(strata::testing::ReadFile(link + ".tmp"), "mine\n");
  try {
    HistoryRecorder::WriteFile("/dev/null", "x");
    ADD_FAILURE() << "a device was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), "not a regular file")) << e.what();
  }
  ASSERT_EQ(stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null is still a device";
  for (const std::string& p : {target, link, link + ".tmp"}) std::remove(p.c_str());
}

TEST(HistoryRecorderTest, StopWhileThreadsRecordKeepsOnlyWholeEvents) {
  HistoryRecorder recorder("test");
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (std::uint64_t i = 0; !done.load(std::memory_order_relaxed); ++i) {
        const std::uint64_t addr = (std::uint64_t{1} << 40) * (t + 1) + (i % 1024) * 64;
        if (recorder.recording()) {
          recorder.Record(EventKind::kAlloc, addr, 64 * (t + 1), Stream{});
          recorder.Record(EventKind::kFree, addr, 64 * (t + 1), Stream{});
        }
      }
    });
  }
  for (int round = 0; round < 5; ++round) {
    recorder.Start(Entries(4096));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const Recording r = Parse(recorder.Stop());
    for (const Line& l : r.Of("a")) {
      // Each field of a slot from the same event: the address says which thread wrote it.
      std::uint64_t addr = 0;
      ASSERT_TRUE(absl::SimpleHexAtoi(l.attrs.at("addr"), &addr));
      EXPECT_EQ(U(l.fields[1]), 64 * (addr >> 40));
    }
    EXPECT_EQ(r.Of("a").size() + r.Of("f").size(), r.header["events"].get<std::size_t>());
  }
  done = true;
  for (auto& t : threads) t.join();
}

TEST(HistoryRecorderTest, TheVirtualMemoryPoolsMapsAreRecorded) {
  platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = std::size_t{1} << 30});
  flags::AllocatorFlags f = Flags();
  f.use_virtual_memory_auto_growth = true;
  facade::AllocatorFacade facade(&runtime, f);
  facade.RecordHistory(CUDAPlace(0), {});
  auto a = facade.Alloc(CUDAPlace(0), 5 << 20);
  a.reset();
  facade.EmptyCache(CUDAPlace(0));
  const Recording r = Parse(facade.StopHistory(CUDAPlace(0)));
  std::map<std::string, std::uint64_t> bytes;
  for (const Line& l : r.Of("seg")) bytes[l.fields[0]] += U(l.fields[2]);
  const std::size_t page = runtime.VmmGranularity(0);
  EXPECT_EQ(bytes["create"], 3 * page);
  EXPECT_EQ(bytes["map"], 3 * page);
  EXPECT_EQ(bytes["unmap"], 3 * page);
  EXPECT_EQ(bytes["release"], 3 * page);
}

TEST(HistoryRecorderTest, AFacadeDestroyedWhileRecordingFreesItsPoolsSafely) {
  platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = std::size_t{1} << 30});
  for (const bool vmm : {false, true}) {
    flags::AllocatorFlags f = Flags();
    f.use_virtual_memory_auto_growth = vmm;
    auto facade = std::make_unique<facade::AllocatorFacade>(&runtime, f);
    facade->RecordHistory(CUDAPlace(0), {});
    facade->Alloc(CUDAPlace(0), 5 << 20).reset();  // cached: freed by the pool's destructor
    facade.reset();
    EXPECT_EQ(runtime.used_bytes(0), 0u);
  }
}

TEST(HistoryRecorderTest, AThrowingContextLosesNoAllocationAndNoOutOfMemoryError) {
  platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = std::size_t{64} << 20});
  facade::AllocatorFacade facade(&runtime, Flags());
  HistoryOptions options;
  options.context = []() -> std::string { throw std::runtime_error("boom"); };
  facade.RecordHistory(CUDAPlace(0), options);
  {
    auto a = facade.Alloc(CUDAPlace(0), 1 << 20);  // made, and handed out despite the context
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(facade.GetMemoryStats(CUDAPlace(0)).allocated_bytes[0].current, 1 << 20);
  }
  EXPECT_EQ(facade.GetMemoryStats(CUDAPlace(0)).allocated_bytes[0].current, 0);
  // Out of memory stays out of memory.
  EXPECT_THROW(facade.Alloc(CUDAPlace(0), std::size_t{1} << 30), allocation::BadAlloc);
  const Recording r = Parse(facade.StopHistory(CUDAPlace(0)));
  const auto ctx = r.Of("ctx");
  ASSERT_EQ(ctx.size(), 1u);
  EXPECT_EQ(absl::StrJoin(ctx[0].fields.begin() + 1, ctx[0].fields.end(), " "),
            "\"<context callback threw: boom>\"");
  EXPECT_EQ(r.Of("a").size(), 1u);
  EXPECT_EQ(r.Of("oom").size(), 1u);
}

}  // namespace
}  // namespace strata::history
