// The memory viewer page's fixed parts (tools/viewer_page_assets.h): markup and style here,
// the script joined from its parts (tools/viewer_script.h).
#include "tools/viewer_page_assets.h"

#include <string>

#include "tools/viewer_script.h"

namespace strata::tools {

std::string_view ViewerPageHead() {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
}

std::string_view ViewerPageCss() {
  return R"CSS(
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 14px 22px;
       color: #222; background: #fff; }
h1 { font-size: 20px; margin: 0 0 2px; }
h2 { font-size: 15px; margin: 0 0 4px; }
#subtitle { color: #555; font-size: 13px; }
.status { font-size: 11px; color: #999; margin: 2px 0 6px; }
.status.error { color: #b00020; font-size: 14px; font-weight: bold; }
#figures { display: grid; grid-template-columns: repeat(3, max-content auto); gap: 2px 10px;
           font-size: 12.5px; margin: 4px 0 8px; }
#figures dt { color: #666; }
#figures dd { margin: 0 18px 0 0; font-weight: 600; }
section { margin-top: 14px; }
.legend { font-size: 12px; margin: 2px 0 4px; line-height: 20px; }
.legend .item { white-space: nowrap; margin-right: 14px; }
.legend .sw { display: inline-block; width: 12px; height: 12px; vertical-align: -1px;
              margin-right: 4px; border-radius: 2px; }
.legend .ln { display: inline-block; width: 18px; height: 0; vertical-align: 4px;
              margin-right: 4px; border-top: 2px solid; }
.plot { position: relative; }
canvas { display: block; }
.hint { font-size: 11px; color: #888; margin-top: 2px; }
#selection { position: absolute; display: none; pointer-events: none;
             background: rgba(66, 133, 244, 0.15); border: 1px solid rgba(66, 133, 244, 0.7); }
#tooltip { position: fixed; display: none; pointer-events: none; z-index: 10; max-width: 540px;
           background: rgba(255, 255, 255, 0.97); border: 1px solid #999; border-radius: 3px;
           padding: 6px 8px; font-size: 12px; box-shadow: 0 2px 8px rgba(0, 0, 0, 0.2); }
#tooltip pre { margin: 4px 0 0; font-size: 11px; white-space: pre-wrap; max-height: 260px;
               overflow: hidden; background: #f6f6f6; padding: 3px; }
#tooltip .muted { color: #777; }
.selection { position: absolute; display: none; pointer-events: none;
             background: rgba(66, 133, 244, 0.15); border: 1px solid rgba(66, 133, 244, 0.7); }
h3 { font-size: 13px; margin: 10px 0 2px; font-weight: 600; }
#moments { border-collapse: collapse; font-size: 12px; margin-top: 4px; }
#moments th { text-align: left; color: #555; font-weight: 600; border-bottom: 1px solid #ccc;
              padding: 3px 10px 3px 0; }
#moments td { padding: 2px 10px 2px 0; border-bottom: 1px solid #eee; white-space: nowrap; }
#moments td.num { text-align: right; font-variant-numeric: tabular-nums; }
#moments tr.row { cursor: pointer; }
#moments tr.row:hover { background: #f2f6fc; }
.more { color: #b2182b; }
.less { color: #2166ac; }
)CSS";
}

std::string_view ViewerPageBody() {
  return R"HTML(<body>
<h1 id="title"></h1>
<div id="subtitle"></div>
<div id="status" class="status">rendering...</div>
<dl id="figures"></dl>
<section id="timeline-section">
<h2>Active memory timeline</h2>
<div class="legend" id="tl-legend"></div>
<div class="plot" id="tl-plot"><canvas id="tl"></canvas><div id="selection"></div></div>
<div class="hint">Each band is one allocation, from its alloc event to its free event; when one
ends, those above it shift down. Hover for details; drag to zoom, double-click to zoom out.</div>
</section>
<section id="compare-section" style="display: none">
<h2>Reserved memory of two recordings of the same events</h2>
<div class="legend" id="cmp-legend"></div>
<div class="plot" id="cmp-plot"><canvas id="cmp"></canvas><div class="selection" id="cmp-selection"></div></div>
<h3 id="gap-title">Reserved B &minus; A</h3>
<div class="plot" id="gap-plot"><canvas id="gap"></canvas><div class="selection" id="gap-selection"></div></div>
<div class="hint">Both recordings made the same allocations and frees (the x axis); the grey area
is the bytes requested and live. The lower plot is the difference of their reserved bytes (above
zero: B holds more). Numbered lines mark the events where that difference grows most, listed
below. Hover for the figures at an event; drag to zoom, double-click to zoom out; click a row to
zoom to its event.</div>
<h3>Where they diverge</h3>
<div class="hint" id="moments-hint"></div>
<table id="moments"></table>
</section>
<section id="segments-section">
<h2>Segments</h2>
<div class="legend" id="seg-legend"></div>
<div class="plot" id="seg-plot"><canvas id="seg"></canvas></div>
<div class="hint" id="seg-hint"></div>
</section>
<div id="tooltip"></div>
)HTML";
}

std::string_view ViewerPageJs() {
  // Joined once; the parts live in their own files, one drawer each.
  static const std::string js = [] {
    std::string s;
    for (std::string_view part :
         {ViewerScriptPrelude(), ViewerScriptTimeline(), ViewerScriptSegments(),
          ViewerScriptComparison(), ViewerScriptDriver()}) {
      s.append(part);
    }
    return s;
  }();
  return js;
}

}  // namespace strata::tools
