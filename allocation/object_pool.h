// ObjectPool<T>: recycles the small bookkeeping objects (Allocation subclasses, blocks) that
// layers create per call, so the steady state of allocate/free performs no heap allocation.
//
// Each thread keeps up to kCapacity free objects of each type; an object released on another
// thread than the one that acquired it simply joins that thread's cache. Objects are reused as
// they are: callers reinitialise them after Acquire(). Thread-safe without locks.
#pragma once

#include <cstddef>

namespace strata::allocation {

template <typename T>
class ObjectPool {
 public:
  static constexpr std::size_t kCapacity = 1024;

  static T* Acquire() {
    Cache& cache = LocalCache();
    if (cache.count > 0) return cache.items[--cache.count];
    return new T();
  }

  static void Release(T* object) {
    Cache& cache = LocalCache();
    if (cache.count < kCapacity && !cache.destroyed) {
      cache.items[cache.count++] = object;
    } else {
      delete object;
    }
  }

 private:
  struct Cache {
    T* items[kCapacity];
    std::size_t count = 0;
    bool destroyed = false;
    ~Cache() {
      for (std::size_t i = 0; i < count; ++i) delete items[i];
      count = 0;
      destroyed = true;
    }
  };
  static Cache& LocalCache() {
    thread_local Cache cache;
    return cache;
  }
};

}  // namespace strata::allocation
