// The memory history's recorder alone (strata-bench registers these): what recording adds to
// each allocation and free, without the allocator around it.
//
//   BM_HistoryRecord/pair/<entries>/threads:N
//       one allocation event and one free event recorded into a HistoryRecorder with a ring of
//       <entries> (2^14, the default 2^17, 2^20; wrapping in steady state), on N threads at
//       once; time per pair
//
// Thread-compatible: registration once, from the benchmark's main thread.
#pragma once

namespace strata::tools {

void RegisterHistoryBenchmarks();

}  // namespace strata::tools
