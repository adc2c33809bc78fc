#include "allocation/byte_format.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace strata::allocation {

std::string FormatBytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return absl::StrFormat("%d B", bytes);
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return absl::StrFormat("%.2f %s", value, kUnits[unit]);
}

std::string FormatBytesSigned(std::int64_t bytes) {
  if (bytes >= 0) return FormatBytes(static_cast<std::uint64_t>(bytes));
  return absl::StrCat("-", FormatBytes(static_cast<std::uint64_t>(-(bytes + 1)) + 1));
}

}  // namespace strata::allocation
