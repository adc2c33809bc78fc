#include "platform/spin_lock.h"

#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define STRATA_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define STRATA_CPU_RELAX() asm volatile("yield" ::: "memory")
#else
#define STRATA_CPU_RELAX() \
  do {                     \
  } while (0)
#endif

namespace strata::platform {

void SpinLock::LockSlow() {
  // Spin on a plain load (no cache-line ping-pong), backing off exponentially; past the spin
  // budget the holder has probably been descheduled, so give the core away.
  constexpr int kMaxBackoff = 64;
  constexpr int kSpinRounds = 16;
  int backoff = 1;
  for (int round = 0;; ++round) {
    while (locked_.load(std::memory_order_relaxed)) {
      if (round < kSpinRounds) {
        for (int i = 0; i < backoff; ++i) STRATA_CPU_RELAX();
        if (backoff < kMaxBackoff) backoff <<= 1;
        ++round;
      } else {
        std::this_thread::yield();
      }
    }
    if (!locked_.exchange(true, std::memory_order_acquire)) return;
  }
}

}  // namespace strata::platform
