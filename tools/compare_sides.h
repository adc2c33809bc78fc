// The two sides of strata-viz's comparison page (--base=SIDE --compare=SIDE): what each one
// is, read from its command-line spelling, and its memory curve over the trace's events
// (tools/memory_compare.h).
//
//   strata[:CONF]   strata's replay of the trace on the emulated device, with strata's default
//                   flags changed by CONF in STRATA_ALLOC_CONF syntax ("key:value,key:value",
//                   e.g. "expandable_segments:True,thread_cache_mb:0"); the environment is not
//                   read, so that a page says exactly what was replayed
//   recorded        the trace itself: the reserved memory its `seg` lines record
//   trace:FILE      another recording of the same events (e.g. strata-replay
//                   --record_history under other flags): its `seg` lines
//
// Contract
// - Thread safety: no shared state; a replay uses its own emulated device.
// - ParseCompareSide and FlagsFromConf throw std::invalid_argument naming the entry (the caller
//   names the spec) and what is allowed (unknown keys list the supported ones; values breaking a
//   constraint say which).
// - CurveOfSide throws TraceError for a recording that cannot be read, std::invalid_argument
//   for a recording of other events or a side without reserved figures (`recorded` of a trace
//   without `seg` lines), and std::runtime_error when a replay runs out of memory.
#pragma once

#include <string>
#include <string_view>

#include "flags/allocator_flags.h"
#include "tools/memory_compare.h"
#include "tools/trace.h"

namespace strata::tools {

struct CompareSide {
  enum class Kind { kStrata, kRecorded, kRecording };
  Kind kind = Kind::kStrata;
  std::string spec;                                                 // as given
  std::string conf;                                                 // kStrata: "" for the defaults
  flags::AllocatorFlags flags = flags::AllocatorFlags::Defaults();  // kStrata: defaults + conf
  std::string path;                                                 // kRecording
};

// strata's default flags changed by a STRATA_ALLOC_CONF string (PyTorch's expandable_segments
// key included), validated. Does not touch the live flags.
flags::AllocatorFlags FlagsFromConf(std::string_view conf);

CompareSide ParseCompareSide(std::string_view spec);

// The side's reserved (and, for a replay, allocated) bytes after each event of `trace`; the
// label names the side for the page.
MemoryCurve CurveOfSide(const CompareSide& side, const Trace& trace);

}  // namespace strata::tools
