// FormatBytes: human-readable byte counts as PyTorch prints them ("1.50 GiB", "512.00 KiB",
// "12 B"). Pure function, thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace strata::allocation {

std::string FormatBytes(std::uint64_t bytes);
// Signed form for deltas.
std::string FormatBytesSigned(std::int64_t bytes);

}  // namespace strata::allocation
