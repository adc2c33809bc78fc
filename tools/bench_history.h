// The memory history's recorder alone (strata-bench registers these): what recording adds to
// each allocation and free, without the allocator around it.
//
//   BM_HistoryRecord/pair/threads:N   one allocation event and one free event recorded into a
//                                     HistoryRecorder with the default ring (wrapping in steady
//                                     state), on N threads at once; time per pair
//
// Thread-compatible: registration once, from the benchmark's main thread.
#pragma once

namespace strata::tools {

void RegisterHistoryBenchmarks();

}  // namespace strata::tools
