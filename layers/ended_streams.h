// EndedStreams: the streams a framework ended (AllocatorFacade::EndStream: about to be
// destroyed) that no allocation has taken over since, each with a fence after its last work. A
// layer that would enqueue on such a handle orders after the fence instead: CUDA does not check
// a destroyed handle, so a call on it is undefined.
//
// Contract: thread-safe (one mutex; lookups happen on rare paths only, behind one atomic load).
// The fences belong to the caller of Add, which keeps each valid until its Forget returns;
// With calls its function under the lock, so a fence it sees stays valid meanwhile. Nothing
// thrown but std::bad_alloc.
#pragma once

#include <atomic>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "platform/event.h"
#include "platform/stream.h"

namespace strata::layers {

class EndedStreams {
 public:
  // `stream` ended; `fence` (recorded on it then) covers its work. Replaces an earlier fence.
  void Add(platform::Stream stream, platform::Event fence) {
    absl::MutexLock lock(&mu_);
    fences_[stream] = fence;
    count_.store(fences_.size(), std::memory_order_release);
  }
  // An allocation took the handle over (a new stream has it), or the fence goes.
  void Forget(platform::Stream stream) {
    absl::MutexLock lock(&mu_);
    fences_.erase(stream);
    count_.store(fences_.size(), std::memory_order_release);
  }
  bool Contains(platform::Stream stream) const {
    return With(stream, [](platform::Event) {});
  }
  // Calls use(fence) with the lock held when `stream` ended; returns whether it did. `use` must
  // not call back into this object.
  template <typename Use>
  bool With(platform::Stream stream, Use&& use) const {
    if (count_.load(std::memory_order_acquire) == 0) return false;
    absl::MutexLock lock(&mu_);
    auto it = fences_.find(stream);
    if (it == fences_.end()) return false;
    use(it->second);
    return true;
  }

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<platform::Stream, platform::Event> fences_ ABSL_GUARDED_BY(mu_);
  std::atomic<std::size_t> count_{0};
};

}  // namespace strata::layers
