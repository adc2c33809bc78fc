// Formatting of MemoryStats: the table PyTorch's torch.cuda.memory_summary() prints, and a flat
// JSON object with torch.cuda.memory_stats()'s keys ("allocated_bytes.all.current", ...), in
// that order, on one line in Python's json.dumps() layout ({"key": 1, "key": 2}); all values are
// integers. Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "allocation/memory_stats.h"
#include "platform/place.h"

namespace strata::reporting {

std::string FormatMemorySummary(const allocation::MemoryStats& stats, const platform::Place& place,
                                bool abbreviated = false);
std::string MemoryStatsToJson(const allocation::MemoryStats& stats);

// Every figure of `stats` under its torch.cuda.memory_stats() key, in the JSON's order.
void ForEachStat(const allocation::MemoryStats& stats,
                 absl::FunctionRef<void(const std::string& key, std::int64_t value)> visit);

}  // namespace strata::reporting
