// The memory viewer's page (tools/viewer_page.h): the embedded data put together from its parts
// (tools/viewer_data.h), the HTML around it, and writing the page.
#include "tools/viewer_page.h"

#include <stdexcept>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "history/trace_file.h"
#include "tools/viewer_data.h"
#include "tools/viewer_page_assets.h"

namespace strata::tools {
namespace {

using viewer::Json;

// The JSON as it sits in a <script> element: '<' only occurs inside strings, where \u003c is
// the same character, so "</script>" or "<!--" in a context text cannot end the element.
std::string ScriptSafeJson(const Json& data) {
  const std::string dumped = data.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::string out;
  out.reserve(dumped.size());
  for (char c : dumped) {
    if (c == '<') {
      out.append("\\u003c");
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string HtmlEscape(std::string_view s) {
  return absl::StrReplaceAll(absl::string_view(s.data(), s.size()),
                             {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}});
}

}  // namespace

Json ViewerData(const Trace* trace, const Json* snapshot, const ViewerOptions& options) {
  viewer::Figures figures;
  Json timeline = nullptr, segments = nullptr, comparison = nullptr;
  if (options.comparison && trace == nullptr) {
    throw std::invalid_argument("viewer comparison: the recordings' events need a trace");
  }
  if (options.comparison) {
    comparison = viewer::ComparisonData(*trace, *options.comparison, options, &figures);
  } else if (trace != nullptr) {
    timeline = viewer::TimelineData(*trace, options, &figures);
  } else if (!options.series.empty()) {
    timeline = viewer::SeriesOnlyTimeline(options);
  }
  if (snapshot != nullptr) segments = viewer::SegmentsData(*snapshot, &figures);
  for (const auto& f : options.figures) figures.push_back(f);
  std::string title = options.title;
  if (title.empty() && options.comparison) {
    title = absl::StrCat(trace->workload(), ": ", options.comparison->a.label, " vs ",
                         options.comparison->b.label);
  }
  if (title.empty() && trace != nullptr) title = trace->workload();
  if (title.empty() && snapshot != nullptr) title = snapshot->value("place", std::string());
  if (title.empty()) title = "memory";
  Json figure_list = Json::array();
  for (auto& [label, value] : figures) figure_list.push_back(Json::array({label, value}));
  return Json{{"title", title},
              {"subtitle", options.subtitle},
              {"figures", std::move(figure_list)},
              {"timeline", std::move(timeline)},
              {"segments", std::move(segments)},
              {"comparison", std::move(comparison)}};
}

std::string RenderViewerPage(const Trace* trace, const Json* snapshot,
                             const ViewerOptions& options) {
  const Json data = ViewerData(trace, snapshot, options);
  std::string page;
  // std::string_view pieces: Debian's Abseil has its own string_view, so no StrAppend here.
  const std::string json = ScriptSafeJson(data);
  const std::string title = HtmlEscape(data["title"].get<std::string>());
  for (std::string_view piece :
       {ViewerPageHead(), std::string_view("<title>"), std::string_view(title),
        std::string_view(" - strata memory viewer</title>\n<style>"), ViewerPageCss(),
        std::string_view("</style>\n</head>\n"), ViewerPageBody(),
        std::string_view("<script type=\"application/json\" id=\"data\">"), std::string_view(json),
        std::string_view("</script>\n<script>"), ViewerPageJs(),
        std::string_view("</script>\n</body>\n</html>\n")}) {
    page.append(piece);
  }
  return page;
}

void WriteViewerPage(const std::string& path, const Trace* trace, const Json* snapshot,
                     const ViewerOptions& options) {
  history::TraceFile(path).Commit(RenderViewerPage(trace, snapshot, options));
}

}  // namespace strata::tools
