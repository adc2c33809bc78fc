#include "capi/device_call.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"

namespace strata::capi {

int CopyOut(const std::string& text, char* buf, std::size_t len) {
  if (buf == nullptr && len != 0) throw std::invalid_argument("buf is NULL but len is not 0");
  if (text.size() > static_cast<std::size_t>(INT_MAX)) {
    throw std::invalid_argument(absl::StrCat("the text (", text.size(), " bytes) exceeds INT_MAX"));
  }
  if (len > 0) {
    const std::size_t n = std::min(len - 1, text.size());
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return static_cast<int>(text.size());
}

}  // namespace strata::capi
