#include "allocation/json_writer.h"

#include <charconv>
#include <cmath>
#include <stdexcept>

#include "absl/strings/str_cat.h"

namespace strata::allocation {

namespace {

// Debian's Abseil has its own string_view type.
absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

void AppendEscaped(std::string* out, std::string_view value) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (u < 0x20) {
          out->append("\\u00");
          out->push_back(kHex[u >> 4]);
          out->push_back(kHex[u & 0xf]);
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

}  // namespace

std::string JsonWriter::Quote(std::string_view value) {
  std::string out;
  out.reserve(value.size() + 2);
  AppendEscaped(&out, value);
  return out;
}

void JsonWriter::NewLine(std::size_t depth) {
  if (indent_ == 0) return;
  out_.push_back('\n');
  out_.append(depth * static_cast<std::size_t>(indent_), ' ');
}

void JsonWriter::BeforeValue(const char* what) {
  if (stack_.empty()) {
    if (has_root_) {
      throw std::logic_error(absl::StrCat("JsonWriter: ", what, " after the complete document"));
    }
    has_root_ = true;
    return;
  }
  Frame& frame = stack_.back();
  if (frame.scope == Scope::kObject) {
    if (!frame.have_key) {
      throw std::logic_error(absl::StrCat("JsonWriter: ", what, " inside an object needs a Key()"));
    }
    frame.have_key = false;  // Key() already wrote the separator and the key
    return;
  }
  if (!frame.empty) out_.push_back(',');
  frame.empty = false;
  NewLine(stack_.size());
}

JsonWriter& JsonWriter::Key(std::string_view key) {
  if (stack_.empty() || stack_.back().scope != Scope::kObject) {
    throw std::logic_error(absl::StrCat("JsonWriter: Key(\"", Av(key), "\") outside an object"));
  }
  Frame& frame = stack_.back();
  if (frame.have_key) {
    throw std::logic_error(
        absl::StrCat("JsonWriter: Key(\"", Av(key), "\") follows a key without value"));
  }
  if (!frame.empty) out_.push_back(',');
  frame.empty = false;
  frame.have_key = true;
  NewLine(stack_.size());
  AppendEscaped(&out_, key);
  out_.append(indent_ == 0 ? ":" : ": ");
  return *this;
}

JsonWriter& JsonWriter::BeginObject() {
  BeforeValue("BeginObject()");
  out_.push_back('{');
  stack_.push_back(Frame{Scope::kObject});
  return *this;
}

JsonWriter& JsonWriter::BeginArray() {
  BeforeValue("BeginArray()");
  out_.push_back('[');
  stack_.push_back(Frame{Scope::kArray});
  return *this;
}

void JsonWriter::End(Scope scope, char close) {
  const char* name = scope == Scope::kObject ? "EndObject()" : "EndArray()";
  if (stack_.empty() || stack_.back().scope != scope) {
    throw std::logic_error(absl::StrCat("JsonWriter: ", name, " does not match the open scope"));
  }
  if (stack_.back().have_key) {
    throw std::logic_error(absl::StrCat("JsonWriter: ", name, " right after a Key()"));
  }
  const bool empty = stack_.back().empty;
  stack_.pop_back();
  if (!empty) NewLine(stack_.size());
  out_.push_back(close);
}

JsonWriter& JsonWriter::EndObject() {
  End(Scope::kObject, '}');
  return *this;
}

JsonWriter& JsonWriter::EndArray() {
  End(Scope::kArray, ']');
  return *this;
}

JsonWriter& JsonWriter::String(std::string_view value) {
  BeforeValue("String()");
  AppendEscaped(&out_, value);
  return *this;
}

JsonWriter& JsonWriter::Int(std::int64_t value) {
  BeforeValue("Int()");
  absl::StrAppend(&out_, value);
  return *this;
}

JsonWriter& JsonWriter::Uint(std::uint64_t value) {
  BeforeValue("Uint()");
  absl::StrAppend(&out_, value);
  return *this;
}

JsonWriter& JsonWriter::Double(double value) {
  BeforeValue("Double()");
  if (!std::isfinite(value)) {
    out_.append("null");
    return *this;
  }
  char buf[32];
  // Shortest round-trip form; std::to_chars never needs more than 24 characters for a double.
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  (void)ec;
  out_.append(buf, end);
  return *this;
}

JsonWriter& JsonWriter::Bool(bool value) {
  BeforeValue("Bool()");
  out_.append(value ? "true" : "false");
  return *this;
}

JsonWriter& JsonWriter::Null() {
  BeforeValue("Null()");
  out_.append("null");
  return *this;
}

const std::string& JsonWriter::str() const {
  if (!complete()) {
    throw std::logic_error(has_root_ ? absl::StrCat("JsonWriter: document incomplete, ",
                                                    stack_.size(), " scope(s) still open")
                                     : std::string("JsonWriter: nothing written"));
  }
  return out_;
}

std::string JsonWriter::Take() {
  str();  // checks completeness
  std::string out = std::move(out_);
  out_.clear();
  has_root_ = false;
  return out;
}

}  // namespace strata::allocation
