// ScopedCacheAllocator: the top layer of each CUDA chain; routes allocations and frees through
// the thread's active named cache (see cache_scope.h), and passes straight through otherwise
// (one thread-local check, plus one atomic load while blocks of a scope are out).
//
// A block allocated while a named scope is active belongs to that cache: whenever it is freed,
// inside the scope or after it closed, it goes back there (GPUArrays.jl's rule), until the cache
// is invalidated; then it is freed down the chain like any other.
//
// Thread-safe when the layer below is. A free is cached only when `cacheable` says so (the
// facade refuses allocations recorded on other streams).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "allocation/decorating_allocator.h"
#include "platform/stream.h"

namespace strata::facade {

class NamedCache;

class ScopedCacheAllocator : public allocation::DecoratingAllocator {
 public:
  static constexpr char kName[] = "scoped_cache";
  using CacheablePredicate = bool (*)(const allocation::Allocation&);

  ScopedCacheAllocator(std::shared_ptr<allocation::Allocator> underlying,
                       const platform::Place& place, platform::Stream stream,
                       std::uint64_t facade_id, CacheablePredicate cacheable)
      : DecoratingAllocator(std::move(underlying), kName),
        place_(place),
        stream_(stream),
        facade_id_(facade_id),
        cacheable_(cacheable) {}

  const char* Name() const override { return kName; }

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override;
  void FreeImpl(allocation::Allocation* allocation) override;

 private:
  struct Owner {
    NamedCache* cache;
    std::uint64_t generation;
  };
  const platform::Place place_;
  const platform::Stream stream_;
  const std::uint64_t facade_id_;  // the scopes this layer serves (AllocatorFacade::id)
  const CacheablePredicate cacheable_;
  // Blocks handed out inside a scope and not yet freed, with their cache.
  std::atomic<int> outstanding_{0};
  absl::Mutex mu_;
  absl::flat_hash_map<const allocation::Allocation*, Owner> owners_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::facade
