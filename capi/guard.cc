#include "capi/guard.h"

#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "glog/logging.h"

namespace strata::capi {
namespace {

thread_local std::string t_last_error;

}  // namespace

void SetLastError(std::string message, bool log) {
  t_last_error = std::move(message);
  if (log) LOG(ERROR) << t_last_error;
}

const char* LastError() noexcept { return t_last_error.c_str(); }

std::string PointerText(const void* p) { return absl::StrFormat("%p", p); }

}  // namespace strata::capi
