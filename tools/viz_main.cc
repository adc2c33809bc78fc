// strata-viz: writes the memory viewer, one self-contained HTML page, from a recording (or any
// trace) and/or a snapshot, or comparing two recordings of one trace's events
// (tools/viewer_page.h, tools/compare_sides.h, docs/HISTORY.md).
//
//   strata-viz --trace=FILE[.gz] [--snapshot=FILE.json] --out=FILE.html [--title=TEXT]
//              [--max_bands=N]
//   strata-viz --trace=FILE[.gz] --compare=SIDE [--base=SIDE] --out=FILE.html [--title=TEXT]
//     SIDE: strata | strata:CONF | recorded | trace:FILE (the base: strata unless given)
//
// Exit status: 0, 2 for misuse or an unreadable or malformed input, 1 when the page cannot be
// written or a comparison's replay runs out of memory.
#include <iostream>
#include <string>
#include <vector>

#include "tools/viewer_page.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv, argv + argc);
  return strata::tools::RunViewerTool(args, std::cout, std::cerr);
}
