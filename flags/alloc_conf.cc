#include "flags/alloc_conf.h"

#include <stdexcept>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace strata::flags {
namespace {

[[noreturn]] void Fail(absl::string_view text, absl::string_view why) {
  throw std::invalid_argument(absl::StrCat("malformed allocator config '", text, "': ", why,
                                           "; expected key:value[,key:value...]"));
}

bool IsName(absl::string_view key) {
  for (char c : key) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return !key.empty();
}

}  // namespace

AllocConf AllocConf::Parse(std::string_view text_in) {
  absl::string_view text(text_in.data(), text_in.size());
  AllocConf conf;
  if (absl::StripAsciiWhitespace(text).empty()) return conf;

  // Split on commas outside brackets; PyTorch lists are flat, so nesting is an error.
  std::vector<absl::string_view> pieces;
  std::size_t start = 0;
  bool in_brackets = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '[') {
      if (in_brackets) Fail(text, absl::StrCat("nested '[' at offset ", i));
      in_brackets = true;
    } else if (c == ']') {
      if (!in_brackets) Fail(text, absl::StrCat("']' without '[' at offset ", i));
      in_brackets = false;
    } else if (c == ',' && !in_brackets) {
      pieces.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  if (in_brackets) Fail(text, "'[' is never closed");
  pieces.push_back(text.substr(start));

  for (absl::string_view piece : pieces) {
    absl::string_view entry = absl::StripAsciiWhitespace(piece);
    if (entry.empty()) Fail(text, "empty entry (two commas in a row, or a leading/trailing one)");
    std::size_t colon = entry.find(':');
    if (colon == absl::string_view::npos) {
      Fail(text, absl::StrCat("entry '", entry, "' has no ':' between key and value"));
    }
    absl::string_view key = absl::StripAsciiWhitespace(entry.substr(0, colon));
    absl::string_view value = absl::StripAsciiWhitespace(entry.substr(colon + 1));
    if (key.empty()) Fail(text, absl::StrCat("entry '", entry, "' has an empty key"));
    if (!IsName(key)) {
      Fail(text, absl::StrCat("key '", key, "' in entry '", entry,
                              "' is not a name (letters, digits, '_')"));
    }
    if (value.empty()) {
      Fail(text, absl::StrCat("key '", key, "' has an empty value"));
    }
    conf.entries_.push_back(Entry{std::string(key), std::string(value)});
  }
  return conf;
}

std::string AllocConf::ToString() const {
  return absl::StrJoin(entries_, ",", [](std::string* out, const Entry& e) {
    absl::StrAppend(out, e.key, ":", e.value);
  });
}

}  // namespace strata::flags
