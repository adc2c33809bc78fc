// AllocatorStrategy: which pooling strategy the facade composes (flag allocator_strategy).
//
// Contract: a plain enum with Abseil flag marshalling, so `--allocator_strategy=bogus` (or
// FLAGS_allocator_strategy / STRATA_ALLOC_CONF) is rejected at parse time with a message listing
// the allowed names. Parsing is case-sensitive, as in Paddle. Thread-safe (pure functions);
// nothing here throws except ParseAllocatorStrategy (std::invalid_argument).
#pragma once

#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

namespace strata::flags {

enum class AllocatorStrategy {
  kNaiveBestFit,  // "naive_best_fit": Paddle's buddy allocator over big pre-sized chunks
  kAutoGrowth,    // "auto_growth": best-fit pool growing by chunks on demand (default)
  kThreadLocal,   // "thread_local": one pool per thread
};

// The flag spelling: "naive_best_fit", "auto_growth" or "thread_local".
std::string_view AllocatorStrategyName(AllocatorStrategy strategy);

// "naive_best_fit | auto_growth | thread_local", for messages.
std::string_view AllowedAllocatorStrategies();

// Throws std::invalid_argument naming the value and the allowed names.
AllocatorStrategy ParseAllocatorStrategy(std::string_view text);

// Abseil flag marshalling (found by ADL).
bool AbslParseFlag(absl::string_view text, AllocatorStrategy* strategy, std::string* error);
std::string AbslUnparseFlag(AllocatorStrategy strategy);

}  // namespace strata::flags
