// The command line of a strata program that takes flags only (--name=value).
#pragma once

namespace strata::tools {

// Parses the command line with strata::flags::ParseCommandLine (which throws as documented
// there). Returns false, having printed "<program>: unexpected argument ..." to stderr, when it
// holds a positional argument.
bool ParseFlagsOnly(const char* program, int argc, char** argv);

}  // namespace strata::tools
