#include "allocation/bad_alloc.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "allocation/byte_format.h"

namespace strata::allocation {

BadAlloc::BadAlloc(const platform::Place& place, std::uint64_t requested_bytes)
    : place_(place), requested_(requested_bytes) {
  Rebuild();
}

BadAlloc& BadAlloc::set_device_memory(std::uint64_t total_bytes, std::uint64_t free_bytes) {
  total_ = total_bytes;
  free_ = free_bytes;
  Rebuild();
  return *this;
}

BadAlloc& BadAlloc::set_pool_usage(std::uint64_t allocated_bytes, std::uint64_t reserved_bytes) {
  allocated_ = allocated_bytes;
  reserved_ = reserved_bytes;
  Rebuild();
  return *this;
}

BadAlloc& BadAlloc::set_memory_limit(std::uint64_t limit_bytes, std::uint64_t reserved_bytes,
                                     std::string_view limit_name) {
  limit_ = limit_bytes;
  limit_name_ = std::string(limit_name);
  if (!reserved_) reserved_ = reserved_bytes;
  Rebuild();
  return *this;
}

BadAlloc& BadAlloc::set_hint(std::string hint) {
  hint_ = std::move(hint);
  Rebuild();
  return *this;
}

BadAlloc& BadAlloc::set_detail(std::string detail) {
  detail_ = std::move(detail);
  Rebuild();
  return *this;
}

void BadAlloc::Rebuild() {
  const std::string where = place_.ToString();
  std::string m = absl::StrCat("strata: out of memory on ", where, ". Tried to allocate ",
                               FormatBytes(requested_), ".");
  if (limit_) {
    absl::StrAppend(&m, " The process memory limit for ", where, " is ", FormatBytes(*limit_), " (",
                    limit_name_, ") and ", FormatBytes(reserved_.value_or(0)),
                    " of it is reserved; the request would exceed the limit.");
  }
  if (total_ && free_) {
    absl::StrAppend(&m, " ", where, " has a total capacity of ", FormatBytes(*total_), " of which ",
                    FormatBytes(*free_), " is free.");
  }
  if (allocated_ && reserved_) {
    const std::uint64_t unallocated = *reserved_ > *allocated_ ? *reserved_ - *allocated_ : 0;
    absl::StrAppend(&m, " Of the allocated memory ", FormatBytes(*allocated_),
                    " is allocated by strata, and ", FormatBytes(unallocated),
                    " is reserved by strata but unallocated.");
  }
  if (!hint_.empty()) absl::StrAppend(&m, " ", hint_);
  if (!detail_.empty()) absl::StrAppend(&m, " (", detail_, ")");
  message_ = std::move(m);
}

}  // namespace strata::allocation
