#include "tools/bench_history.h"

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "history/history_recorder.h"
#include "platform/stream.h"

namespace strata::tools {
namespace {

// One recorder for every thread of a run: thread 0 starts it before the others record.
std::unique_ptr<history::HistoryRecorder> g_recorder;

void RecordPairs(benchmark::State& state) {
  if (state.thread_index() == 0) {
    g_recorder = std::make_unique<history::HistoryRecorder>("bench");
    history::HistoryOptions options;
    options.max_entries = static_cast<std::size_t>(state.range(0));
    g_recorder->Start(options);
  }
  std::uint64_t addr = 0x7f0000000000 + static_cast<std::uint64_t>(state.thread_index()) * 4096;
  for (auto _ : state) {
    g_recorder->Record(history::EventKind::kAlloc, addr, 4096, platform::Stream{});
    g_recorder->Record(history::EventKind::kFree, addr, 4096, platform::Stream{});
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    g_recorder->Stop();
    g_recorder.reset();
  }
}

}  // namespace

void RegisterHistoryBenchmarks() {
  benchmark::RegisterBenchmark("BM_HistoryRecord/pair", RecordPairs)
      ->Arg(1 << 14)
      ->Arg(history::HistoryOptions::kDefaultEntries)
      ->Arg(1 << 20)
      ->ThreadRange(1, 16);
}

}  // namespace strata::tools
