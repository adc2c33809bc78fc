// Trace replays, timed manually over the event loop only. Registered by strata-bench.
//
//   BM_Replay/<subject>/<trace>       a cold replay (fresh allocator, empty cache); counters
//                                     ns_per_event, peak_reserved, fragmentation, and
//                                     device_calls_per_op (per event) for strata
//   BM_ReplayWarm/<subject>/<trace>   the same replay on a warm allocator (steady state); strata
//                                     subjects count device_mallocs, device_maps and stream_waits
//                                     per timed replay, and device_calls_per_op per event
//
// Thread-compatible: registration once, from the benchmark's main thread, after Setup.
#pragma once

namespace strata::tools::bench {

void RegisterReplayBenchmarks();

}  // namespace strata::tools::bench
