#include "tools/trace_json.h"

#include <sstream>
#include <stdexcept>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace strata::tools::trace_internal {

std::string_view JsonErrorText(const nlohmann::json::exception& e) {
  const std::string_view what = e.what();
  const std::size_t bracket = what.find("] ");
  return bracket == std::string_view::npos ? what : what.substr(bracket + 2);
}

nlohmann::json ParseHeaderObject(std::string_view text, std::size_t column) {
  auto error = [](std::size_t at, std::string_view what) {
    return std::invalid_argument(
        absl::StrCat("malformed header JSON at column ", at, ": ", std::string(what)));
  };
  // nlohmann keeps the last of duplicate keys silently; a header naming a figure twice is
  // ambiguous, so the top-level keys are checked as they are read.
  absl::flat_hash_set<std::string> keys;
  const nlohmann::json::parser_callback_t reject_duplicates =
      [&keys](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (depth == 1 && event == nlohmann::json::parse_event_t::key &&
            !keys.insert(parsed.get<std::string>()).second) {
          throw std::invalid_argument(absl::StrCat("malformed header JSON: duplicate key \"",
                                                   parsed.get<std::string>(), "\""));
        }
        return true;
      };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), reject_duplicates);
  } catch (const nlohmann::json::parse_error& e) {
    // A complete object followed by more text: nlohmann calls that a syntax error in the value;
    // a non-strict parse (operator>>) stops after the object and tells where it ended.
    std::istringstream in{std::string(text)};
    nlohmann::json ignored;
    try {
      in >> ignored >> std::ws;
      if (!in.eof()) {
        throw error(column + static_cast<std::size_t>(in.tellg()),
                    "unexpected text after the object");
      }
    } catch (const nlohmann::json::exception&) {
      // Malformed before its end: report the strict parse's error below.
    }
    // e.what() is "[json.exception.parse_error.N] parse error at line L, column C: <what>";
    // keep <what>, with the column counted in the trace's line. e.byte: 1-based, of the last
    // character read.
    const std::string_view what = e.what();
    const std::size_t colon = what.find(": ", what.find("] "));
    throw error(column + (e.byte == 0 ? 0 : e.byte - 1),
                colon == std::string_view::npos ? what : what.substr(colon + 2));
  } catch (const nlohmann::json::exception& e) {
    // Well-formed text nlohmann cannot hold (a number that overflows a double: out_of_range),
    // with no position: "[json.exception.out_of_range.406] <what>" keeps <what>.
    throw std::invalid_argument(
        absl::StrCat("malformed header JSON: ", std::string(JsonErrorText(e))));
  }
}

}  // namespace strata::tools::trace_internal
