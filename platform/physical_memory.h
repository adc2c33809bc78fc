// PhysicalMemory: an opaque handle to device pages created by DeviceRuntime::CreatePhysical and
// mapped into reserved address ranges with DeviceRuntime::Map (a CUmemGenericAllocationHandle on
// the CUDA runtime, an emulated page set otherwise). The empty handle (0) means "none": it is
// what CreatePhysical returns when the device is out of memory. Handles are plain values:
// comparing and hashing them never touches the runtime; they are only meaningful to the
// DeviceRuntime that created them.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <utility>

namespace strata::platform {

struct PhysicalMemory {
  std::uint64_t handle = 0;

  constexpr bool valid() const { return handle != 0; }
  friend constexpr bool operator==(PhysicalMemory a, PhysicalMemory b) {
    return a.handle == b.handle;
  }
  friend constexpr bool operator!=(PhysicalMemory a, PhysicalMemory b) {
    return a.handle != b.handle;
  }
  template <typename H>
  friend H AbslHashValue(H h, PhysicalMemory m) {
    return H::combine(std::move(h), m.handle);
  }
};

inline std::ostream& operator<<(std::ostream& os, PhysicalMemory m) {
  return m.valid() ? os << "physical(" << m.handle << ")" : os << "physical(none)";
}

}  // namespace strata::platform

template <>
struct std::hash<strata::platform::PhysicalMemory> {
  std::size_t operator()(strata::platform::PhysicalMemory m) const noexcept {
    return std::hash<std::uint64_t>()(m.handle);
  }
};
