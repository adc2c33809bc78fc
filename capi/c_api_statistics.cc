// The C ABI's cache and statistics family (strata/c_api.h, "cache and statistics"): emptying the
// cache, the memory fraction, the statistics JSON, the summary table, peaks, live allocations.
#include <cstddef>
#include <cstdint>

#include "capi/device_call.h"
#include "capi/library_state.h"
#include "facade/allocator_facade.h"
#include "glog/logging.h"
#include "platform/place.h"
#include "strata/c_api.h"

namespace strata::capi {
namespace {

// strata_empty_cache (empty = true) and strata_reset_peak_stats.
int DeviceOp(const char* fn, int device, bool empty) {
  return OnDevice(device, CallText(fn, "device=", device), /*log=*/false,
                  [&](facade::AllocatorFacade& f, const platform::Place& place) {
                    if (empty) {
                      const std::uint64_t bytes = f.EmptyCache(place);
                      VLOG(1) << "strata_empty_cache(" << device << "): released " << bytes
                              << " bytes";
                    } else {
                      f.ResetPeakStats(place);
                    }
                  });
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
  return strata::capi::DeviceOp("strata_empty_cache", device, /*empty=*/true);
}

int strata_set_memory_fraction(double fraction, int device) {
  return OnDevice(
      device, CallText("strata_set_memory_fraction", "fraction=", fraction, ", device=", device),
      /*log=*/true,
      [&](AllocatorFacade& f, const Place& place) { f.SetMemoryFraction(place, fraction); });
}

int strata_reset_peak_stats(int device) {
  return strata::capi::DeviceOp("strata_reset_peak_stats", device, /*empty=*/false);
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
