// ObjectPool<T>: recycles the small bookkeeping objects (Allocation subclasses, blocks) that
// layers create per call, so the steady state of allocate/free performs no heap allocation.
//
// Each thread keeps up to kCapacity free objects of each type; an object released on another
// thread than the one that acquired it simply joins that thread's cache. Objects are reused as
// they are: callers reinitialise them after Acquire(). Thread-safe without locks.
//
// Hot path: the cache is a constant-initialised, trivially destructible thread_local, so
// Acquire/Release are a TLS access, a compare and a load or store — no initialisation guard.
// The objects a thread still caches are deleted at its exit by a separate thread_local, set up
// by the first Release that caches anything; after it ran, Release deletes.
#pragma once

#include <cstddef>

namespace strata::allocation {

template <typename T>
class ObjectPool {
 public:
  static constexpr std::size_t kCapacity = 1024;

  static T* Acquire() {
    Cache& cache = cache_;
    if (cache.count > 0) [[likely]]
      return cache.items[--cache.count];
    return new T();
  }

  static void Release(T* object) {
    Cache& cache = cache_;
    if (cache.count < cache.limit) [[likely]] {
      cache.items[cache.count++] = object;
      return;
    }
    ReleaseSlow(object);
  }

 private:
  struct Cache {
    T* items[kCapacity];
    std::size_t count;
    // kCapacity while the cleaner is registered, 0 before and after it: one compare on Release
    // covers "full", "not set up yet" and "thread exiting".
    std::size_t limit;
    bool destroyed;
  };
  struct Cleaner {
    ~Cleaner() {
      Cache& cache = cache_;
      for (std::size_t i = 0; i < cache.count; ++i) delete cache.items[i];
      cache.count = 0;
      cache.limit = 0;
      cache.destroyed = true;
    }
  };

  [[gnu::noinline]] static void ReleaseSlow(T* object) {
    Cache& cache = cache_;
    if (cache.limit == 0 && !cache.destroyed) {
      thread_local Cleaner cleaner;  // registers the exit-time cleanup once per thread
      (void)cleaner;
      cache.limit = kCapacity;
      cache.items[cache.count++] = object;
      return;
    }
    delete object;
  }

  static inline thread_local constinit Cache cache_{};
};

}  // namespace strata::allocation
