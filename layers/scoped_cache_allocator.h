// ScopedCacheAllocator: the top layer of each CUDA chain; routes allocations and frees through
// the thread's active named cache (see cache_scope.h), and passes straight through otherwise
// (one thread-local check).
//
// Thread-safe when the layer below is. A free is cached only when `cacheable` says so (the
// facade refuses allocations recorded on other streams).
#pragma once

#include <memory>

#include "allocation/decorating_allocator.h"
#include "platform/stream.h"

namespace strata::facade {

class ScopedCacheAllocator : public allocation::DecoratingAllocator {
 public:
  using CacheablePredicate = bool (*)(const allocation::Allocation&);

  ScopedCacheAllocator(std::shared_ptr<allocation::Allocator> underlying,
                       const platform::Place& place, platform::Stream stream,
                       CacheablePredicate cacheable)
      : DecoratingAllocator(std::move(underlying), "ScopedCacheAllocator"),
        place_(place),
        stream_(stream),
        cacheable_(cacheable) {}

  const char* Name() const override { return "scoped_cache"; }

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override;
  void FreeImpl(allocation::Allocation* allocation) override;

 private:
  const platform::Place place_;
  const platform::Stream stream_;
  const CacheablePredicate cacheable_;
};

}  // namespace strata::facade
