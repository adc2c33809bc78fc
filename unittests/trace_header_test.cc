// The trace header's JSON errors: where (the column in the line) and what, beyond the cases of
// trace_test.cc; and keys that only look duplicated.
#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <typeinfo>

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

// Whatever nlohmann throws while reading the header (parse_error, out_of_range for a number no
// double can hold, ...) reaches the caller as a TraceError naming the file and the line, never as
// nlohmann's own exception.
TEST(TraceHeaderTest, EveryJsonErrorIsATraceErrorNamingFileAndLine) {
  const char* const headers[] = {
      "# {\"n\": 1e999999}\n",                           // out_of_range (406): overflow
      "# {\"n\": -1e999999}\n",                          // the same, negative
      "# {\"seconds\": 1e400}\n",                        // a known key
      "# {\"extra\": {\"deep\": [1, 2e308, 3e999]}}\n",  // below the top level
      "# {\"events\": 1e999999, \"events\": 0}\n",       // overflow before a duplicate key
      "# {\"n\": 1e}\n",                                 // parse_error: a cut exponent
      "# {\"s\": \"\xff\"}\n",                           // parse_error: invalid UTF-8
      "# {\"n\": [1e999999\n",                           // overflow, then the line ends
      "# {\"a\": 1} 1e999999\n",                         // overflow in text after the object
  };
  for (const char* header : headers) {
    const std::string text = std::string(header) + "a 1 64 0\n";
    try {
      Trace::Parse(text, "h.trace");
      ADD_FAILURE() << "no error for " << header;
    } catch (const TraceError& e) {
      EXPECT_EQ(e.file(), "h.trace") << header;
      EXPECT_EQ(e.line(), 1u) << header;
      EXPECT_EQ(std::string(e.what()).rfind("h.trace:1: ", 0), 0u) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << header << " escaped as " << typeid(e).name() << ": " << e.what();
    }
  }
  // The overflow's message says what nlohmann saw.
  EXPECT_NE(ParseError("# {\"n\": 1e999999}\n").find("1e999999"), std::string::npos);
}

}  // namespace
}  // namespace strata::tools
