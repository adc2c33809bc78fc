// JsonWriter: builds one JSON document (objects, arrays, strings, numbers, booleans, null) into
// a string. Used by the tools' --json output and by the library's memory summaries, so that
// every JSON strata prints is escaped and shaped the same way.
//
// Contract
// - Thread safety: none; one writer per thread (it is a small value type).
// - Strings are escaped per RFC 8259: '"', '\\' and control characters (< 0x20, as \n, \t, ...
//   or \u00XX) are escaped; other bytes (UTF-8) pass through unchanged.
// - Doubles are written in the shortest form that reads back exactly; NaN and infinities have
//   no JSON form and are written as null.
// - Misuse throws std::logic_error: a value inside an object without a Key(), a Key() outside
//   an object or twice in a row, End* not matching Begin*, a second top-level value, or str()
//   / Take() before the document is complete. Writing never fails otherwise.
// - indent = 0 (default) writes compactly on one line; indent > 0 pretty-prints with that many
//   spaces per level.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace strata::allocation {

class JsonWriter {
 public:
  explicit JsonWriter(int indent = 0) : indent_(indent < 0 ? 0 : indent) {}

  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  // The key of the next value; only inside an object.
  JsonWriter& Key(std::string_view key);

  JsonWriter& String(std::string_view value);
  JsonWriter& Int(std::int64_t value);
  JsonWriter& Uint(std::uint64_t value);
  JsonWriter& Double(double value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();

  // Key + value in one call. The overloads cover every arithmetic type without ambiguity
  // (bool stays a boolean, char* stays a string).
  JsonWriter& Field(std::string_view key, std::string_view value) { return Key(key).String(value); }
  JsonWriter& Field(std::string_view key, const char* value) { return Key(key).String(value); }
  JsonWriter& Field(std::string_view key, bool value) { return Key(key).Bool(value); }
  template <typename T,
            typename = std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, bool>>>
  JsonWriter& Field(std::string_view key, T value) {
    Key(key);
    if constexpr (std::is_floating_point_v<T>) {
      return Double(static_cast<double>(value));
    } else if constexpr (std::is_signed_v<T>) {
      return Int(static_cast<std::int64_t>(value));
    } else {
      return Uint(static_cast<std::uint64_t>(value));
    }
  }

  // True once exactly one complete top-level value has been written.
  bool complete() const { return stack_.empty() && has_root_; }
  // The document; throws std::logic_error if it is not complete.
  const std::string& str() const;
  std::string Take();

  // The escaped form of `value`, quotes included.
  static std::string Quote(std::string_view value);

 private:
  enum class Scope : std::uint8_t { kObject, kArray };
  struct Frame {
    Scope scope;
    bool empty = true;      // no member/element written yet
    bool have_key = false;  // objects: a Key() awaits its value
  };

  // Separators and checks before any value (scalar or container).
  void BeforeValue(const char* what);
  void NewLine(std::size_t depth);
  void End(Scope scope, char close);

  int indent_;
  bool has_root_ = false;
  std::vector<Frame> stack_;
  std::string out_;
};

}  // namespace strata::allocation
