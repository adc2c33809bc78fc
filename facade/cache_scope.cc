#include "facade/cache_scope.h"

#include <iterator>
#include <vector>

#include "facade/allocator_facade.h"
#include "facade/named_cache.h"
#include "glog/logging.h"

namespace strata::facade {

namespace {
struct ActiveScope {
  platform::Place place;
  std::uint64_t facade_id;
  NamedCache* cache;
  std::shared_ptr<std::atomic<bool>> ended;
};
thread_local std::vector<ActiveScope> tls_scopes;
}  // namespace

constinit thread_local int CacheScope::num_active_ = 0;

CacheScope::CacheScope(const platform::Place& place, std::string_view name)
    : CacheScope(AllocatorFacade::Instance(), place, name) {}

CacheScope::CacheScope(AllocatorFacade& facade, const platform::Place& place, std::string_view name)
    : place_(place),
      cache_(facade.GetNamedCache(place, name)),
      thread_(std::this_thread::get_id()),
      ended_(std::make_shared<std::atomic<bool>>(false)) {
  tls_scopes.push_back({place_, facade.id(), cache_, ended_});
  ++num_active_;
  VLOG(6) << "cache scope '" << name << "' entered on " << place;
}

CacheScope::~CacheScope() {
  if (std::this_thread::get_id() != thread_) {
    // Another thread's stack of scopes cannot be touched from here: mark it, and its own thread
    // drops it (ActiveSlow).
    ended_->store(true, std::memory_order_release);
    LOG(WARNING) << "strata: CacheScope on " << place_
                 << " destroyed on another thread than the one that created it";
    return;
  }
  --num_active_;
  if (!tls_scopes.empty() && tls_scopes.back().ended == ended_) {
    tls_scopes.pop_back();
    return;
  }
  // Not LIFO: remove our entry wherever it is rather than corrupt the stack.
  LOG(WARNING) << "strata: CacheScope on " << place_ << " destroyed out of order";
  for (auto it = tls_scopes.rbegin(); it != tls_scopes.rend(); ++it) {
    if (it->ended == ended_) {
      tls_scopes.erase(std::next(it).base());
      return;
    }
  }
}

NamedCache* CacheScope::ActiveSlow(const platform::Place& place, std::uint64_t facade_id) {
  for (auto it = tls_scopes.rbegin(); it != tls_scopes.rend();) {
    if (it->ended->load(std::memory_order_acquire)) [[unlikely]] {
      it = std::make_reverse_iterator(tls_scopes.erase(std::next(it).base()));
      --num_active_;
      continue;
    }
    if (it->place == place && it->facade_id == facade_id) return it->cache;
    ++it;
  }
  return nullptr;
}

}  // namespace strata::facade
