#include "flags/allocator_strategy.h"

#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"

namespace strata::flags {
namespace {

// Every strategy and its flag spelling, for the name and the parser both.
constexpr std::pair<AllocatorStrategy, std::string_view> kStrategies[] = {
    {AllocatorStrategy::kNaiveBestFit, "naive_best_fit"},
    {AllocatorStrategy::kAutoGrowth, "auto_growth"},
    {AllocatorStrategy::kThreadLocal, "thread_local"},
};

}  // namespace

std::string_view AllocatorStrategyName(AllocatorStrategy strategy) {
  for (const auto& [s, name] : kStrategies) {
    if (s == strategy) return name;
  }
  return "unknown";
}

std::string_view AllowedAllocatorStrategies() {
  return "naive_best_fit | auto_growth | thread_local";
}

bool AbslParseFlag(absl::string_view text, AllocatorStrategy* strategy, std::string* error) {
  for (const auto& [s, name] : kStrategies) {
    if (std::string_view(text.data(), text.size()) == name) {
      *strategy = s;
      return true;
    }
  }
  *error = absl::StrCat("unknown allocator strategy '", text,
                        "'; allowed: ", std::string(AllowedAllocatorStrategies()));
  return false;
}

std::string AbslUnparseFlag(AllocatorStrategy strategy) {
  return std::string(AllocatorStrategyName(strategy));
}

AllocatorStrategy ParseAllocatorStrategy(std::string_view text) {
  AllocatorStrategy strategy;
  std::string error;
  if (!AbslParseFlag(absl::string_view(text.data(), text.size()), &strategy, &error))
    throw std::invalid_argument(error);
  return strategy;
}

}  // namespace strata::flags
