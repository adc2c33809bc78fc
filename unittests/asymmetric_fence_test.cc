#include "platform/asymmetric_fence.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace strata::platform {
namespace {

// Spins until `done` holds, yielding now and then (the partner may not be running).
template <typename F>
void SpinUntil(F done) {
  for (int spins = 0; !done(); ++spins) {
    if (spins > 1000) std::this_thread::yield();
  }
}

TEST(AsymmetricFenceTest, AvailabilityIsStable) {
  const bool first = AsymmetricFenceAvailable();
  EXPECT_EQ(AsymmetricFenceAvailable(), first);
}

// The store-buffering litmus test: each side writes its flag, fences, then reads the other's.
// With a light fence on one side and a heavy one on the other, both reading 0 is forbidden.
// (Without the heavy fence x86 shows that outcome within a few thousand rounds.)
TEST(AsymmetricFenceTest, OrdersAStoreBufferingPair) {
  if (!AsymmetricFenceAvailable()) GTEST_SKIP() << "membarrier is not available here";
  constexpr int kRounds = 20000;
  std::atomic<int> round{0};  // the hot side starts round r when round == 2r+1
  std::atomic<int> hot_done{-1};
  std::atomic<int> a{0}, b{0};
  int hot_read[kRounds];
  std::thread hot([&] {
    for (int r = 0; r < kRounds; ++r) {
      SpinUntil([&] { return round.load(std::memory_order_acquire) == 2 * r + 1; });
      a.store(1, std::memory_order_relaxed);
      LightFence();
      hot_read[r] = b.load(std::memory_order_relaxed);
      hot_done.store(r, std::memory_order_release);
    }
  });
  int both_zero = 0, fence_failures = 0;
  for (int r = 0; r < kRounds; ++r) {
    a.store(0, std::memory_order_relaxed);
    b.store(0, std::memory_order_relaxed);
    round.store(2 * r + 1, std::memory_order_release);
    b.store(1, std::memory_order_relaxed);
    if (!HeavyFence()) ++fence_failures;
    const int cold_read = a.load(std::memory_order_relaxed);
    SpinUntil([&] { return hot_done.load(std::memory_order_acquire) == r; });
    if (cold_read == 0 && hot_read[r] == 0) ++both_zero;
  }
  hot.join();
  EXPECT_EQ(fence_failures, 0);
  EXPECT_EQ(both_zero, 0);
}

}  // namespace
}  // namespace strata::platform
