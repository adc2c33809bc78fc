#include "facade/cache_scope.h"

#include <vector>

#include "facade/allocator_facade.h"
#include "facade/named_cache.h"
#include "glog/logging.h"

namespace strata::facade {

namespace {
struct ActiveScope {
  platform::Place place;
  NamedCache* cache;
};
thread_local std::vector<ActiveScope> tls_scopes;
}  // namespace

constinit thread_local int CacheScope::num_active_ = 0;

CacheScope::CacheScope(const platform::Place& place, std::string_view name)
    : CacheScope(AllocatorFacade::Instance(), place, name) {}

CacheScope::CacheScope(AllocatorFacade& facade, const platform::Place& place, std::string_view name)
    : place_(place), cache_(facade.GetNamedCache(place, name)) {
  tls_scopes.push_back({place_, cache_});
  ++num_active_;
  VLOG(6) << "cache scope '" << name << "' entered on " << place;
}

CacheScope::~CacheScope() {
  --num_active_;
  if (!tls_scopes.empty() && tls_scopes.back().cache == cache_) {
    tls_scopes.pop_back();
    return;
  }
  // Not LIFO: remove our entry wherever it is rather than corrupt the stack.
  LOG(WARNING) << "strata: CacheScope '" << cache_->name() << "' destroyed out of order";
  for (auto it = tls_scopes.rbegin(); it != tls_scopes.rend(); ++it) {
    if (it->cache == cache_) {
      tls_scopes.erase(std::next(it).base());
      return;
    }
  }
}

NamedCache* CacheScope::ActiveSlow(const platform::Place& place) {
  for (auto it = tls_scopes.rbegin(); it != tls_scopes.rend(); ++it) {
    if (it->place == place) return it->cache;
  }
  return nullptr;
}

}  // namespace strata::facade
