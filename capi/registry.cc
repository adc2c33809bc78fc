#include "capi/registry.h"

#include <cstdint>
#include <mutex>
#include <utility>

#include "glog/logging.h"

namespace strata::capi {

using allocation::AllocationPtr;

void Registry::Insert(void* ptr, AllocationPtr allocation) {
  AllocationPtr stale;
  {
    Shard& s = ShardOf(ptr);
    std::lock_guard<platform::SpinLock> lock(s.mu);
    auto [it, inserted] = s.live.try_emplace(ptr, std::move(allocation));
    if (!inserted) {
      // Impossible unless memory was handed out twice; keep the newer record and leak the older
      // one rather than free memory that is in use.
      stale = std::exchange(it->second, std::move(allocation));
    }
  }
  if (stale) {
    LOG(ERROR) << "strata C API: pointer " << ptr
               << " handed out while already live; the older record is dropped";
    (void)stale.release();
  }
}

AllocationPtr Registry::Take(void* ptr) {
  Shard& s = ShardOf(ptr);
  std::lock_guard<platform::SpinLock> lock(s.mu);
  auto it = s.live.find(ptr);
  if (it == s.live.end()) return nullptr;
  AllocationPtr a = std::move(it->second);
  s.live.erase(it);
  return a;
}

std::int64_t Registry::Count() {
  std::int64_t n = 0;
  for (Shard& s : shards_) {
    std::lock_guard<platform::SpinLock> lock(s.mu);
    n += static_cast<std::int64_t>(s.live.size());
  }
  return n;
}

}  // namespace strata::capi
