#include "allocation/json_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

namespace strata::allocation {
namespace {

TEST(JsonWriterTest, WritesAFlatObject) {
  JsonWriter w;
  w.BeginObject()
      .Field("name", "best_fit")
      .Field("bytes", std::uint64_t{18446744073709551615u})
      .Field("delta", std::int64_t{-5})
      .Field("ratio", 1.25)
      .Field("ok", true)
      .Field("count", 3)
      .Key("none")
      .Null()
      .EndObject();
  EXPECT_EQ(w.str(),
            "{\"name\":\"best_fit\",\"bytes\":18446744073709551615,\"delta\":-5,\"ratio\":1.25,"
            "\"ok\":true,\"count\":3,\"none\":null}");
}

TEST(JsonWriterTest, EscapesStrings) {
  EXPECT_EQ(JsonWriter::Quote("a\"b\\c/d"), "\"a\\\"b\\\\c/d\"");
  EXPECT_EQ(JsonWriter::Quote("\n\r\t\b\f"), "\"\\n\\r\\t\\b\\f\"");
  EXPECT_EQ(JsonWriter::Quote(std::string("\x01\x1f\0", 3)), "\"\\u0001\\u001f\\u0000\"");
  EXPECT_EQ(JsonWriter::Quote("caf\xc3\xa9"), "\"caf\xc3\xa9\"");  // UTF-8 passes through
  JsonWriter w;
  w.BeginObject().Field("k\"ey", "v\nal").EndObject();
  EXPECT_EQ(w.str(), "{\"k\\\"ey\":\"v\\nal\"}");
}

TEST(JsonWriterTest, NestsObjectsAndArrays) {
  JsonWriter w;
  w.BeginObject().Key("pools").BeginArray();
  for (int i = 0; i < 2; ++i) w.BeginObject().Field("id", i).EndObject();
  w.BeginArray().EndArray().EndArray().Key("empty").BeginObject().EndObject().EndObject();
  EXPECT_EQ(w.str(), "{\"pools\":[{\"id\":0},{\"id\":1},[]],\"empty\":{}}");
}

TEST(JsonWriterTest, PrettyPrintsWithIndent) {
  JsonWriter w(2);
  w.BeginObject().Field("a", 1).Key("b").BeginArray().Int(2).Int(3).EndArray().Key("c");
  w.BeginObject().EndObject().EndObject();
  EXPECT_EQ(w.str(), "{\n  \"a\": 1,\n  \"b\": [\n    2,\n    3\n  ],\n  \"c\": {}\n}");
}

TEST(JsonWriterTest, DoublesRoundTripAndNonFiniteBecomesNull) {
  JsonWriter w;
  w.BeginArray()
      .Double(0.1)
      .Double(1e300)
      .Double(-2.0)
      .Double(std::numeric_limits<double>::quiet_NaN())
      .Double(std::numeric_limits<double>::infinity())
      .EndArray();
  EXPECT_EQ(w.str(), "[0.1,1e+300,-2,null,null]");
}

TEST(JsonWriterTest, ScalarDocumentAndTake) {
  JsonWriter w;
  w.String("x");
  EXPECT_TRUE(w.complete());
  EXPECT_EQ(w.Take(), "\"x\"");
  EXPECT_FALSE(w.complete());
  w.Int(-1);
  EXPECT_EQ(w.str(), "-1");
}

TEST(JsonWriterTest, MisuseThrowsLogicError) {
  {
    JsonWriter w;
    w.BeginObject();
    EXPECT_THROW(w.Int(1), std::logic_error);  // value without key
    EXPECT_THROW(w.str(), std::logic_error);   // incomplete
    EXPECT_THROW(w.EndArray(), std::logic_error);
    w.Key("a");
    EXPECT_THROW(w.Key("b"), std::logic_error);
    EXPECT_THROW(w.EndObject(), std::logic_error);  // key without value
  }
  {
    JsonWriter w;
    w.BeginArray();
    EXPECT_THROW(w.Key("a"), std::logic_error);
    w.EndArray();
    EXPECT_THROW(w.Int(2), std::logic_error);  // second top-level value
    EXPECT_THROW(w.EndArray(), std::logic_error);
  }
  EXPECT_THROW(JsonWriter().str(), std::logic_error);
}

}  // namespace
}  // namespace strata::allocation
