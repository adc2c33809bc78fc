// SpinLock: a test-and-test-and-set lock for very short critical sections (the outstanding
// events map of the stream-safe layer). Under contention it spins with a CPU pause and
// exponential backoff, then yields: waking a sleeping thread costs more than the few dozen
// nanoseconds such a section is held. Not recursive, not fair. Satisfies Lockable, so it works
// with std::lock_guard / std::unique_lock. Also guards the pools' state: Debian's absl::Mutex
// is built with deadlock detection and costs ~65 ns per uncontended lock/unlock against
// ~10 ns here, and a pool's critical section is a few dozen nanoseconds; the rare slow section
// (a device malloc) makes waiters yield rather than burn a core.
#pragma once

#include <atomic>

#include "absl/base/thread_annotations.h"

namespace strata::platform {

class ABSL_LOCKABLE SpinLock {
 public:
  SpinLock() = default;
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    if (!locked_.exchange(true, std::memory_order_acquire)) return;
    LockSlow();
  }
  bool try_lock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() ABSL_UNLOCK_FUNCTION() { locked_.store(false, std::memory_order_release); }

 private:
  void LockSlow();
  std::atomic<bool> locked_{false};
};

}  // namespace strata::platform
