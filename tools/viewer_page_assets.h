// The fixed parts of the memory viewer's page (tools/viewer_page.h): markup, style and script,
// kept apart from the C++ that computes the embedded data. Constant strings; thread-safe; throw
// nothing.
#pragma once

#include <string_view>

namespace strata::tools {

// "<!DOCTYPE html>...<head>" up to (not including) the <title>.
std::string_view ViewerPageHead();
// The style sheet (goes inside <style>).
std::string_view ViewerPageCss();
// The <body> opening and its elements, up to where the data and script elements follow.
std::string_view ViewerPageBody();
// The script (goes inside <script>): reads the JSON of element #data, draws, sets #status.
std::string_view ViewerPageJs();

}  // namespace strata::tools
