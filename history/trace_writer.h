// WriteTrace: turns the events a HistoryRecorder kept into the text of a trace (docs/HISTORY.md):
// one order, allocation ids, streams numbered by first use, the header's counts.
//
// Order: events come with their time (a coarse clock), their thread and a per-thread index
// (increasing within a thread). They are sorted by (time, thread, index): exact within a thread;
// events of several threads within one tick of the clock are merged so that each address's
// events alternate as they must (an address is allocated again only after its free, a deferred
// free is reclaimed only after it was deferred), which is how they happened: the pools serialize
// the events of one address.
//
// Left out: frees, deferrals and reclaims of allocations not in the events (recorded before the
// kept window), counted in the header's "left_out".
//
// Thread-compatible (a pure function); throws only std::bad_alloc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "history/history_recorder.h"
#include "nlohmann/json.hpp"

namespace strata::history {

struct RecordedEvent {
  std::uint64_t time_ns;  // absolute (the recorder's clock)
  std::uint64_t index;    // increasing within a thread
  std::uint64_t addr;
  std::uint64_t bytes;
  std::uint64_t stream;  // the stream handle
  EventKind kind;
  std::uint32_t thread;
  std::uint32_t context;
};

// `events` in any order; keeps the newest `max_events` of them (adding the others to
// header["dropped"]); `start_ns` is time 0 of the `t` attributes; `contexts` maps texts to ids.
std::string WriteTrace(std::vector<RecordedEvent> events, std::size_t max_events,
                       std::uint64_t start_ns, nlohmann::json header,
                       const absl::flat_hash_map<std::string, std::uint32_t>& contexts);

}  // namespace strata::history
