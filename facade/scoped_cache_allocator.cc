#include "facade/scoped_cache_allocator.h"

#include "facade/cache_scope.h"
#include "facade/named_cache.h"

namespace strata::facade {

allocation::Allocation* ScopedCacheAllocator::AllocateImpl(std::size_t size) {
  NamedCache* cache = CacheScope::Active(place_, facade_id_);
  if (cache == nullptr) [[likely]]
    return underlying().Allocate(size).release();
  allocation::Allocation* a = cache->Take(size, stream_);
  if (a == nullptr) a = underlying().Allocate(size).release();
  absl::MutexLock lock(&mu_);
  owners_[a] = Owner{cache, cache->generation()};
  outstanding_.fetch_add(1, std::memory_order_relaxed);
  return a;
}

void ScopedCacheAllocator::FreeImpl(allocation::Allocation* allocation) {
  // The cache it was allocated in (while not invalidated since), else the active one.
  NamedCache* cache = nullptr;
  if (outstanding_.load(std::memory_order_relaxed) != 0) [[unlikely]] {
    absl::MutexLock lock(&mu_);
    auto it = owners_.find(allocation);
    if (it != owners_.end()) {
      if (it->second.generation == it->second.cache->generation()) cache = it->second.cache;
      owners_.erase(it);
      outstanding_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  if (cache == nullptr) cache = CacheScope::Active(place_, facade_id_);
  if (cache != nullptr && allocation->size() != 0 &&
      (cacheable_ == nullptr || cacheable_(*allocation))) {
    cache->Put(allocation, stream_);
    return;
  }
  underlying().Free(allocation);
}

}  // namespace strata::facade
