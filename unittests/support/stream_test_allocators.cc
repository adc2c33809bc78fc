#include "support/stream_test_allocators.h"

#include <cstdlib>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "allocation/bad_alloc.h"

namespace strata::testing {

std::size_t CachingTestAllocator::cached_blocks() const {
  absl::MutexLock lock(&mu_);
  std::size_t n = 0;
  for (const auto& [size, blocks] : cache_) n += blocks.size();
  return n;
}

allocation::Allocation* CachingTestAllocator::AllocateImpl(std::size_t size) {
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(size);
    if (it != cache_.end() && !it->second.empty()) {
      allocation::Allocation* a = it->second.back();  // LIFO: the last freed block first
      it->second.pop_back();
      ++reused_;
      return a;
    }
  }
  return underlying().Allocate(size).release();
}

void CachingTestAllocator::FreeImpl(allocation::Allocation* allocation) {
  absl::MutexLock lock(&mu_);
  cache_[allocation->size()].push_back(allocation);
}

std::uint64_t CachingTestAllocator::ReleaseImpl(const platform::Place& place) {
  std::vector<allocation::Allocation*> blocks;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [size, list] : cache_) blocks.insert(blocks.end(), list.begin(), list.end());
    cache_.clear();
  }
  std::uint64_t bytes = 0;
  for (allocation::Allocation* a : blocks) {
    bytes += a->size();
    allocation::AllocationPtr(a).reset();  // frees through the layers below
  }
  return bytes + underlying().Release(place);
}

FixedBlockAllocator::FixedBlockAllocator(std::size_t block_size, int count, platform::Place place)
    : block_size_((block_size + 255) / 256 * 256), place_(place) {
  if (count < 1) throw std::invalid_argument("FixedBlockAllocator: count must be >= 1");
  memory_ = std::aligned_alloc(256, block_size_ * count);
  used_.assign(count, false);
}

FixedBlockAllocator::~FixedBlockAllocator() { std::free(memory_); }

int FixedBlockAllocator::live_blocks() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (bool u : used_) n += u;
  return n;
}

allocation::Allocation* FixedBlockAllocator::AllocateImpl(std::size_t size) {
  if (size > block_size_) {
    throw allocation::BadAlloc(place_, size)
        .set_detail(absl::StrCat("fixed block allocator: blocks are ", block_size_, " bytes"));
  }
  absl::MutexLock lock(&mu_);
  for (std::size_t i = 0; i < used_.size(); ++i) {
    if (!used_[i]) {
      used_[i] = true;
      return new allocation::Allocation(block(static_cast<int>(i)), size, place_);
    }
  }
  throw allocation::BadAlloc(place_, size)
      .set_detail(absl::StrCat("fixed block allocator: all ", used_.size(), " blocks in use"));
}

void FixedBlockAllocator::FreeImpl(allocation::Allocation* allocation) {
  const auto offset =
      static_cast<std::size_t>(static_cast<char*>(allocation->ptr()) - static_cast<char*>(memory_));
  {
    absl::MutexLock lock(&mu_);
    used_.at(offset / block_size_) = false;
  }
  delete allocation;
}

allocation::Allocation* EmptyAllocator::AllocateImpl(std::size_t /*size*/) {
  ++live_;
  return new allocation::Allocation(nullptr, 0, platform::CUDAPlace(0));
}

void EmptyAllocator::FreeImpl(allocation::Allocation* allocation) {
  --live_;
  delete allocation;
}

}  // namespace strata::testing
