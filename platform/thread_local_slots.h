// ThreadLocalSlots: each thread's own object of each instance of a layer (a statistics shard, a
// front cache), found by the instance's id.
//
// - Hot path (Get): one compare. The thread's most recently used (id, object) pairs sit in a
//   small thread_local array, the latest first. It is trivially destructible and constant
//   initialised, so reading it needs no TLS initialisation check.
// - Miss (GetSlow): the rest of that array, then the thread's full list; otherwise an object is
//   acquired from the instance's registry and listed. The found pair moves to the front.
// - Thread exit: the list's destructor hands every object back to its registry
//   (Registry::Return). From then on lookups return null (a thread_local destructor may still
//   allocate or free: the caller then borrows an object for one call).
// - A long-lived thread does not keep the instances it outlives: when it acquires an object, it
//   drops the entries of registries that report themselves dead (Registry::Dead), handing their
//   objects back first.
//
// Registry: `T* Acquire()`, `void Return(T*)` (both thread-safe, and safe after the instance
// died: the list holds the registry alive), `bool Dead() const`. Ids are unique per Tag, never
// reused, and never 0 (0 marks an empty entry). Tag keeps the thread_local state of different
// users apart.
// Thread safety: a thread's slots are read and written by that thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace strata::platform {

template <typename Tag, typename Registry, typename T, int kRecent = 4>
class ThreadLocalSlots {
 public:
  // The thread's object for instance `id` of `registry`; null only at thread exit.
  [[gnu::always_inline]] static T* Get(std::uint64_t id,
                                       const std::shared_ptr<Registry>& registry) {
    if (const Entry& e = recent_.entries[0]; e.id == id) [[likely]]
      return NonNull(e.object);
    return GetSlow(id, registry);
  }

  // The object when `id` is the thread's most recently used instance, else null (GetSlow then
  // finds it): for callers that keep their own miss path out of line.
  [[gnu::always_inline]] static T* Recent(std::uint64_t id) {
    const Entry& e = recent_.entries[0];
    return e.id == id ? NonNull(e.object) : nullptr;
  }

  // Get's miss path, out of line.
  [[gnu::noinline]] static T* GetSlow(std::uint64_t id, const std::shared_ptr<Registry>& registry) {
    if (exited_) return nullptr;
    Entry* e = recent_.entries;
    T* object = nullptr;
    int slot = kRecent - 1;  // replaced when not found: the least recently used
    for (int i = 1; i < kRecent; ++i) {
      if (e[i].id == id) {
        object = e[i].object;
        slot = i;
        break;
      }
    }
    if (object == nullptr) object = FromList(id, registry);
    for (int i = slot; i > 0; --i) e[i] = e[i - 1];  // the others keep their order
    e[0] = {id, object};
    return object;
  }

 private:
  // A listed entry always has an object: telling the compiler lets it drop the caller's null test
  // on the hot path.
  [[gnu::always_inline]] static T* NonNull(T* object) {
    if (object == nullptr) __builtin_unreachable();
    return object;
  }

  struct Entry {
    std::uint64_t id;  // 0: empty
    T* object;
  };
  struct RecentArray {
    Entry entries[kRecent];
  };
  struct Owned {
    std::uint64_t id;
    std::shared_ptr<Registry> registry;
    T* object;
  };
  // Every object the thread holds, handed back at its exit.
  struct List {
    std::vector<Owned> entries;
    ~List() {
      recent_ = RecentArray{};
      exited_ = true;
      for (Owned& o : entries) o.registry->Return(o.object);
    }
  };

  static T* FromList(std::uint64_t id, const std::shared_ptr<Registry>& registry) {
    thread_local List list;
    for (const Owned& o : list.entries) {
      if (o.id == id) return o.object;
    }
    std::erase_if(list.entries, [](const Owned& o) {
      if (!o.registry->Dead()) return false;
      for (Entry& e : recent_.entries) {
        if (e.id == o.id) e = Entry{};
      }
      o.registry->Return(o.object);
      return true;
    });
    T* object = registry->Acquire();
    list.entries.push_back({id, registry, object});
    return object;
  }

  static constinit inline thread_local RecentArray recent_{};
  static constinit inline thread_local bool exited_ = false;
};

}  // namespace strata::platform
