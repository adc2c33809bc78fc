#include "allocation/object_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace strata::allocation {
namespace {

// Counts live objects so tests can see what the pool deletes.
template <int kTag>
struct Counted {
  static inline std::atomic<int> live{0};
  Counted() { live.fetch_add(1); }
  ~Counted() { live.fetch_sub(1); }
};

TEST(ObjectPoolTest, RecyclesOnTheSameThread) {
  using T = Counted<0>;
  std::thread([] {
    T* a = ObjectPool<T>::Acquire();
    ObjectPool<T>::Release(a);
    EXPECT_EQ(ObjectPool<T>::Acquire(), a);  // no new object
    EXPECT_EQ(T::live.load(), 1);
    ObjectPool<T>::Release(a);
  }).join();
  EXPECT_EQ(T::live.load(), 0);  // the thread's cache was emptied at its exit
}

TEST(ObjectPoolTest, KeepsAtMostCapacityAndDeletesTheRest) {
  using T = Counted<1>;
  std::thread([] {
    std::vector<T*> objects;
    for (std::size_t i = 0; i < ObjectPool<T>::kCapacity + 10; ++i) {
      objects.push_back(ObjectPool<T>::Acquire());
    }
    for (T* o : objects) ObjectPool<T>::Release(o);
    EXPECT_EQ(T::live.load(), static_cast<int>(ObjectPool<T>::kCapacity));
  }).join();
  EXPECT_EQ(T::live.load(), 0);
}

TEST(ObjectPoolTest, ReleaseAfterTheCacheIsGoneDeletes) {
  using T = Counted<2>;
  // A thread_local constructed before the pool's cleanup is destroyed after it: its release at
  // thread exit must delete instead of caching into a cache nobody will empty.
  struct Holder {
    T* held = nullptr;
    ~Holder() {
      if (held != nullptr) ObjectPool<T>::Release(held);
    }
  };
  std::thread([] {
    thread_local Holder holder;
    holder.held = ObjectPool<T>::Acquire();
    ObjectPool<T>::Release(ObjectPool<T>::Acquire());  // sets up the cache after `holder`
  }).join();
  EXPECT_EQ(T::live.load(), 0);
}

TEST(ObjectPoolTest, ObjectsMayMoveBetweenThreads) {
  using T = Counted<3>;
  T* a = nullptr;
  std::thread([&] { a = ObjectPool<T>::Acquire(); }).join();
  std::thread([&] { ObjectPool<T>::Release(a); }).join();
  EXPECT_EQ(T::live.load(), 0);
}

}  // namespace
}  // namespace strata::allocation
