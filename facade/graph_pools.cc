#include "facade/graph_pools.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace strata::facade {

namespace {
std::string Name(const GraphPools::PoolId& id) {
  return absl::StrCat("(", id.first, ", ", id.second, ")");
}
}  // namespace

GraphPools::GraphPools(const platform::Place& place, MakeChain make_chain)
    : place_(place), make_chain_(std::move(make_chain)) {}

GraphPools::~GraphPools() = default;

void GraphPools::Begin(PoolId id, Filter filter) {
  if (!filter) throw std::invalid_argument("strata: a graph pool's stream filter is empty");
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Pool>& pool = pools_[id];
  if (pool == nullptr) {
    try {
      pool = std::make_unique<Pool>();
      pool->chain = make_chain_();
    } catch (...) {
      pools_.erase(id);
      throw;
    }
    VLOG(1) << "strata: graph pool " << Name(id) << " created on " << place_;
  }
  ++pool->users;
  active_.push_back({id, std::move(filter)});
  routing_.fetch_add(1, std::memory_order_acq_rel);
  VLOG(4) << "strata: allocations on " << place_ << " go to graph pool " << Name(id)
          << " for the capturing stream (" << pool->users << " user(s))";
}

void GraphPools::End(PoolId id) {
  absl::MutexLock lock(&mu_);
  auto it =
      std::find_if(active_.rbegin(), active_.rend(), [&](const Active& a) { return a.id == id; });
  if (it == active_.rend()) {
    throw std::invalid_argument(absl::StrCat("strata: end of allocation to graph pool ", Name(id),
                                             " on ", place_.ToString(), ", which was not begun"));
  }
  active_.erase(std::next(it).base());
  routing_.fetch_sub(1, std::memory_order_acq_rel);
  VLOG(4) << "strata: allocations on " << place_ << " no longer go to graph pool " << Name(id);
  ReleaseRetiredLocked();
}

void GraphPools::Release(PoolId id) {
  absl::MutexLock lock(&mu_);
  auto it = pools_.find(id);
  if (it == pools_.end() || it->second->users == 0) {
    throw std::invalid_argument(absl::StrCat("strata: release of graph pool ", Name(id), " on ",
                                             place_.ToString(), ", which has no user"));
  }
  if (--it->second->users == 0) VLOG(1) << "strata: graph pool " << Name(id) << " retired";
  ReleaseRetiredLocked();
}

std::shared_ptr<allocation::Allocator> GraphPools::Route(platform::Stream stream) {
  absl::ReaderMutexLock lock(&mu_);
  // The latest capture first: nested captures route to the innermost.
  for (auto it = active_.rbegin(); it != active_.rend(); ++it) {
    if (it->filter(stream)) return pools_.at(it->id)->chain.top;
  }
  return nullptr;
}

std::uint64_t GraphPools::ReleaseRetired() {
  absl::MutexLock lock(&mu_);
  return ReleaseRetiredLocked();
}

std::uint64_t GraphPools::ReleaseRetiredLocked() {
  // A device free during a capture would invalidate it: retired memory waits for the end.
  if (routing_.load(std::memory_order_acquire) != 0) return 0;
  std::uint64_t bytes = 0;
  for (auto it = pools_.begin(); it != pools_.end();) {
    Pool& pool = *it->second;
    if (pool.users != 0) {
      ++it;
      continue;
    }
    bytes += pool.chain.top->Release(place_);
    if (pool.chain.allocated_bytes() == 0) {
      VLOG(1) << "strata: graph pool " << Name(it->first) << " on " << place_ << " released";
      pools_.erase(it++);
    } else {
      ++it;
    }
  }
  return bytes;
}

void GraphPools::CollectStats(allocation::MemoryStats* stats) {
  absl::ReaderMutexLock lock(&mu_);
  for (auto& [id, pool] : pools_) pool->chain.top->CollectStats(stats);
}

void GraphPools::Snapshot(allocation::MemorySnapshot* snapshot) {
  absl::ReaderMutexLock lock(&mu_);
  for (auto& [id, pool] : pools_) {
    snapshot->set_pool(absl::StrCat("graph ", id.first, ".", id.second));
    pool->chain.top->Snapshot(snapshot);
  }
}

std::size_t GraphPools::num_pools() {
  absl::ReaderMutexLock lock(&mu_);
  return pools_.size();
}

}  // namespace strata::facade
