#include "platform/spin_lock.h"
#include "support/threads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace strata::platform {
namespace {

TEST(SpinLockTest, MutualExclusionWithEightThreads) {
  SpinLock lock;
  long counter = 0;  // plain: only the lock protects it
  constexpr int kThreads = 8, kIncrements = 20000;
  testing::RunThreads(kThreads, [&](int) {
    for (int i = 0; i < kIncrements; ++i) {
      std::lock_guard<SpinLock> guard(lock);
      // A read-modify-write spread over two statements, so a missing exclusion loses updates.
      const long seen = counter;
      counter = seen + 1;
    }
  });
  EXPECT_EQ(counter, static_cast<long>(kThreads) * kIncrements);
}

TEST(SpinLockTest, TryLock) {
  SpinLock lock;
  ASSERT_TRUE(lock.try_lock());
  EXPECT_FALSE(lock.try_lock());
  bool other_got_it = true;
  std::thread([&] { other_got_it = lock.try_lock(); }).join();
  EXPECT_FALSE(other_got_it);
  lock.unlock();
  std::thread([&] {
    other_got_it = lock.try_lock();
    if (other_got_it) lock.unlock();
  }).join();
  EXPECT_TRUE(other_got_it);
  std::unique_lock<SpinLock> guard(lock, std::try_to_lock);
  EXPECT_TRUE(guard.owns_lock());
}

TEST(SpinLockTest, LockWaitsForTheHolder) {
  SpinLock lock;
  lock.lock();
  std::atomic<bool> acquired{false};
  std::thread waiter([&] {
    std::lock_guard<SpinLock> guard(lock);
    acquired = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(acquired.load());  // cannot get it while held (no timing bound asserted)
  lock.unlock();
  waiter.join();
  EXPECT_TRUE(acquired.load());
}

}  // namespace
}  // namespace strata::platform
