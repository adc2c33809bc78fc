// The trace header's JSON: parsing the one object a trace's first line carries, and the text of
// nlohmann's errors as a user reads it. Apart from trace.cc because it is the one part of the
// parser that speaks JSON (strict parsing, duplicate keys, error positions in the trace's line).
#pragma once

#include <cstddef>
#include <string_view>

#include "nlohmann/json.hpp"

namespace strata::tools::trace_internal {

// A JSON exception's message without its "[json.exception.<kind>.<N>] " prefix.
std::string_view JsonErrorText(const nlohmann::json::exception& e);

// Parses the header's JSON object. Throws std::invalid_argument with the message for the user
// ("malformed header JSON ..."); `column` is where `text` starts in its line (1-based), so the
// message counts columns from the line's '#'.
nlohmann::json ParseHeaderObject(std::string_view text, std::size_t column);

}  // namespace strata::tools::trace_internal
