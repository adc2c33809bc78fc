// PeerLibrary: a benchmark peer (another project's allocator) loaded from a shared library that
// exports the plain C interface of tools/peers/peer_api.h — e.g. PyTorch's caching allocator,
// built on the GPU machine by tools/peers/build_torch_peer.sh.
//
// Contract
// - Load(path) dlopen()s the library (RTLD_NOW | RTLD_LOCAL, so its dependencies stay out of our
//   symbol scope), resolves the symbols and calls peer_init once. Throws std::runtime_error
//   naming the path and what failed (dlopen's message, a missing required symbol, peer_init's
//   error). The library is never unloaded (its allocator may run static destructors at exit).
// - Alloc throws std::runtime_error with the peer's message when the
//   peer returns nullptr (out of memory or any other failure); Free never throws.
// - Optional entry points: has_record_stream() etc. say whether the peer exports them; the
//   calls are no-ops (RecordStream: false, PeakReserved: 0) when it does not.
// - Thread safety: that of the peer (PyTorch's allocator is thread-safe); this object is
//   immutable after Load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace strata::tools {

class PeerLibrary {
 public:
  static std::unique_ptr<PeerLibrary> Load(const std::string& path);

  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }

  void* Alloc(std::size_t bytes, void* stream) {
    void* p = alloc_(bytes, stream);
    if (p == nullptr) [[unlikely]]
      ThrowAllocFailed(bytes);
    return p;
  }
  void Free(void* ptr) { free_(ptr); }

  bool has_record_stream() const { return record_stream_ != nullptr; }
  // Marks `ptr` as used on `stream`; false when unsupported or it failed.
  bool RecordStream(void* ptr, void* stream) {
    return record_stream_ != nullptr && record_stream_(ptr, stream) == 0;
  }
  void Release() {
    if (release_ != nullptr) release_();
  }
  void ResetPeak() {
    if (reset_peak_ != nullptr) reset_peak_();
  }
  bool has_peak_reserved() const { return peak_reserved_ != nullptr; }
  std::uint64_t PeakReserved() { return peak_reserved_ != nullptr ? peak_reserved_() : 0; }

 private:
  PeerLibrary() = default;
  [[noreturn]] void ThrowAllocFailed(std::size_t bytes) const;
  std::string LastError() const;

  std::string path_;
  std::string name_;
  void* (*alloc_)(std::size_t, void*) = nullptr;
  void (*free_)(void*) = nullptr;
  const char* (*last_error_)() = nullptr;
  int (*record_stream_)(void*, void*) = nullptr;
  void (*release_)() = nullptr;
  void (*reset_peak_)() = nullptr;
  std::uint64_t (*peak_reserved_)() = nullptr;
};

}  // namespace strata::tools
