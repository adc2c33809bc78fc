#include "platform/place.h"

#include "absl/strings/str_cat.h"

namespace strata::platform {

std::string Place::ToString() const {
  switch (type_) {
    case PlaceType::kCPU:
      return "cpu";
    case PlaceType::kCUDA:
      return absl::StrCat("cuda:", device_);
    case PlaceType::kCUDAPinned:
      return "cuda_pinned";
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& os, const Place& place) { return os << place.ToString(); }

}  // namespace strata::platform
