// The viewer page's script (tools/viewer_page_assets.h), in the parts that ViewerPageJs joins in
// this order into one function expression: the prelude (reads the data, error reporting, shared
// formatting and drawing helpers), the drawers of the timeline, the segment map and the
// comparison, and the driver (calls the drawers the data asks for, sets #status). Each part
// relies on the names the parts before it define. Constant strings; thread-safe; throw nothing.
#pragma once

#include <string_view>

namespace strata::tools {

std::string_view ViewerScriptPrelude();
std::string_view ViewerScriptTimeline();
std::string_view ViewerScriptSegments();
std::string_view ViewerScriptComparison();
std::string_view ViewerScriptDriver();

}  // namespace strata::tools
