// Two recordings of the same events compared: each one's memory after every event of a trace (a
// MemoryCurve), and where their reserved memory diverges (FindDivergence), for the memory
// viewer's comparison page (strata-viz --compare, tools/viewer_page.h).
//
// The gap after event i is b.reserved[i] - a.reserved[i] (positive: b holds more). A moment is
// one event at which the gap moves away from zero: its growth is |gap after| - |gap before|
// (the gap before the first event is 0, as both start empty). Moments where the gap shrinks are
// the two converging again and are not listed.
//
// Contract
// - Thread safety: pure functions; concurrent calls are fine.
// - FindDivergence throws std::invalid_argument when the curves differ in length or an
//   allocated series is neither empty nor as long as the reserved one; CheckSameEvents throws it
//   naming the first event at which two traces differ (or their lengths).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tools/trace.h"

namespace strata::tools {

// One recording's memory over a trace's events: element i is the figure after event i.
struct MemoryCurve {
  std::string label;
  std::vector<std::uint64_t> reserved;
  // Empty when the recording does not know it (a trace's `seg` lines give reserved bytes only).
  std::vector<std::uint64_t> allocated;
};

// The change a recording's device call makes to reserved bytes: +bytes for `seg malloc` and
// `seg create`, -bytes for `seg free` and `seg release`; false for lines that change nothing (a
// virtual-memory map or unmap moves pages already counted by their create or release).
bool ReservedDelta(const OtherEvent& e, std::int64_t* delta);

// The reserved bytes of a recording as its `seg` lines tell them (+malloc, +create, -free,
// -release), one value per event: the level once the device calls before that event's line ran
// (those an allocation makes are written before it). A recording that lost its oldest events
// may free segments it never saw allocated: the curve is then lifted so that it never goes
// below zero (those segments existed before the window). Empty when the trace has no such line.
std::vector<std::uint64_t> ReservedFromSegLines(const Trace& trace);

// Live requested bytes after each event.
std::vector<std::uint64_t> RequestedAfterEachEvent(const Trace& trace);

struct DivergenceMoment {
  std::uint64_t event = 0;
  std::int64_t gap_before = 0;
  std::int64_t gap_after = 0;
  std::int64_t change_a = 0;  // a's reserved bytes after the event minus before it
  std::int64_t change_b = 0;
};

struct Divergence {
  std::vector<std::int64_t> gap;               // per event, b - a
  std::uint64_t peak_a = 0, peak_a_event = 0;  // first event reaching each side's peak
  std::uint64_t peak_b = 0, peak_b_event = 0;
  // The gap of largest magnitude (signed) and the first event where it occurs.
  std::int64_t widest_gap = 0;
  std::uint64_t widest_gap_event = 0;
  // Largest growth first (ties: the earlier event), at most `top` of them.
  std::vector<DivergenceMoment> moments;
};

Divergence FindDivergence(const MemoryCurve& a, const MemoryCurve& b, std::size_t top);

// Throws std::invalid_argument unless `other` has the a/f events of `base` (same count, and at
// each index the same kind, allocation and bytes; streams may be numbered differently).
void CheckSameEvents(const Trace& base, const Trace& other);

}  // namespace strata::tools
