// Stream: an opaque handle to an ordered queue of device work (a cudaStream_t on the CUDA
// runtime, an emulated stream otherwise). The default-constructed handle is the default
// stream of the current device. Handles are plain values: comparing and hashing them never
// touches the runtime; they are only meaningful to the DeviceRuntime that created them.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>

namespace strata::platform {

struct Stream {
  void* handle = nullptr;

  constexpr bool is_default() const { return handle == nullptr; }
  friend constexpr bool operator==(Stream a, Stream b) { return a.handle == b.handle; }
  friend constexpr bool operator!=(Stream a, Stream b) { return a.handle != b.handle; }
  template <typename H>
  friend H AbslHashValue(H h, Stream s) {
    return H::combine(std::move(h), s.handle);
  }
};

inline std::ostream& operator<<(std::ostream& os, Stream s) {
  return s.is_default() ? os << "stream(default)" : os << "stream(" << s.handle << ")";
}

}  // namespace strata::platform

template <>
struct std::hash<strata::platform::Stream> {
  std::size_t operator()(strata::platform::Stream s) const noexcept {
    return std::hash<void*>()(s.handle);
  }
};
