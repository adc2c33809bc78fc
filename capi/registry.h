// The C ABI's pointer registry: ptr -> AllocationPtr of every live strata_malloc allocation, so
// that strata_free, which gets a bare pointer, can free it. Not installed; for capi/ only.
//
// Thread-safe: pointers map into kShards hash maps chosen by pointer bits, each under a SpinLock
// held only for the map operation (a free runs outside it, when the caller drops what Take
// returned). Insert may throw std::bad_alloc (the allocation is then freed); nothing else
// throws.
#pragma once

#include <cstdint>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "allocation/allocation.h"
#include "platform/spin_lock.h"

namespace strata::capi {

class Registry {
 public:
  // Records `allocation` under `ptr`.
  void Insert(void* ptr, allocation::AllocationPtr allocation);

  // Removes and returns the allocation of `ptr`; null when unknown.
  allocation::AllocationPtr Take(void* ptr);

  // Calls f(allocation) under the shard's lock, so the allocation cannot be freed meanwhile.
  // Returns false when `ptr` is unknown.
  template <typename F>
  bool With(void* ptr, F&& f) {
    Shard& s = ShardOf(ptr);
    std::lock_guard<platform::SpinLock> lock(s.mu);
    auto it = s.live.find(ptr);
    if (it == s.live.end()) return false;
    f(*it->second);
    return true;
  }

  // Live allocations, all shards.
  std::int64_t Count();

 private:
  static constexpr int kShardBits = 6;
  static constexpr int kShards = 1 << kShardBits;

  struct alignas(64) Shard {
    platform::SpinLock mu;
    absl::flat_hash_map<void*, allocation::AllocationPtr> live ABSL_GUARDED_BY(mu);
  };

  Shard& ShardOf(void* ptr) {
    // Fibonacci hashing: device pointers are aligned, so their low bits carry no information.
    const std::uint64_t h =
        static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(ptr)) * 0x9E3779B97F4A7C15ull;
    return shards_[h >> (64 - kShardBits)];
  }

  Shard shards_[kShards];
};

}  // namespace strata::capi
