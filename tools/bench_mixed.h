// BM_Mixed/<subject>/{loguniform,trace_sizes}: a window of 256 live allocations; each iteration
// frees a random one and allocates a new size (fixed seed; log-uniform 256 B..64 MiB, or sizes
// drawn from the loaded traces). Strata subjects count device_calls_per_op (creates, releases,
// maps, unmaps per free or allocation; steady: 0). Registered by strata-bench.
//
// Thread-compatible: registration once, from the benchmark's main thread, after Setup.
#pragma once

namespace strata::tools::bench {

void RegisterMixedBenchmarks();

}  // namespace strata::tools::bench
