// BM_Threads/<subject>/4096/threads:N: cached pairs on N threads (1, 2, 4, ... up to
// --max_threads); items_per_second is the total throughput (scaling = items/s(N) / items/s(1)).
// Registered by strata-bench.
//
// Thread-compatible: registration once, from the benchmark's main thread, after Setup.
#pragma once

namespace strata::tools::bench {

void RegisterThreadsBenchmarks();

}  // namespace strata::tools::bench
