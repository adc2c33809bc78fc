// BadAlloc: out of memory, with the numbers a user needs to act on it.
//
// Modelled on PyTorch's OOM message: the place, the requested size, the device's total and free
// memory, what this process has allocated and what it holds reserved but unallocated, the
// memory limit when one caused it, and a hint naming the flag to try. Layers that know more
// (a pool knows allocated/reserved bytes) fill in fields on the way up and rethrow; what()
// always reflects the fields set so far.
#pragma once

#include <cstdint>
#include <new>
#include <optional>
#include <string>
#include <string_view>

#include "platform/place.h"

namespace strata::allocation {

class BadAlloc : public std::bad_alloc {
 public:
  BadAlloc(const platform::Place& place, std::uint64_t requested_bytes);

  const char* what() const noexcept override { return message_.c_str(); }

  const platform::Place& place() const { return place_; }
  std::uint64_t requested_bytes() const { return requested_; }

  BadAlloc& set_device_memory(std::uint64_t total_bytes, std::uint64_t free_bytes);
  BadAlloc& set_pool_usage(std::uint64_t allocated_bytes, std::uint64_t reserved_bytes);
  // `limit_name`: what sets the limit (a flag), named in the message.
  BadAlloc& set_memory_limit(std::uint64_t limit_bytes, std::uint64_t reserved_bytes,
                             std::string_view limit_name =
                                 "gpu_memory_limit_mb, or the memory "
                                 "fraction");
  BadAlloc& set_hint(std::string hint);
  // What the layer below said (e.g. the CUDA error text), kept at the end of the message.
  BadAlloc& set_detail(std::string detail);

  std::optional<std::uint64_t> allocated_bytes() const { return allocated_; }
  std::optional<std::uint64_t> reserved_bytes() const { return reserved_; }
  std::optional<std::uint64_t> memory_limit() const { return limit_; }

 private:
  void Rebuild();

  platform::Place place_;
  std::uint64_t requested_;
  std::optional<std::uint64_t> total_, free_, allocated_, reserved_, limit_;
  std::string limit_name_;
  std::string hint_, detail_, message_;
};

}  // namespace strata::allocation
