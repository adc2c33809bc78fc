#include "tools/peer_library.h"

#include <dlfcn.h>

#include <stdexcept>

#include "absl/strings/str_cat.h"

namespace strata::tools {

namespace {

template <typename F>
F Symbol(void* handle, const char* name) {
  return reinterpret_cast<F>(dlsym(handle, name));
}

}  // namespace

std::unique_ptr<PeerLibrary> PeerLibrary::Load(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw std::runtime_error(
        absl::StrCat("peer library ", path, ": dlopen failed: ", why ? why : "unknown error"));
  }
  std::unique_ptr<PeerLibrary> peer(new PeerLibrary());
  peer->path_ = path;
  auto init = Symbol<int (*)()>(handle, "peer_init");
  auto name = Symbol<const char* (*)()>(handle, "peer_name");
  peer->alloc_ = Symbol<void* (*)(std::size_t, void*)>(handle, "peer_alloc");
  peer->free_ = Symbol<void (*)(void*)>(handle, "peer_free");
  if (init == nullptr || name == nullptr || peer->alloc_ == nullptr || peer->free_ == nullptr) {
    throw std::runtime_error(
        absl::StrCat("peer library ", path,
                     ": missing a required symbol (peer_init, peer_name, peer_alloc, peer_free)"));
  }
  peer->last_error_ = Symbol<const char* (*)()>(handle, "peer_last_error");
  peer->record_stream_ = Symbol<int (*)(void*, void*)>(handle, "peer_record_stream");
  peer->release_ = Symbol<void (*)()>(handle, "peer_release");
  peer->reset_peak_ = Symbol<void (*)()>(handle, "peer_reset_peak");
  peer->peak_reserved_ = Symbol<std::uint64_t (*)()>(handle, "peer_peak_reserved");
  if (init() != 0) {
    throw std::runtime_error(
        absl::StrCat("peer library ", path, ": peer_init failed: ", peer->LastError()));
  }
  peer->name_ = name();
  return peer;
}

std::string PeerLibrary::LastError() const {
  const char* e = last_error_ != nullptr ? last_error_() : nullptr;
  return e != nullptr && *e != '\0' ? e : "(no message)";
}

void PeerLibrary::ThrowAllocFailed(std::size_t bytes) const {
  throw std::runtime_error(
      absl::StrCat("peer ", name_, ": allocation of ", bytes, " bytes failed: ", LastError()));
}

}  // namespace strata::tools
