// BM_RecordStream/<subject>/<bytes>: allocate on stream A, record stream B, free; the next
// allocation reclaims the block once B's event is done. Strata's stream-safe chains
// (strata_auto_growth, strata_vmm) and the peers. Registered by strata-bench.
//
// Thread-compatible: registration once, from the benchmark's main thread, after Setup.
#pragma once

namespace strata::tools::bench {

void RegisterRecordStreamBenchmarks();

}  // namespace strata::tools::bench
