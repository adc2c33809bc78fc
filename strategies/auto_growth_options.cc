#include "strategies/auto_growth_options.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"

namespace strata::strategies {

namespace {

constexpr bool IsPowerOfTwo(std::size_t x) { return x != 0 && (x & (x - 1)) == 0; }
constexpr std::size_t RoundUp(std::size_t x, std::size_t a) { return (x + a - 1) & ~(a - 1); }
int Log2Floor(std::size_t x) { return 63 - __builtin_clzll(x); }

// Named as the layer is (AutoGrowthBestFitAllocator::kName, which this file comes before).
std::invalid_argument BadOption(const std::string& name, const std::string& value,
                                const std::string& allowed) {
  return std::invalid_argument(absl::StrCat("strata: auto_growth_best_fit option ", name, " = ",
                                            value, " is invalid: ", allowed));
}

}  // namespace

void ValidateAutoGrowthOptions(const AutoGrowthOptions& o) {
  constexpr std::size_t kMaxBytes = AutoGrowthOptions::kMaxRequestBytes;
  if (!IsPowerOfTwo(o.growth_granularity) || o.growth_granularity > kMaxBytes) {
    throw BadOption("growth_granularity", std::to_string(o.growth_granularity),
                    "must be a power of two (default 2 MiB)");
  }
  if (!IsPowerOfTwo(o.alignment) || o.alignment > o.growth_granularity) {
    throw BadOption("alignment", std::to_string(o.alignment),
                    absl::StrCat("must be a power of two no larger than growth_granularity (",
                                 o.growth_granularity, ")"));
  }
  if (o.chunk_size > kMaxBytes) {
    throw BadOption("chunk_size", std::to_string(o.chunk_size), "must be at most 2^60 bytes");
  }
  if (o.small_size > 0 &&
      (o.small_chunk_size < o.small_size || o.small_chunk_size % o.growth_granularity != 0 ||
       o.small_chunk_size > kMaxBytes)) {
    throw BadOption(
        "small_chunk_size", std::to_string(o.small_chunk_size),
        absl::StrCat("must be at least small_size (", o.small_size,
                     ") and a multiple of growth_granularity (", o.growth_granularity, ")"));
  }
  if (o.max_split_size != 0 && o.max_split_size <= o.small_size) {
    throw BadOption(
        "max_split_size", std::to_string(o.max_split_size),
        absl::StrCat("must be 0 (unlimited) or larger than small_size (", o.small_size, ")"));
  }
  if (o.max_split_size > kMaxBytes || o.oversize_slack > kMaxBytes) {
    throw BadOption(o.max_split_size > kMaxBytes ? "max_split_size" : "oversize_slack",
                    std::to_string(std::max(o.max_split_size, o.oversize_slack)),
                    "must be at most 2^60 bytes");
  }
  if (o.roundup_power2_divisions.size() > AutoGrowthOptions::kMaxRoundupIntervals) {
    throw BadOption("roundup_power2_divisions",
                    absl::StrCat(o.roundup_power2_divisions.size(), " entries"),
                    absl::StrCat("has one entry per power-of-two interval from 1 MiB, at most ",
                                 AutoGrowthOptions::kMaxRoundupIntervals));
  }
  for (std::size_t i = 0; i < o.roundup_power2_divisions.size(); ++i) {
    const std::size_t d = o.roundup_power2_divisions[i];
    if (d != 0 && (!IsPowerOfTwo(d) || d > 65536)) {
      throw BadOption(absl::StrCat("roundup_power2_divisions[", i, "]"), std::to_string(d),
                      "each entry must be 0 or a power of two up to 65536");
    }
  }
  const double t = o.garbage_collection_threshold;
  if (!(t >= 0.0 && t < 1.0)) {
    throw BadOption("garbage_collection_threshold", std::to_string(t),
                    "must be 0 (off) or in (0, 1)");
  }
  if (t > 0.0 && o.memory_limit == 0) {
    throw BadOption("garbage_collection_threshold", std::to_string(t),
                    "needs memory_limit > 0 (the threshold is a fraction of it)");
  }
}

std::size_t RoundWithDivisions(const AutoGrowthOptions& options, std::size_t size) {
  const std::size_t align = options.alignment;
  const auto& divs = options.roundup_power2_divisions;
  if (size > 0 && !divs.empty()) {
    const int log = Log2Floor(size);
    const std::size_t index = std::min<std::size_t>(log > 20 ? log - 20 : 0, divs.size() - 1);
    const std::size_t d = divs[index];
    if (d > 1 && size > align * d && !IsPowerOfTwo(size)) {
      // Round up to the next of d equal steps of [2^log, 2^(log+1)).
      const std::size_t floor = std::size_t{1} << log;
      const std::size_t step = floor >> Log2Floor(d);
      size = step == 0 ? floor << 1 : RoundUp(size, step);
    }
  }
  return std::max(RoundUp(size, align), align);
}

std::size_t GcTargetBytes(const AutoGrowthOptions& options) {
  if (options.garbage_collection_threshold <= 0.0) return 0;
  return static_cast<std::size_t>(options.garbage_collection_threshold *
                                  static_cast<double>(options.memory_limit));
}

}  // namespace strata::strategies
