// SpinLock: a test-and-test-and-set lock for very short critical sections (the outstanding
// events map of the stream-safe layer). Under contention it spins with a CPU pause and
// exponential backoff, then yields: waking a sleeping thread costs more than the few dozen
// nanoseconds such a section is held. Not recursive, not fair. Satisfies Lockable, so it works
// with std::lock_guard / std::unique_lock. Never use it around anything that can block.
#pragma once

#include <atomic>

namespace strata::platform {

class SpinLock {
 public:
  SpinLock() = default;
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

  void lock() {
    if (!locked_.exchange(true, std::memory_order_acquire)) return;
    LockSlow();
  }
  bool try_lock() {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  void LockSlow();
  std::atomic<bool> locked_{false};
};

}  // namespace strata::platform
