// RoundupPower2Divisions: the value of flag roundup_power2_divisions (PyTorch's option of the
// same name): how finely an allocation size is rounded up, per power-of-two size interval.
//
// With N divisions, a size in [2^k, 2^(k+1)) is rounded up to the next multiple of 2^k / N
// (N = 0 or 1: no rounding). The pooling strategy does the rounding; this type only holds and
// parses the per-interval table.
//
// Intervals, as in PyTorch: 16 of them. Interval 0 holds sizes below 2 MB, interval i (1..14)
// holds [2^i MB, 2^(i+1) MB), interval 15 holds 32 GB and more.
//
// Syntax (PyTorch's), whitespace ignored:
//   "N"                      N divisions for every size; N is 0 (off, the default) or a power of
//                            two <= 2^20 (PyTorch rejects 0 here; we accept it as "off").
//   "[256:1,512:2,>:8]"      key:N pairs; a key is a size in MB, a power of two in [1, 32768],
//                            naming its interval [key, 2*key); the first key also covers every
//                            smaller size; ">" (last, optional) covers every interval after the
//                            last key; intervals not covered keep 0 (no rounding). N is 0 or a
//                            power of two <= 2^20. Keys must increase strictly.
//   Difference from PyTorch: its ">" also overwrites the interval of the last key; ours does not,
//   so "[256:1,512:2,>:8]" gives 512 MB sizes 2 divisions, as the text reads.
//
// Contract: a value type, thread-safe as any value. Parse reports errors through its `error`
// out-parameter (that is what Abseil's flag parser wants); FromString throws
// std::invalid_argument naming the text and the rule it broke.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

namespace strata::flags {

class RoundupPower2Divisions {
 public:
  static constexpr int kIntervals = 16;
  static constexpr std::uint64_t kMaxKeyMb = std::uint64_t{1} << (kIntervals - 1);  // 32768
  // The chunk pool's limit (strategies/auto_growth_options.cc): steps of 16 bytes in the smallest
  // interval (1 MB). A larger value would pass here and fail every allocation there.
  static constexpr std::uint64_t kMaxDivisions = std::uint64_t{1} << 16;

  // No rounding anywhere (the flag's default).
  RoundupPower2Divisions() = default;

  // `divisions` for every interval; throws std::invalid_argument unless 0 or a power of two
  // <= kMaxDivisions.
  static RoundupPower2Divisions Uniform(std::uint32_t divisions);

  // Parses the syntax above. On failure returns false, leaves *out alone and says why in *error.
  static bool Parse(std::string_view text, RoundupPower2Divisions* out, std::string* error);
  // Same, throwing std::invalid_argument.
  static RoundupPower2Divisions FromString(std::string_view text);

  // Canonical text that Parse maps back to an equal value: "N" when every interval agrees,
  // otherwise the shortest list form, e.g. "[256:1,512:2,>:8]".
  std::string ToString() const;

  // Interval index (0..15) of an allocation of `bytes`.
  static int IntervalOf(std::size_t bytes);
  std::uint32_t divisions(int interval) const { return divisions_[interval]; }
  std::uint32_t DivisionsFor(std::size_t bytes) const { return divisions_[IntervalOf(bytes)]; }
  // Whether any interval rounds (divisions > 1).
  bool enabled() const;

  friend bool operator==(const RoundupPower2Divisions&, const RoundupPower2Divisions&) = default;

 private:
  std::array<std::uint32_t, kIntervals> divisions_{};
};

// Abseil flag marshalling (found by ADL).
bool AbslParseFlag(absl::string_view text, RoundupPower2Divisions* value, std::string* error);
std::string AbslUnparseFlag(const RoundupPower2Divisions& value);

}  // namespace strata::flags
