#include "flags/flags.h"

#include <algorithm>

#include "absl/flags/flag.h"
#include "absl/strings/str_join.h"

// Every flag of flag_list.h. Expanded here, so Abseil (and `--helpfull`) names this file as the
// flags' home.
#define STRATA_DEFINE_ALLOCATOR_FLAG(type, name, default_value, help) \
  ABSL_FLAG(type, name, default_value, help);
STRATA_ALLOCATOR_FLAGS(STRATA_DEFINE_ALLOCATOR_FLAG)
#undef STRATA_DEFINE_ALLOCATOR_FLAG

namespace strata::flags {

bool IsStrataFlag(std::string_view name) {
  return std::find(kFlagNames.begin(), kFlagNames.end(), name) != kFlagNames.end();
}

std::string SupportedFlagList() {
  return absl::StrJoin(kFlagNames, ", ",
                       [](std::string* out, std::string_view name) { out->append(name); });
}

}  // namespace strata::flags
