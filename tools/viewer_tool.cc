// strata-viz's command line (RunViewerTool, tools/viewer_page.h): a page of a trace and/or a
// snapshot, or a comparison of two sides of a trace.
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "tools/compare_sides.h"
#include "tools/memory_compare.h"
#include "tools/trace.h"
#include "tools/viewer_page.h"

namespace strata::tools {
namespace {

using Json = nlohmann::json;

}  // namespace

int RunViewerTool(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  constexpr const char* kUsage =
      "usage: strata-viz --trace=FILE[.gz] and/or --snapshot=FILE.json --out=FILE.html "
      "[--title=TEXT] [--max_bands=N]\n"
      "       strata-viz --trace=FILE[.gz] --compare=SIDE [--base=SIDE] --out=FILE.html "
      "[--title=TEXT]\n"
      "  SIDE: strata (a replay with the default flags, the base's default), strata:CONF (with "
      "STRATA_ALLOC_CONF entries, e.g. strata:expandable_segments:True), recorded (the trace's "
      "own seg lines) or trace:FILE (another recording of the same events)\n";
  std::string trace_path, snapshot_path, out_path, base_spec, compare_spec;
  bool has_base = false, has_compare = false;
  ViewerOptions options;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value_of = [&](std::string_view flag, std::string* value) {
      if (!arg.starts_with(flag)) return false;
      *value = arg.substr(flag.size());
      return true;
    };
    std::string max_bands;
    if (arg == "--help" || arg == "-h") {
      out << kUsage;
      return 0;
    }
    if (value_of("--trace=", &trace_path) || value_of("--snapshot=", &snapshot_path) ||
        value_of("--out=", &out_path) || value_of("--title=", &options.title)) {
      continue;
    }
    if (value_of("--base=", &base_spec)) {
      has_base = true;
      continue;
    }
    if (value_of("--compare=", &compare_spec)) {
      has_compare = true;
      continue;
    }
    if (value_of("--max_bands=", &max_bands)) {
      // SimpleAtoi refuses a sign on an unsigned type (std::stoul would wrap "-1").
      if (!absl::SimpleAtoi(max_bands, &options.max_bands) || options.max_bands == 0) {
        err << "strata-viz: --max_bands=" << max_bands << " is not a positive number\n";
        return 2;
      }
      continue;
    }
    err << "strata-viz: unexpected argument '" << arg << "'\n" << kUsage;
    return 2;
  }
  if (trace_path.empty() && snapshot_path.empty()) {
    err << "strata-viz: give --trace=FILE and/or --snapshot=FILE\n" << kUsage;
    return 2;
  }
  if (out_path.empty()) {
    err << "strata-viz: --out=FILE.html is required\n" << kUsage;
    return 2;
  }
  // A comparison: both sides are checked before anything is read or replayed.
  const std::pair<const char*, std::string> specs[2] = {
      {"--base=", has_base ? base_spec : std::string("strata")}, {"--compare=", compare_spec}};
  std::optional<CompareSide> sides[2];
  if (has_base && !has_compare) {
    err << "strata-viz: --base=SIDE needs --compare=SIDE\n" << kUsage;
    return 2;
  }
  if (has_compare) {
    if (trace_path.empty()) {
      err << "strata-viz: --compare needs --trace=FILE (the events both sides are measured on)\n"
          << kUsage;
      return 2;
    }
    if (!snapshot_path.empty()) {
      err << "strata-viz: --snapshot draws one allocator's segments; it cannot be combined "
             "with --compare\n";
      return 2;
    }
    for (int s = 0; s < 2; ++s) {
      try {
        sides[s] = ParseCompareSide(specs[s].second);
      } catch (const std::invalid_argument& e) {
        err << "strata-viz: " << specs[s].first << specs[s].second << ": " << e.what() << "\n";
        return 2;
      }
    }
  }
  std::optional<Trace> trace;
  std::optional<Json> snapshot;
  try {
    if (!trace_path.empty()) trace = Trace::Load(trace_path);
    if (!snapshot_path.empty()) snapshot = LoadSnapshot(snapshot_path);
  } catch (const std::exception& e) {  // TraceError and LoadSnapshot's errors name the file
    err << "strata-viz: " << e.what() << "\n";
    return 2;
  }
  if (has_compare) {
    ViewerComparison comparison;
    MemoryCurve* curves[2] = {&comparison.a, &comparison.b};
    for (int s = 0; s < 2; ++s) {
      try {
        *curves[s] = CurveOfSide(*sides[s], *trace);
      } catch (const TraceError& e) {  // names the file (and line)
        err << "strata-viz: " << e.what() << "\n";
        return 2;
      } catch (const std::invalid_argument& e) {
        err << "strata-viz: " << specs[s].first << specs[s].second << ": " << e.what() << "\n";
        return 2;
      } catch (const std::exception& e) {  // a replay out of memory
        err << "strata-viz: " << specs[s].first << specs[s].second << ": " << e.what() << "\n";
        return 1;
      }
    }
    options.comparison = std::move(comparison);
  }
  try {
    WriteViewerPage(out_path, trace ? &*trace : nullptr, snapshot ? &*snapshot : nullptr, options);
  } catch (const std::exception& e) {
    err << "strata-viz: " << e.what() << "\n";
    return 1;
  }
  out << "strata-viz: wrote " << out_path << "\n";
  return 0;
}

}  // namespace strata::tools
