#include "reporting/memory_summary.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace strata::reporting {

namespace {

using allocation::MemoryStats;
using allocation::StatArray;
using allocation::StatValue;

constexpr int kWidth = 75;

// Divides `value` by `base` once per unit step: a step while the row's reference value (the
// "all" figure of the column) is still at least `threshold` in the current unit, up to
// `last_unit`. So every row of a block uses the same unit, as PyTorch's table does. Returns the
// scaled value and the unit's index.
std::pair<std::int64_t, int> Scale(std::int64_t value, std::int64_t reference, int base,
                                   double threshold, int last_unit) {
  int unit = 0;
  double ref = static_cast<double>(reference);
  while (unit < last_unit && ref >= threshold) {
    value /= base;
    ref /= base;
    ++unit;
  }
  return {value, unit};
}

std::string Size(std::int64_t value, std::int64_t reference) {
  static constexpr const char* kUnits[] = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
  const auto [scaled, unit] = Scale(value, reference, 1024, 768.0 * 1024, 5);
  return absl::StrFormat("%6d %s", scaled, kUnits[unit]);
}

std::string Count(std::int64_t value, std::int64_t reference) {
  static constexpr const char* kUnits[] = {" ", "K", "M"};
  const auto [scaled, unit] = Scale(value, reference, 1000, 750.0 * 1000, 2);
  return absl::StrFormat("%7d %s ", scaled, kUnits[unit]);
}

struct Row {
  const char* name;
  const StatArray* stat;
  bool bytes;
};

// Python's json.dumps() layout, {"a": 1, "b": 2}, which users of the C ABI read (and grep):
// nlohmann's indented dump joined onto one line. An indented dump has raw newlines only between
// tokens (strings escape theirs), so joining never changes a value.
std::string DumpOnOneLine(const nlohmann::ordered_json& j) {
  const std::string indented = j.dump(/*indent=*/0);
  std::string out;
  out.reserve(indented.size());
  for (const char c : indented) {
    if (c != '\n') {
      out.push_back(c);
    } else if (!out.empty() && out.back() == ',') {
      out.push_back(' ');
    }
  }
  return out;
}

}  // namespace

std::string FormatMemorySummary(const MemoryStats& s, const platform::Place& place,
                                bool abbreviated) {
  std::vector<std::string> lines;
  const std::string eq(kWidth, '='), dash(kWidth, '-');
  lines.push_back(eq);
  lines.push_back(absl::StrFormat(
      " %-73s ", absl::StrCat("                 strata memory summary, ", place.ToString())));
  lines.push_back(dash);
  lines.push_back(absl::StrFormat("           OOMs: %-19d |         alloc retries: %-13d",
                                  s.num_ooms, s.num_alloc_retries));
  lines.push_back(eq);
  lines.emplace_back("        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ");
  const bool gpu = !place.is_cpu();
  const Row rows[] = {
      {"Allocated memory", &s.allocated_bytes, true},
      {"Active memory", &s.active_bytes, true},
      {"Requested memory", &s.requested_bytes, true},
      {gpu ? "GPU reserved memory" : "Reserved memory", &s.reserved_bytes, true},
      {"Non-releasable memory", &s.inactive_split_bytes, true},
      {"Allocations", &s.allocation, false},
      {"Active allocs", &s.active, false},
      {gpu ? "GPU reserved segments" : "Reserved segments", &s.segment, false},
      {"Non-releasable allocs", &s.inactive_split, false},
  };
  for (const Row& row : rows) {
    lines.push_back(dash);
    const StatValue& all = (*row.stat)[allocation::kAggregate];
    auto fmt = [&](std::int64_t v, std::int64_t ref) {
      return row.bytes ? Size(v, ref) : Count(v, ref);
    };
    auto line = [&](const std::string& name, const StatValue& v) {
      lines.push_back(absl::StrFormat(" %-21s | %s | %s | %s | %s ", name,
                                      fmt(v.current, all.current), fmt(v.peak, all.peak),
                                      fmt(v.allocated, all.allocated), fmt(v.freed, all.freed)));
    };
    line(row.name, all);
    if (!abbreviated) {
      line("      from large pool", (*row.stat)[allocation::kLargePool]);
      line("      from small pool", (*row.stat)[allocation::kSmallPool]);
    }
  }
  const std::pair<const char*, const StatValue*> oversize[] = {
      {"Oversize allocations", &s.oversize_allocations},
      {gpu ? "Oversize GPU segments" : "Oversize segments", &s.oversize_segments}};
  lines.push_back(dash);
  for (const auto& [name, v] : oversize) {
    lines.push_back(absl::StrFormat(" %-21s | %s | %s | %s | %s ", name,
                                    Count(v->current, v->current), Count(v->peak, v->peak),
                                    Count(v->allocated, v->allocated), Count(v->freed, v->freed)));
  }
  lines.push_back(eq);
  std::string out;
  for (const std::string& l : lines) absl::StrAppend(&out, "|", l, "|\n");
  return out;
}

void ForEachStat(const MemoryStats& s,
                 absl::FunctionRef<void(const std::string& key, std::int64_t value)> visit) {
  static constexpr const char* kPools[] = {"all", "small_pool", "large_pool"};
  auto add = [&visit](const std::string& key, const StatValue& v) {
    visit(key + ".current", v.current);
    visit(key + ".peak", v.peak);
    visit(key + ".allocated", v.allocated);
    visit(key + ".freed", v.freed);
  };
  for (const auto& [name, arr] : allocation::StatArrays(s)) {
    for (int p = 0; p < allocation::kNumStatPools; ++p) {
      add(absl::StrCat(name, ".", kPools[p]), (*arr)[p]);
    }
  }
  add("oversize_allocations", s.oversize_allocations);
  add("oversize_segments", s.oversize_segments);
  visit("num_sync_all_streams", s.num_sync_all_streams);
  visit("num_alloc_retries", s.num_alloc_retries);
  visit("num_ooms", s.num_ooms);
  visit("num_device_alloc", s.num_device_alloc);
  visit("num_device_free", s.num_device_free);
  visit("num_device_map", s.num_device_map);
  visit("num_device_unmap", s.num_device_unmap);
  visit("num_stream_waits", s.num_stream_waits);
  visit("num_host_waits", s.num_host_waits);
  visit("thread_cache_blocks", s.thread_cache_blocks);
  visit("thread_cache_bytes", s.thread_cache_bytes);
  visit("max_split_size", s.max_split_size);
}

std::string MemoryStatsToJson(const MemoryStats& s) {
  // ordered_json keeps torch.cuda.memory_stats()'s key order instead of sorting the keys.
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  ForEachStat(s, [&j](const std::string& key, std::int64_t value) { j[key] = value; });
  return DumpOnOneLine(j);
}

}  // namespace strata::reporting
