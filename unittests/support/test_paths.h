// Locating the repository's files from a test binary, without a compile definition: walk up from
// the test binary (/proc/self/exe), then from the working directory, to the first directory that
// holds tools/traces.
//
// Thread-safe (results are computed once).
#pragma once

#include <string>

namespace strata::testing {

// The repository root, or "" when it cannot be found.
const std::string& RepoRoot();

// The bundled traces (<root>/tools/traces), or "" when the root is unknown.
std::string BundledTracesDir();

// The shared PyTorch traces: $STRATA_TRACE_DIR when set, else <root>/../shared/traces or
// <root>/shared/traces when present; "" when none exists (*why then says where it looked).
std::string SharedTracesDir(std::string* why = nullptr);

}  // namespace strata::testing
