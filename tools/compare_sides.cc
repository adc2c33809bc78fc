#include "tools/compare_sides.h"

#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "absl/flags/marshalling.h"
#include "absl/strings/str_cat.h"
#include "flags/alloc_conf.h"
#include "flags/allocator_strategy.h"
#include "flags/flag_sources.h"
#include "flags/flags.h"
#include "platform/emulated_runtime.h"
#include "tools/replay.h"

namespace strata::tools {

namespace {

// Abseil's own message for a bad built-in value only says it is illegal.
template <typename T>
std::string Expected() {
  if constexpr (std::is_same_v<T, bool>) return "; expected true or false";
  if constexpr (std::is_same_v<T, std::uint64_t>) return "; expected a non-negative integer";
  if constexpr (std::is_same_v<T, std::int64_t>) return "; expected an integer";
  if constexpr (std::is_same_v<T, double>) return "; expected a decimal number";
  return "";
}

template <typename T>
void ParseInto(const flags::AllocConf::Entry& entry, T* field) {
  T value = *field;  // a failed parse may leave its output half written
  std::string error;
  if (!absl::ParseFlag(entry.value, &value, &error)) {
    throw std::invalid_argument(absl::StrCat("entry '", entry.key, ":", entry.value,
                                             "': ", error.empty() ? "invalid value" : error,
                                             Expected<T>()));
  }
  *field = std::move(value);
}

// A replay's emulated device: as large as strata-replay's default, so that only a memory limit
// in the flags makes a replay run out of memory.
constexpr std::size_t kEmulatedCapacity = std::size_t{144} << 30;

std::string BaseName(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

flags::AllocatorFlags FlagsFromConf(std::string_view conf) {
  if (conf.size() > flags::kMaxAllocConfBytes) {
    throw std::invalid_argument(absl::StrCat("the config is ", conf.size(), " bytes long; at most ",
                                             flags::kMaxAllocConfBytes, " are accepted"));
  }
  flags::AllocatorFlags f = flags::AllocatorFlags::Defaults();
  const flags::AllocConf parsed = flags::AllocConf::Parse(conf);
  for (flags::AllocConf::Entry entry : parsed.entries()) {
    if (entry.key == "expandable_segments") entry.key = "use_virtual_memory_auto_growth";
    bool known = false;
#define STRATA_PARSE_FLAG_ENTRY(type, name, default_value, help) \
  if (entry.key == #name) {                                      \
    known = true;                                                \
    ParseInto(entry, &f.name);                                   \
  }
    STRATA_ALLOCATOR_FLAGS(STRATA_PARSE_FLAG_ENTRY)
#undef STRATA_PARSE_FLAG_ENTRY
    if (!known) {
      throw std::invalid_argument(absl::StrCat(
          "unknown key '", entry.key, "' (in entry '", entry.key, ":", entry.value,
          "'); supported keys: ", flags::SupportedFlagList(), ", expandable_segments"));
    }
  }
  f.Validate();
  return f;
}

CompareSide ParseCompareSide(std::string_view spec) {
  CompareSide side;
  side.spec = std::string(spec);
  if (spec == "strata") return side;
  if (spec.starts_with("strata:")) {
    side.conf = std::string(spec.substr(7));
    side.flags = FlagsFromConf(side.conf);
    return side;
  }
  if (spec == "recorded") {
    side.kind = CompareSide::Kind::kRecorded;
    return side;
  }
  if (spec.starts_with("trace:") && spec.size() > 6) {
    side.kind = CompareSide::Kind::kRecording;
    side.path = std::string(spec.substr(6));
    return side;
  }
  throw std::invalid_argument(
      "expected strata, strata:CONF (e.g. strata:expandable_segments:True), recorded or "
      "trace:FILE");
}

MemoryCurve CurveOfSide(const CompareSide& side, const Trace& trace) {
  MemoryCurve curve;
  switch (side.kind) {
    case CompareSide::Kind::kStrata: {
      curve.label = side.conf.empty() ? "strata (default flags)" : "strata " + side.conf;
      platform::EmulatedRuntime runtime(platform::EmulatedRuntime::Options{
          .device_count = 1, .capacity_bytes = kEmulatedCapacity});
      Replayer replayer(&runtime, "emulated", side.flags);
      std::vector<ViewerSample> series;
      Replayer::Options options;
      options.timed_pass = false;
      options.series = &series;
      const ReplayResult r = replayer.Run(trace, options);
      if (!r.oom_message.empty()) {
        throw std::runtime_error(absl::StrCat("the replay ran out of memory at event ", r.oom_event,
                                              " of ", trace.name(), ": ", r.oom_message));
      }
      curve.reserved.reserve(series.size());
      curve.allocated.reserve(series.size());
      for (const ViewerSample& s : series) {
        curve.reserved.push_back(s.reserved);
        curve.allocated.push_back(s.allocated);
      }
      return curve;
    }
    case CompareSide::Kind::kRecorded:
      curve.label = BaseName(trace.name()) + " (recorded)";
      curve.reserved = ReservedFromSegLines(trace);
      if (curve.reserved.empty() && trace.num_events() != 0) {
        throw std::invalid_argument(absl::StrCat(
            trace.name(),
            " has no seg lines, so no reserved memory over time to compare (a trace converted "
            "from PyTorch keeps only PyTorch's peak, drawn as a reference line): compare strata "
            "replays of it, e.g. --base=strata --compare=strata:expandable_segments:False"));
      }
      return curve;
    case CompareSide::Kind::kRecording: {
      const Trace other = Trace::Load(side.path);
      CheckSameEvents(trace, other);
      curve.label = BaseName(side.path);
      curve.reserved = ReservedFromSegLines(other);
      if (curve.reserved.empty() && other.num_events() != 0) {
        throw std::invalid_argument(absl::StrCat(
            side.path, " has no seg lines, so no reserved memory over time to compare"));
      }
      return curve;
    }
  }
  return curve;
}

}  // namespace strata::tools
