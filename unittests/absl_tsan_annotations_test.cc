// Plain (non-atomic) data handed between threads through each Abseil primitive strata uses.
// In every build the tests check the values; in a STRATA_SANITIZE=thread build they are the
// regression test of tools/tsan/absl_tsan_annotations.cc: without it TSan cannot see Debian's
// uninstrumented absl::Mutex and reports each of these accesses as a data race (the test
// binary then exits non-zero).
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "support/threads.h"

namespace strata::platform {
namespace {

TEST(AbslTsanAnnotationsTest, MutexLockGuardsPlainCounter) {
  absl::Mutex mu;
  long counter = 0;
  constexpr int kThreads = 4, kIncrements = 2000;
  testing::RunThreads(kThreads, [&](int) {
    for (int i = 0; i < kIncrements; ++i) {
      absl::MutexLock lock(&mu);
      const long seen = counter;
      counter = seen + 1;
    }
  });
  EXPECT_EQ(counter, static_cast<long>(kThreads) * kIncrements);
}

TEST(AbslTsanAnnotationsTest, ReadersSeeTheWritersValue) {
  absl::Mutex mu;
  long value = 0;
  std::vector<long> seen(4, -1);
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    for (int i = 1; i <= 1000; ++i) {
      absl::MutexLock lock(&mu);
      value = i;
    }
  });
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      for (int i = 0; i < 1000; ++i) {
        absl::ReaderMutexLock lock(&mu);
        EXPECT_GE(value, seen[r]);  // monotonic under the lock
        seen[r] = value;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(value, 1000);
}

TEST(AbslTsanAnnotationsTest, TryLockSucceedsOnlyWhenFree) {
  absl::Mutex mu;
  long value = 0;
  mu.Lock();
  bool other_got_it = true;
  std::thread([&] {
    other_got_it = mu.TryLock();
    if (other_got_it) mu.Unlock();
  }).join();
  EXPECT_FALSE(other_got_it);
  value = 7;
  mu.Unlock();
  long read = 0;
  std::thread([&] {
    while (!mu.TryLock()) {
    }
    read = value;
    mu.Unlock();
  }).join();
  EXPECT_EQ(read, 7);
}

TEST(AbslTsanAnnotationsTest, CondVarHandsOffPlainData) {
  absl::Mutex mu;
  absl::CondVar cv;
  bool ready = false;
  std::vector<int> payload;
  std::thread consumer([&] {
    absl::MutexLock lock(&mu);
    while (!ready) cv.Wait(&mu);
    payload.push_back(3);
  });
  {
    absl::MutexLock lock(&mu);
    payload = {1, 2};
    ready = true;
    cv.Signal();
  }
  consumer.join();
  EXPECT_EQ(payload, (std::vector<int>{1, 2, 3}));
}

TEST(AbslTsanAnnotationsTest, CondVarWaitWithDeadlineHandsOffPlainData) {
  absl::Mutex mu;
  absl::CondVar cv;
  int epoch = 0;
  long payload = 0;
  std::thread producer([&] {
    for (int i = 1; i <= 50; ++i) {
      absl::MutexLock lock(&mu);
      payload += i;
      ++epoch;
      cv.SignalAll();
    }
  });
  {
    absl::MutexLock lock(&mu);
    while (epoch < 50) cv.WaitWithDeadline(&mu, absl::Now() + absl::Milliseconds(1));
    EXPECT_EQ(payload, 50 * 51 / 2);
  }
  producer.join();
}

TEST(AbslTsanAnnotationsTest, AwaitConditionReadsGuardedData) {
  absl::Mutex mu;
  std::vector<int> queue;  // the condition reads it, possibly on the unlocking thread
  long sum = 0;
  std::thread consumer([&] {
    for (int taken = 0; taken < 100;) {
      absl::MutexLock lock(&mu);
      auto nonempty = [&] { return !queue.empty(); };
      mu.Await(absl::Condition(&nonempty));
      sum += queue.back();
      queue.pop_back();
      ++taken;
    }
  });
  for (int i = 1; i <= 100; ++i) {
    absl::MutexLock lock(&mu);
    queue.push_back(i);
  }
  consumer.join();
  EXPECT_EQ(sum, 100 * 101 / 2);
}

TEST(AbslTsanAnnotationsTest, LockWhenAndAwaitWithTimeout) {
  absl::Mutex mu;
  int stage = 0;
  std::thread other([&] {
    mu.LockWhen(absl::Condition(
        +[](int* s) { return *s == 1; }, &stage));
    stage = 2;
    mu.Unlock();
  });
  {
    absl::MutexLock lock(&mu);
    stage = 1;
    auto two = [&] { return stage == 2; };
    while (!mu.AwaitWithTimeout(absl::Condition(&two), absl::Milliseconds(1))) {
    }
  }
  other.join();
  EXPECT_EQ(stage, 2);
}

TEST(AbslTsanAnnotationsTest, NotificationPublishesPlainData) {
  for (int round = 0; round < 20; ++round) {
    auto done = std::make_unique<absl::Notification>();
    long payload = 0;
    std::thread producer([&] {
      payload = round + 1;
      done->Notify();
    });
    // Either the fast path (already notified) or the slow one, depending on the schedule.
    if (round % 2 == 0) {
      done->WaitForNotification();
    } else {
      while (!done->WaitForNotificationWithTimeout(absl::Milliseconds(1))) {
      }
    }
    EXPECT_EQ(payload, round + 1);
    producer.join();
  }
}

TEST(AbslTsanAnnotationsTest, HeapMutexesReusedAcrossThreads) {
  for (int round = 0; round < 50; ++round) {
    auto mu = std::make_unique<absl::Mutex>();
    int value = 0;
    std::thread t([&] {
      absl::MutexLock lock(mu.get());
      value += 1;
    });
    {
      absl::MutexLock lock(mu.get());
      value += 1;
    }
    t.join();
    EXPECT_EQ(value, 2);
  }
}

}  // namespace
}  // namespace strata::platform
