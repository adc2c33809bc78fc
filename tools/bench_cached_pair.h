// BM_CachedPair/<subject>/<bytes>: an allocation and a free of one size, cached (the steady
// state), for every strata subject (also with the memory history recording), a hand-built
// chain called without the facade, and the peers. Registered by strata-bench.
//
// Thread-compatible: registration once, from the benchmark's main thread, after Setup.
#pragma once

namespace strata::tools::bench {

void RegisterCachedPairBenchmarks();

}  // namespace strata::tools::bench
