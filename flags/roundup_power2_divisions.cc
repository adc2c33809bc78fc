#include "flags/roundup_power2_divisions.h"

#include <algorithm>
#include <bit>
#include <stdexcept>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace strata::flags {
namespace {

constexpr absl::string_view kSyntax =
    "expected N or a list like [256:1,512:2,>:8], where N and the divisions are 0 or a power of "
    "two <= 65536 and the keys are sizes in MB, powers of two in [1, 32768], strictly "
    "increasing, with an optional final '>' for all larger sizes";

bool ParseDivisionsToken(absl::string_view token, std::uint32_t* out, std::string* why) {
  std::uint64_t value = 0;
  if (!absl::SimpleAtoi(token, &value)) {
    *why = absl::StrCat("divisions '", token, "' is not a non-negative integer");
    return false;
  }
  if (value != 0 &&
      (!std::has_single_bit(value) || value > RoundupPower2Divisions::kMaxDivisions)) {
    *why =
        absl::StrCat("divisions ", token,
                     " is neither 0 nor a power of two <= ", RoundupPower2Divisions::kMaxDivisions);
    return false;
  }
  *out = static_cast<std::uint32_t>(value);
  return true;
}

}  // namespace

RoundupPower2Divisions RoundupPower2Divisions::Uniform(std::uint32_t divisions) {
  if (divisions != 0 && (!std::has_single_bit(divisions) || divisions > kMaxDivisions)) {
    throw std::invalid_argument(
        absl::StrCat("roundup_power2_divisions: divisions ", divisions,
                     " is neither 0 nor a power of two <= ", kMaxDivisions));
  }
  RoundupPower2Divisions result;
  result.divisions_.fill(divisions);
  return result;
}

bool RoundupPower2Divisions::Parse(std::string_view text_in, RoundupPower2Divisions* out,
                                   std::string* error) {
  absl::string_view text(text_in.data(), text_in.size());
  std::string why;
  auto fail = [&](const std::string& reason) {
    *error = absl::StrCat("invalid roundup_power2_divisions '", text, "': ", reason, "; ", kSyntax);
    return false;
  };
  absl::string_view t = absl::StripAsciiWhitespace(text);
  if (t.empty()) return fail("empty value");

  RoundupPower2Divisions result;
  if (t.front() != '[') {
    std::uint32_t divisions = 0;
    if (!ParseDivisionsToken(t, &divisions, &why)) return fail(why);
    result.divisions_.fill(divisions);
    *out = result;
    return true;
  }
  if (t.size() < 2 || t.back() != ']') return fail("a list must end with ']'");
  absl::string_view inner = absl::StripAsciiWhitespace(t.substr(1, t.size() - 2));
  if (inner.empty()) return fail("empty list");

  int last_index = -1;
  std::uint64_t last_key = 0;
  bool saw_rest = false;
  for (absl::string_view entry : absl::StrSplit(inner, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) return fail("empty list entry");
    if (saw_rest) return fail("'>' must be the last entry");
    std::size_t colon = entry.find(':');
    if (colon == absl::string_view::npos) {
      return fail(absl::StrCat("entry '", entry, "' is not key:divisions"));
    }
    absl::string_view key = absl::StripAsciiWhitespace(entry.substr(0, colon));
    absl::string_view value = absl::StripAsciiWhitespace(entry.substr(colon + 1));
    std::uint32_t divisions = 0;
    if (!ParseDivisionsToken(value, &divisions, &why)) return fail(why);
    if (key == ">") {
      std::fill(result.divisions_.begin() + (last_index + 1), result.divisions_.end(), divisions);
      saw_rest = true;
      continue;
    }
    std::uint64_t key_mb = 0;
    if (!absl::SimpleAtoi(key, &key_mb)) {
      return fail(absl::StrCat("key '", key, "' is neither a size in MB nor '>'"));
    }
    if (!std::has_single_bit(key_mb)) {
      return fail(absl::StrCat("key ", key, " MB is not a power of two"));
    }
    if (key_mb > kMaxKeyMb) {
      return fail(absl::StrCat("key ", key, " MB is above ", kMaxKeyMb,
                               " (the last interval already holds 32 GB and more)"));
    }
    int index = std::countr_zero(key_mb);
    if (index <= last_index) {
      return fail(absl::StrCat("keys must increase, but ", key, " follows ", last_key));
    }
    // The first key also covers every smaller size, as in PyTorch.
    std::fill(result.divisions_.begin() + (last_index < 0 ? 0 : index),
              result.divisions_.begin() + index + 1, divisions);
    last_index = index;
    last_key = key_mb;
  }
  *out = result;
  return true;
}

RoundupPower2Divisions RoundupPower2Divisions::FromString(std::string_view text) {
  RoundupPower2Divisions result;
  std::string error;
  if (!Parse(text, &result, &error)) throw std::invalid_argument(error);
  return result;
}

std::string RoundupPower2Divisions::ToString() const {
  const auto& d = divisions_;
  int lead_end = 0;  // last index of the leading run
  while (lead_end + 1 < kIntervals && d[lead_end + 1] == d[0]) ++lead_end;
  if (lead_end == kIntervals - 1) return absl::StrCat(d[0]);
  int tail_start = kIntervals - 1;  // first index of the trailing run
  while (tail_start > 0 && d[tail_start - 1] == d[kIntervals - 1]) --tail_start;

  std::vector<std::string> entries;
  entries.push_back(absl::StrCat(std::uint64_t{1} << lead_end, ":", d[0]));
  for (int i = lead_end + 1; i < tail_start; ++i) {
    entries.push_back(absl::StrCat(std::uint64_t{1} << i, ":", d[i]));
  }
  entries.push_back(absl::StrCat(">:", d[kIntervals - 1]));
  return absl::StrCat("[", absl::StrJoin(entries, ","), "]");
}

int RoundupPower2Divisions::IntervalOf(std::size_t bytes) {
  constexpr int kFirstLog2 = 20;  // 1 MB
  int log2 = bytes == 0 ? 0 : static_cast<int>(std::bit_width(bytes)) - 1;
  return std::clamp(log2 - kFirstLog2, 0, kIntervals - 1);
}

bool RoundupPower2Divisions::enabled() const {
  return std::any_of(divisions_.begin(), divisions_.end(), [](std::uint32_t d) { return d > 1; });
}

bool AbslParseFlag(absl::string_view text, RoundupPower2Divisions* value, std::string* error) {
  return RoundupPower2Divisions::Parse(std::string_view(text.data(), text.size()), value, error);
}

std::string AbslUnparseFlag(const RoundupPower2Divisions& value) { return value.ToString(); }

}  // namespace strata::flags
