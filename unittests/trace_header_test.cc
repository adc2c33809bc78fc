// The trace header's JSON errors: where (the column in the line) and what, beyond the cases of
// trace_test.cc; and keys that only look duplicated.
#include <gtest/gtest.h>

#include <string>

#include "tools/trace.h"

namespace strata::tools {
namespace {

std::string ParseError(const std::string& text) {
  try {
    Trace::Parse(text, "h.trace");
  } catch (const TraceError& e) {
    EXPECT_EQ(e.line(), 1u);
    return e.what();
  }
  ADD_FAILURE() << "no error for " << text;
  return "";
}

TEST(TraceHeaderTest, SyntaxErrorsNameTheColumnInTheLine) {
  // Columns count from the '#': the '}' standing for a missing value is the 45th character.
  EXPECT_EQ(ParseError("# {\"workload\": \"w\", \"torch_peak_requested\": }\n")
                .rfind("h.trace:1: malformed header JSON at column 45: ", 0),
            0u);
  // The line ends (column 19) before the object does.
  EXPECT_NE(ParseError("# {\"workload\": \"w\"\n").find("at column 19: "), std::string::npos);
  // Text after the object: its first character, after the blanks.
  EXPECT_NE(ParseError("#  {\"workload\": \"w\"}   x\n")
                .find("at column 24: unexpected text after the object"),
            std::string::npos);
  EXPECT_NE(ParseError("# {\"w\": \"\\x\"}\n").find("at column 11: "), std::string::npos);
}

TEST(TraceHeaderTest, DuplicateKeysOnlyMatterAtTheTopLevel) {
  const Trace t = Trace::Parse(
      "# {\"extra\": {\"gpu\": 1, \"gpu\": 2}, \"list\": [{\"a\": 1}, {\"a\": 2}], \"gpu\": "
      "\"H\"}\n",
      "h.trace");
  EXPECT_EQ(t.header().gpu, "H");
  EXPECT_NE(ParseError("# {\"events\": 0, \"gpu\": \"a\", \"events\": 0}\n")
                .find("malformed header JSON: duplicate key \"events\""),
            std::string::npos);
}

TEST(TraceHeaderTest, NumbersMustFitTheirKeys) {
  EXPECT_NE(ParseError("# {\"torch_peak_reserved\": -3}\n")
                .find("\"torch_peak_reserved\" must be a non-negative integer, got -3"),
            std::string::npos);
  // Beyond 64 bits: no silent wrap-around.
  EXPECT_NE(ParseError("# {\"allocs\": 18446744073709551616}\n")
                .find("\"allocs\" must be a non-negative integer"),
            std::string::npos);
  EXPECT_NE(ParseError("# {\"seconds\": \"1\"}\n").find("\"seconds\" must be a number"),
            std::string::npos);
  const Trace t =
      Trace::Parse("# {\"torch_peak_reserved\": 18446744073709551615, \"seconds\": 2e-3}\n", "h");
  EXPECT_EQ(t.header().torch_peak_reserved, 18446744073709551615u);
  EXPECT_DOUBLE_EQ(t.header().seconds, 0.002);
}

}  // namespace
}  // namespace strata::tools
