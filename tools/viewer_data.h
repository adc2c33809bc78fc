// The parts of the memory viewer's embedded data (tools/viewer_page.h), one file per part:
// the segment map of a snapshot (viewer_snapshot.cc), the active-memory timeline of a trace or a
// replay's series (viewer_timeline.cc) and a comparison of two recordings (viewer_comparison.cc).
// ViewerData (viewer_page.cc) puts them together. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "tools/trace.h"
#include "tools/viewer_page.h"

namespace strata::tools::viewer {

using Json = nlohmann::json;
// Header figures (label, value), in the order shown.
using Figures = std::vector<std::pair<std::string, std::string>>;

// Longest context text embedded: a Python stack is far shorter; this bounds a runaway one.
inline constexpr std::size_t kMaxContextChars = 4000;

inline std::string Hex(std::uint64_t v) { return absl::StrFormat("0x%x", v); }

// Buckets of consecutive events: bucket b covers events [b * width, (b + 1) * width).
struct Buckets {
  std::uint64_t width = 1;
  std::size_t count = 0;
};
// At most max(max_points, 2) buckets over num_events events.
Buckets MakeBuckets(std::uint64_t num_events, std::size_t max_points);

// The "segments" object of a checked snapshot; adds its figures.
Json SegmentsData(const Json& snapshot, Figures* figures);
// The "timeline" object of a trace (with options.series as "external" when given); adds figures.
Json TimelineData(const Trace& trace, const ViewerOptions& options, Figures* figures);
// A timeline from a replay's series alone (no trace); options.series must not be empty.
Json SeriesOnlyTimeline(const ViewerOptions& options);
// The "comparison" object of two recordings of the trace's events; adds figures.
Json ComparisonData(const Trace& trace, const ViewerComparison& c, const ViewerOptions& options,
                    Figures* figures);

}  // namespace strata::tools::viewer
