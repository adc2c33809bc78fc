// AllocConf: syntax of the STRATA_ALLOC_CONF string (PyTorch's PYTORCH_CUDA_ALLOC_CONF syntax).
//
//   "key:value,key:value"   e.g. "max_split_size_mb:128,roundup_power2_divisions:[256:1,>:8]"
//
// Entries are separated by commas outside brackets; a key is a name ([A-Za-z0-9_]+), the value is
// everything after the key's first ':' (so a bracketed list keeps its own ':' and ','). Whitespace
// around keys, values and entries is ignored; an empty or all-blank string has no entries. A
// repeated key is kept twice (applying in order, the later wins, as in PyTorch).
//
// This class knows only the syntax; which keys exist and what values mean is for
// flag_sources.h (ApplyAllocConf).
//
// Contract: a value type, thread-safe as any value. Parse throws std::invalid_argument for a
// malformed string (empty entry, entry without ':', empty or non-name key, empty value,
// unbalanced or nested brackets), naming the offending entry and the whole string.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace strata::flags {

class AllocConf {
 public:
  struct Entry {
    std::string key;
    std::string value;
    friend bool operator==(const Entry&, const Entry&) = default;
  };

  static AllocConf Parse(std::string_view text);

  const std::vector<Entry>& entries() const { return entries_; }
  // "key:value,key:value", which Parse maps back to the same entries.
  std::string ToString() const;

 private:
  std::vector<Entry> entries_;
};

}  // namespace strata::flags
