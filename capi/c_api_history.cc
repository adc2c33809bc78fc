// The C ABI's history family (strata/c_api.h, "memory history"; docs/HISTORY.md): the memory
// history, snapshots and out-of-memory observers, over the facade's RecordHistory, Snapshot and
// AddOomObserver.
#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "capi/device_call.h"
#include "capi/guard.h"
#include "capi/library_state.h"
#include "facade/allocator_facade.h"
#include "history/history_recorder.h"
#include "reporting/memory_summary.h"
#include "strata/c_api.h"

extern "C" {

int strata_record_history(int device, size_t max_entries, strata_context_fn context,
                          void* user_data) {
  return strata::capi::OnDevice(
      device,
      strata::capi::CallText("strata_record_history", "device=", device,
                             ", max_entries=", max_entries),
      /*log=*/false, [&](strata::facade::AllocatorFacade& f, const strata::platform::Place& place) {
        strata::history::HistoryOptions o;
        if (max_entries != 0) o.max_entries = max_entries;
        if (context != nullptr) {
          o.context = [context, user_data] {
            constexpr std::size_t kMaxContext = std::size_t{1} << 20;
            std::string text(256, '\0');
            std::size_t n = context(text.data(), text.size(), user_data);
            if (n >= text.size()) {
              text.assign(std::min(n, kMaxContext) + 1, '\0');
              n = context(text.data(), text.size(), user_data);
            }
            text.resize(std::min(n, text.size() - 1));
            return text;
          };
        }
        f.RecordHistory(place, std::move(o));
      });
}

int strata_stop_history(int device, const char* path) {
  return strata::capi::OnDevice(
      device,
      strata::capi::CallText("strata_stop_history", "device=", device,
                             ", path=", path != nullptr ? path : "NULL"),
      /*log=*/false, [&](strata::facade::AllocatorFacade& f, const strata::platform::Place& place) {
        if (path == nullptr) throw std::invalid_argument("path is NULL");
        if (!f.IsRecordingHistory(place)) {
          throw std::invalid_argument("the device is not recording (call strata_record_history)");
        }
        f.StopHistory(place, std::string(path));
      });
}

int strata_snapshot(int device, char* buf, size_t len) {
  return strata::capi::TextOut(
      "strata_snapshot", device, buf, len,
      [](strata::facade::AllocatorFacade& f, const strata::platform::Place& place) {
        return f.Snapshot(place);
      });
}

int strata_add_oom_observer(strata_oom_fn observer, void* user_data, int with_snapshot) {
  return strata::capi::Guard(
      [&] {
        if (observer == nullptr) throw std::invalid_argument("observer is NULL");
        return strata::capi::Library().Facade().AddOomObserver(
            [observer, user_data](const strata::facade::AllocatorFacade::OomReport& r) {
              const std::string stats = strata::reporting::MemoryStatsToJson(r.stats);
              observer(r.place.device(), r.requested, stats.c_str(),
                       r.snapshot.empty() ? nullptr : r.snapshot.c_str(), user_data);
            },
            with_snapshot != 0);
      },
      [&] { return std::string("strata_add_oom_observer"); }, /*log=*/false);
}

int strata_remove_oom_observer(int id) {
  return strata::capi::Guard(
      [&] {
        strata::capi::Library().Facade().RemoveOomObserver(id);
        return STRATA_OK;
      },
      [&] { return absl::StrCat("strata_remove_oom_observer(id=", id, ")"); }, /*log=*/false);
}

}  // extern "C"
