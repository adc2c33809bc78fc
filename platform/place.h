// Place: where memory lives — host (CPU), one CUDA device, or page-locked host memory.
//
// Contract: a small value type, cheap to copy, comparable, hashable (std::hash and
// absl::Hash) and printable ("cpu", "cuda:1", "cuda_pinned"). Thread-safe as any value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace strata::platform {

enum class PlaceType : std::uint8_t { kCPU = 0, kCUDA = 1, kCUDAPinned = 2 };

class Place {
 public:
  constexpr Place() = default;
  constexpr Place(PlaceType type, int device) : type_(type), device_(device) {}

  constexpr PlaceType type() const { return type_; }
  // The CUDA device ordinal; 0 for host places.
  constexpr int device() const { return device_; }
  constexpr bool is_cpu() const { return type_ == PlaceType::kCPU; }
  constexpr bool is_cuda() const { return type_ == PlaceType::kCUDA; }
  constexpr bool is_cuda_pinned() const { return type_ == PlaceType::kCUDAPinned; }

  std::string ToString() const;

  friend constexpr bool operator==(const Place& a, const Place& b) {
    return a.type_ == b.type_ && a.device_ == b.device_;
  }
  friend constexpr bool operator!=(const Place& a, const Place& b) { return !(a == b); }
  friend constexpr bool operator<(const Place& a, const Place& b) {
    return a.type_ != b.type_ ? a.type_ < b.type_ : a.device_ < b.device_;
  }
  template <typename H>
  friend H AbslHashValue(H h, const Place& p) {
    return H::combine(std::move(h), static_cast<int>(p.type_), p.device_);
  }

 private:
  PlaceType type_ = PlaceType::kCPU;
  int device_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Place& place);

struct CPUPlace : Place {
  constexpr CPUPlace() : Place(PlaceType::kCPU, 0) {}
};
struct CUDAPlace : Place {
  constexpr explicit CUDAPlace(int device = 0) : Place(PlaceType::kCUDA, device) {}
};
struct CUDAPinnedPlace : Place {
  constexpr CUDAPinnedPlace() : Place(PlaceType::kCUDAPinned, 0) {}
};

}  // namespace strata::platform

template <>
struct std::hash<strata::platform::Place> {
  std::size_t operator()(const strata::platform::Place& p) const noexcept {
    return (static_cast<std::size_t>(p.type()) << 32) ^ static_cast<std::size_t>(p.device());
  }
};
