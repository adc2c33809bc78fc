// SnapshotToJson: a MemorySnapshot with the place's statistics as one JSON object, the format of
// docs/HISTORY.md ("Snapshots"), which strata-viz draws. Thread-compatible; throws only
// std::bad_alloc.
#pragma once

#include <string>

#include "allocation/memory_snapshot.h"
#include "allocation/memory_stats.h"
#include "platform/place.h"

namespace strata::reporting {

std::string SnapshotToJson(const allocation::MemorySnapshot& snapshot, const platform::Place& place,
                           const allocation::MemoryStats& stats);

}  // namespace strata::reporting
