// FormatBytes: human-readable byte counts ("1.50 GiB", "512.00 KiB", "12 B"): binary units with
// two decimals, like the sizes in PyTorch's out-of-memory messages (c10's format_size), except
// that counts under 1 KiB read "N B" (PyTorch: "N bytes", up to 1024) and the units go on to TiB
// and PiB, where PyTorch stops at GiB (2 TiB: "2.00 TiB" here, "2048.00 GiB" in PyTorch). Pure
// function, thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace strata::allocation {

std::string FormatBytes(std::uint64_t bytes);
// Signed form for deltas.
std::string FormatBytesSigned(std::int64_t bytes);

}  // namespace strata::allocation
