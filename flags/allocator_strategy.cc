#include "flags/allocator_strategy.h"

#include <stdexcept>

#include "absl/strings/str_cat.h"

namespace strata::flags {

std::string_view AllocatorStrategyName(AllocatorStrategy strategy) {
  switch (strategy) {
    case AllocatorStrategy::kNaiveBestFit:
      return "naive_best_fit";
    case AllocatorStrategy::kAutoGrowth:
      return "auto_growth";
    case AllocatorStrategy::kThreadLocal:
      return "thread_local";
  }
  return "unknown";
}

std::string_view AllowedAllocatorStrategies() {
  return "naive_best_fit | auto_growth | thread_local";
}

bool AbslParseFlag(absl::string_view text, AllocatorStrategy* strategy, std::string* error) {
  for (AllocatorStrategy s : {AllocatorStrategy::kNaiveBestFit, AllocatorStrategy::kAutoGrowth,
                              AllocatorStrategy::kThreadLocal}) {
    if (std::string_view(text.data(), text.size()) == AllocatorStrategyName(s)) {
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
