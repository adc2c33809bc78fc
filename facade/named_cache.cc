#include "facade/named_cache.h"

#include "glog/logging.h"

namespace strata::facade {

allocation::Allocation* NamedCache::Take(std::size_t size, platform::Stream stream) {
  absl::MutexLock lock(&mu_);
  auto it = blocks_.find(Key{size, stream.handle});
  if (it == blocks_.end() || it->second.empty()) return nullptr;
  allocation::Allocation* a = it->second.back();
  it->second.pop_back();
  --count_;
  bytes_ -= a->size();
  ++hits_;
  VLOG(10) << "named cache '" << name_ << "' hit: " << size << " bytes";
  return a;
}

void NamedCache::Put(allocation::Allocation* allocation, platform::Stream stream) {
  absl::MutexLock lock(&mu_);
  blocks_[Key{allocation->requested_size() != 0 ? allocation->requested_size() : allocation->size(),
              stream.handle}]
      .push_back(allocation);
  ++count_;
  bytes_ += allocation->size();
}

std::uint64_t NamedCache::Invalidate() {
  absl::flat_hash_map<Key, std::vector<allocation::Allocation*>> taken;
  std::uint64_t bytes;
  {
    absl::MutexLock lock(&mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    taken.swap(blocks_);
    bytes = bytes_;
    count_ = 0;
    bytes_ = 0;
  }
  for (auto& [key, list] : taken) {
    for (allocation::Allocation* a : list) allocation::AllocationDeleter()(a);
  }
  if (bytes != 0) VLOG(2) << "named cache '" << name_ << "' gave back " << bytes << " bytes";
  return bytes;
}

std::size_t NamedCache::cached_blocks() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

void NamedCache::MarkBlocks(allocation::MemorySnapshot* snapshot) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [key, list] : blocks_) {
    for (const allocation::Allocation* a : list) {
      snapshot->Mark(a->ptr(), allocation::BlockState::kNamedCache);
    }
  }
}

std::uint64_t NamedCache::cached_bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

std::uint64_t NamedCache::hits() const {
  absl::MutexLock lock(&mu_);
  return hits_;
}

}  // namespace strata::facade
