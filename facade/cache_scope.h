// CacheScope: activates a named cache for one place on the calling thread, for the scope's
// lifetime (RAII):
//
//   for (...) {
//     strata::CacheScope scope(strata::platform::CUDAPlace(0), "loop");
//     ... allocate and free as usual ...
//   }
//   strata::InvalidateCache(strata::platform::CUDAPlace(0), "loop");
//
// While active, the thread's frees on that place go into the named cache and its allocations
// are served from it first by exact size and stream; so the second iteration reuses the blocks
// of the first with no search and no device growth. Allocations recorded on other streams are
// never cached (the stream-safe layer must see their free).
//
// The place's chains gain their scoped-cache layer when the place's first named cache is asked
// for (so programs without scopes never pay for it); allocations made before that are freed
// through the chain they came from and are never cached.
//
// Nesting: scopes nest per thread; the innermost active scope of a place is the one used, for
// both allocations and frees; leaving it makes the enclosing one active again. A scope belongs
// to one facade: another facade's chains on the same thread never see it. The cache itself
// outlives scopes: it holds its blocks until InvalidateCache.
//
// Misuse: a scope should be destroyed on the thread that created it, in LIFO order (as any RAII
// object). Out of order, it is removed wherever it is (a warning); destroyed on another thread,
// it ends there (a warning) and the creating thread drops it at its next allocation or free on
// that place. A scope that outlives its facade is never used again (the facade's id is gone).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>
#include <thread>

#include "platform/place.h"

namespace strata::facade {

class AllocatorFacade;
class NamedCache;

class CacheScope {
 public:
  CacheScope(const platform::Place& place, std::string_view name);  // on the process facade
  CacheScope(AllocatorFacade& facade, const platform::Place& place, std::string_view name);
  ~CacheScope();
  CacheScope(const CacheScope&) = delete;
  CacheScope& operator=(const CacheScope&) = delete;

  // The innermost active named cache of facade `facade_id` for `place` on this thread, or
  // nullptr. Cheap when no scope is active (one thread-local load, inlined).
  static NamedCache* Active(const platform::Place& place, std::uint64_t facade_id) {
    return num_active_ == 0 ? nullptr : ActiveSlow(place, facade_id);
  }

 private:
  static NamedCache* ActiveSlow(const platform::Place& place, std::uint64_t facade_id);
  // Scopes alive on this thread (any place). Constant-initialised, so reading it needs no
  // thread-local initialisation wrapper.
  static constinit thread_local int num_active_;

  platform::Place place_;
  NamedCache* cache_;
  std::thread::id thread_;
  // Set when the scope ends on another thread than its own (see Misuse above).
  std::shared_ptr<std::atomic<bool>> ended_;
};

}  // namespace strata::facade
