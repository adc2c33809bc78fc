#include "tools/flag_command_line.h"

#include <cstdio>
#include <vector>

#include "flags/flag_sources.h"

namespace strata::tools {

bool ParseFlagsOnly(const char* program, int argc, char** argv) {
  const std::vector<char*> positional = flags::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr, "%s: unexpected argument '%s' (flags are --name=value)\n", program,
                 positional[1]);
    return false;
  }
  return true;
}

}  // namespace strata::tools
