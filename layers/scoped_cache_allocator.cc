#include "layers/scoped_cache_allocator.h"

#include "facade/cache_scope.h"
#include "facade/named_cache.h"

namespace strata::facade {

allocation::Allocation* ScopedCacheAllocator::AllocateImpl(std::size_t size) {
  if (NamedCache* cache = CacheScope::Active(place_)) {
    if (allocation::Allocation* a = cache->Take(size, stream_)) return a;
  }
  return underlying().Allocate(size).release();
}

void ScopedCacheAllocator::FreeImpl(allocation::Allocation* allocation) {
  NamedCache* cache = CacheScope::Active(place_);
  if (cache != nullptr && allocation->size() != 0 &&
      (cacheable_ == nullptr || cacheable_(*allocation))) {
    cache->Put(allocation, stream_);
    return;
  }
  underlying().Free(allocation);
}

}  // namespace strata::facade
