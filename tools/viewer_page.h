// The memory viewer: one self-contained HTML page (inline CSS and JS, the data embedded as JSON,
// no network) drawing a recorded history as an active-memory timeline and a snapshot as a
// segment map (docs/HISTORY.md, "The viewer").
//
// The timeline stacks the live allocations as bands (one per allocation, from its alloc event to
// its free event, coloured by stream; when a band ends, those above shift down), over the total
// requested bytes; the reserved total comes from the trace's `seg` lines or from a series the
// caller passes (a replay passes its sampled requested / allocated / reserved bytes per event
// index). So that a page of a long trace stays small and responsive, the data is reduced here:
// only the largest max_bands allocations become bands (the rest show as one grey area of
// "smaller allocations"), and the series keep at most max_points buckets holding their maxima.
//
// Contract
// - Thread safety: pure functions; concurrent calls are fine.
// - ViewerData / RenderViewerPage throw std::invalid_argument for a snapshot that does not follow
//   the schema of docs/HISTORY.md (the message names the JSON pointer of the bad value), and for
//   series samples whose event indices decrease.
// - LoadSnapshot throws std::runtime_error "PATH: ..." (cannot open, malformed JSON with line and
//   column, schema error).
// - WriteViewerPage writes through a history::TraceFile (a temporary beside the target renamed
//   over it: a reader never sees half a page; a link's target is written; a device, FIFO or
//   directory is refused); it throws std::runtime_error naming the path and the OS error when it
//   cannot.
// - The page sets <div id="status"> to "rendered: N bands, M segments" after drawing, or to
//   "error: ..." (window.onerror too), for headless checks (tools/viz_check.sh). A comparison
//   page sets it to "rendered: 2 recordings compared, ..." only once both were drawn.
//
// Comparison (ViewerOptions::comparison, strata-viz --compare): two recordings of the trace's
// events (tools/memory_compare.h) on one event axis in place of the active-memory timeline:
// each one's reserved and allocated bytes over the trace's requested bytes, the difference of
// their reserved bytes, and a table of the events where it grows most with the allocation each
// one made or freed. ViewerData throws std::invalid_argument for a comparison without a trace,
// or one whose curves do not have one value per event of the trace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"
#include "tools/memory_compare.h"
#include "tools/trace.h"

namespace strata::tools {

// One bucket of an externally sampled series (the maxima over events first..last), e.g. a
// replay's figures after each event.
struct ViewerSample {
  std::uint64_t first_event = 0;
  std::uint64_t last_event = 0;
  std::uint64_t requested = 0;
  std::uint64_t allocated = 0;
  std::uint64_t reserved = 0;
};

// A dashed horizontal line with a label (e.g. PyTorch's peak reserved).
struct ViewerReference {
  std::string label;
  std::uint64_t bytes = 0;
};

// Two recordings to compare (see above): `a` is the base, the gap is b - a.
struct ViewerComparison {
  MemoryCurve a;
  MemoryCurve b;
  std::size_t top = 10;  // moments listed
};

struct ViewerOptions {
  std::string title;     // default: the trace's workload, else the snapshot's place
  std::string subtitle;  // a second line (configuration, figures)
  std::size_t max_bands = 3000;
  std::size_t max_points = 2000;  // buckets of the series
  // Drawn in place of the reserved total computed from `seg` lines when not empty; event indices
  // are those of trace->events() and must not decrease.
  std::vector<ViewerSample> series;
  std::vector<ViewerReference> references;
  // Extra header figures (label, value), shown after those of the trace and the snapshot.
  std::vector<std::pair<std::string, std::string>> figures;
  // Set: the page compares two recordings of the trace's events (needs a trace).
  std::optional<ViewerComparison> comparison;
};

// Checks a snapshot against the schema; throws std::invalid_argument naming the JSON pointer.
void CheckSnapshot(const nlohmann::json& snapshot);
// Reads and checks a snapshot file.
nlohmann::json LoadSnapshot(const std::string& path);

// The data the page embeds: {"title", "subtitle", "figures": [[label, value]...], "timeline":
// {...} or null, "segments": {...} or null, "comparison": {...} or null}. `trace` and
// `snapshot` may be null; with a comparison the timeline is null.
nlohmann::json ViewerData(const Trace* trace, const nlohmann::json* snapshot,
                          const ViewerOptions& options);

std::string RenderViewerPage(const Trace* trace, const nlohmann::json* snapshot,
                             const ViewerOptions& options);
void WriteViewerPage(const std::string& path, const Trace* trace, const nlohmann::json* snapshot,
                     const ViewerOptions& options);

// strata-viz's command line: --trace=FILE[.gz] and/or --snapshot=FILE.json, --out=FILE.html,
// [--title=TEXT] [--max_bands=N]; or a comparison: --trace=FILE[.gz] --compare=SIDE
// [--base=SIDE] --out=FILE.html [--title=TEXT] (sides: tools/compare_sides.h; the base is
// strata's replay with the default flags unless given). Returns the exit status: 0, 2 for
// misuse or an unreadable or malformed input (the message on `err` names the file or the flag),
// 1 when the page cannot be written or a replay runs out of memory.
int RunViewerTool(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace strata::tools
