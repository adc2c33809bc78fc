// The C ABI's cache and statistics family (strata/c_api.h, "cache and statistics"): emptying the
// cache, the memory fraction, the statistics (JSON, or figures by key), the summary table, resets
// of peaks and of accumulated figures, live allocations.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "capi/device_call.h"
#include "capi/library_state.h"
#include "facade/allocator_facade.h"
#include "glog/logging.h"
#include "platform/place.h"
#include "reporting/memory_summary.h"
#include "strata/c_api.h"

namespace strata::capi {
namespace {

enum class DeviceAction { kEmptyCache, kResetPeaks, kResetAccumulated };

// strata_empty_cache, strata_reset_peak_stats, strata_reset_accumulated_stats.
int DeviceOp(const char* fn, int device, DeviceAction action) {
  return OnDevice(device, CallText(fn, "device=", device), /*log=*/false,
                  [&](facade::AllocatorFacade& f, const platform::Place& place) {
                    switch (action) {
                      case DeviceAction::kEmptyCache: {
                        const std::uint64_t bytes = f.EmptyCache(place);
                        VLOG(1) << "strata_empty_cache(" << device << "): released " << bytes
                                << " bytes";
                        break;
                      }
                      case DeviceAction::kResetPeaks:
                        f.ResetPeakStats(place);
                        break;
                      case DeviceAction::kResetAccumulated:
                        f.ResetAccumulatedStats(place);
                        break;
                    }
                  });
}

// strata_memory_stats_values: every key checked before any value is written.
void StatValues(facade::AllocatorFacade& f, const platform::Place& place, const char* const* keys,
                std::int64_t* values, std::size_t count) {
  if (count == 0) return;
  if (keys == nullptr || values == nullptr) {
    throw std::invalid_argument(
        absl::StrCat("keys and values must not be NULL (count ", count, ")"));
  }
  absl::flat_hash_map<std::string, std::int64_t> figures;
  reporting::ForEachStat(
      f.GetMemoryStats(place),
      [&figures](const std::string& key, std::int64_t value) { figures.emplace(key, value); });
  std::vector<std::int64_t> found(count);
  for (std::size_t i = 0; i < count; ++i) {
    if (keys[i] == nullptr) throw std::invalid_argument(absl::StrCat("keys[", i, "] is NULL"));
    const auto it = figures.find(keys[i]);
    if (it == figures.end()) {
      throw std::invalid_argument(absl::StrCat(
          "no statistic named \"", keys[i],
          "\" (the keys are those of strata_memory_stats_json, e.g. allocated_bytes.all.current)"));
    }
    found[i] = it->second;
  }
  for (std::size_t i = 0; i < count; ++i) values[i] = found[i];
}

}  // namespace
}  // namespace strata::capi

using strata::capi::CallText;
using strata::capi::OnDevice;
using strata::capi::TextOut;
using strata::facade::AllocatorFacade;
using strata::platform::Place;

extern "C" {

int strata_empty_cache(int device) {
  return strata::capi::DeviceOp("strata_empty_cache", device,
                                strata::capi::DeviceAction::kEmptyCache);
}

int strata_set_memory_fraction(double fraction, int device) {
  return OnDevice(
      device, CallText("strata_set_memory_fraction", "fraction=", fraction, ", device=", device),
      /*log=*/true,
      [&](AllocatorFacade& f, const Place& place) { f.SetMemoryFraction(place, fraction); });
}

int strata_reset_peak_stats(int device) {
  return strata::capi::DeviceOp("strata_reset_peak_stats", device,
                                strata::capi::DeviceAction::kResetPeaks);
}

int strata_reset_accumulated_stats(int device) {
  return strata::capi::DeviceOp("strata_reset_accumulated_stats", device,
                                strata::capi::DeviceAction::kResetAccumulated);
}

int strata_memory_stats_values(int device, const char* const* keys, int64_t* values, size_t count) {
  return OnDevice(device,
                  CallText("strata_memory_stats_values", "device=", device, ", count=", count),
                  /*log=*/false, [&](AllocatorFacade& f, const Place& place) {
                    strata::capi::StatValues(f, place, keys, values, count);
                  });
}

int strata_memory_stats_json(int device, char* buf, size_t len) {
  return TextOut("strata_memory_stats_json", device, buf, len,
                 [](AllocatorFacade& f, const Place& place) { return f.MemoryStatsJson(place); });
}

int strata_memory_summary(int device, char* buf, size_t len) {
  return TextOut("strata_memory_summary", device, buf, len,
                 [](AllocatorFacade& f, const Place& place) { return f.MemorySummary(place); });
}

int64_t strata_live_allocations(void) {
  try {
    return strata::capi::Library().registry().Count();
  } catch (...) {
    return 0;  // Count() takes spin locks only; nothing in it throws
  }
}

}  // extern "C"
