#include "layers/thread_cache_allocator.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "glog/logging.h"
#include "platform/spin_lock.h"

namespace strata::allocation {

// One thread's parked blocks, oldest first. Written by its thread under `lock`; visitors
// (Release, statistics, snapshots, the instance's destruction) take the same lock.
struct alignas(64) ThreadCacheAllocator::ThreadCache {
  platform::SpinLock lock;
  // Written under `lock`; the owner reads it without, to skip the lock when nothing is parked.
  std::atomic<int> count{0};
  std::size_t bytes = 0;
  // The owner's alone (see "Parking pays only when blocks come back" in the header).
  int credit = kMaxCredit;
  std::size_t last_free_key = 0;
  std::size_t keys[kSlots] = {};   // size classes
  std::size_t sizes[kSlots] = {};  // the blocks' size()
  Allocation* blocks[kSlots] = {};

  // Both under `lock`.
  void RemoveAt(int i) {
    const int n = count.load(std::memory_order_relaxed);
    for (int j = i + 1; j < n; ++j) {
      keys[j - 1] = keys[j];
      sizes[j - 1] = sizes[j];
      blocks[j - 1] = blocks[j];
    }
    count.store(n - 1, std::memory_order_relaxed);
  }
  int TakeAll(Allocation** out) {
    const int n = count.load(std::memory_order_relaxed);
    for (int i = 0; i < n; ++i) out[i] = blocks[i];
    count.store(0, std::memory_order_relaxed);
    bytes = 0;
    return n;
  }
};

// Owns the caches, which outlive the instance as long as a thread still refers to them.
struct ThreadCacheAllocator::Registry {
  absl::Mutex mu;
  ThreadCacheAllocator* layer ABSL_GUARDED_BY(mu) = nullptr;  // null once destroyed
  std::vector<std::unique_ptr<ThreadCache>> caches ABSL_GUARDED_BY(mu);
  std::vector<ThreadCache*> unused ABSL_GUARDED_BY(mu);  // of exited threads, for new ones

  ThreadCache* Acquire() {
    absl::MutexLock lock(&mu);
    if (!unused.empty()) {
      ThreadCache* c = unused.back();
      unused.pop_back();
      return c;
    }
    caches.push_back(std::make_unique<ThreadCache>());
    VLOG(6) << "thread_cache: cache for a new thread, " << caches.size() << " in all";
    return caches.back().get();
  }

  // The thread owning `c` exits: its blocks go down, the cache is kept for another thread.
  void Return(ThreadCache* c) {
    absl::MutexLock lock(&mu);
    if (layer != nullptr) layer->Flush(c);
    unused.push_back(c);
  }
};

namespace {

std::atomic<std::uint64_t> g_next_id{1};

// The thread's most recently used (instance id, cache) pairs, the latest first: the hot path
// compares one id. Trivially destructible, so reading it needs no TLS initialisation check.
constexpr int kRecent = 4;
struct Recent {
  struct Entry {
    std::uint64_t id;  // 0: empty (ids start at 1)
    ThreadCacheAllocator::ThreadCache* cache;
  };
  Entry entries[kRecent];
};
constinit thread_local Recent t_recent{};
constinit thread_local bool t_exited = false;

// Every cache the thread holds, handed back at its exit.
struct ThreadCaches {
  struct Entry {
    std::uint64_t id;
    std::shared_ptr<ThreadCacheAllocator::Registry> registry;
    ThreadCacheAllocator::ThreadCache* cache;
  };
  std::vector<Entry> entries;

  ~ThreadCaches() {
    t_recent = Recent{};
    t_exited = true;
    for (Entry& e : entries) e.registry->Return(e.cache);
  }
};

ThreadCaches& LocalThreadCaches() {
  thread_local ThreadCaches caches;
  return caches;
}

constexpr std::size_t RoundUp(std::size_t x, std::size_t a) { return (x + a - 1) & ~(a - 1); }

}  // namespace

ThreadCacheAllocator::ThreadCacheAllocator(std::shared_ptr<Allocator> underlying, Options options)
    : DecoratingAllocator(std::move(underlying), "ThreadCacheAllocator"),
      options_(options),
      max_block_(std::min(options.max_bytes, options.max_block_bytes)),
      registry_(std::make_shared<Registry>()),
      id_(g_next_id.fetch_add(1, std::memory_order_relaxed)) {
  if (options_.size_class == 0 || (options_.size_class & (options_.size_class - 1)) != 0) {
    throw std::invalid_argument(absl::StrCat(
        "ThreadCacheAllocator: size_class must be a power of two, got ", options_.size_class));
  }
  {
    absl::MutexLock lock(&registry_->mu);
    registry_->layer = this;
  }
  VLOG(4) << "thread_cache: over " << this->underlying().Name() << ", " << kSlots << " blocks and "
          << options_.max_bytes << " bytes per thread, blocks up to " << options_.max_block_bytes
          << " bytes, size class " << options_.size_class;
}

ThreadCacheAllocator::~ThreadCacheAllocator() {
  // Threads that still refer to the registry find it detached and keep nothing.
  absl::MutexLock lock(&registry_->mu);
  for (const auto& c : registry_->caches) Flush(c.get());
  registry_->layer = nullptr;
}

inline ThreadCacheAllocator::ThreadCache* ThreadCacheAllocator::Local() {
  if (const Recent::Entry& e = t_recent.entries[0]; e.id == id_) [[likely]]
    return e.cache;
  return LocalSlow();
}

ThreadCacheAllocator::ThreadCache* ThreadCacheAllocator::LocalSlow() {
  if (t_exited) return nullptr;  // a thread_local destructor frees at thread exit
  Recent::Entry* e = t_recent.entries;
  ThreadCache* cache = nullptr;
  int slot = kRecent - 1;  // replaced when not found: the least recently used
  for (int i = 1; i < kRecent; ++i) {
    if (e[i].id == id_) {
      cache = e[i].cache;
      slot = i;
      break;
    }
  }
  if (cache == nullptr) {
    ThreadCaches& tc = LocalThreadCaches();
    for (const auto& entry : tc.entries) {
      if (entry.id == id_) cache = entry.cache;
    }
    if (cache == nullptr) {
      cache = registry_->Acquire();
      tc.entries.push_back({id_, registry_, cache});
    }
  }
  for (int i = slot; i > 0; --i) e[i] = e[i - 1];
  e[0] = {id_, cache};
  return cache;
}

void ThreadCacheAllocator::Flush(ThreadCache* cache) {
  Allocation* blocks[kSlots];
  int n = 0;
  {
    std::lock_guard<platform::SpinLock> lock(cache->lock);
    n = cache->TakeAll(blocks);
  }
  for (int i = 0; i < n; ++i) underlying().Free(blocks[i]);
}

void ThreadCacheAllocator::FlushAll() {
  absl::MutexLock lock(&registry_->mu);
  for (const auto& c : registry_->caches) Flush(c.get());
}

// The hot paths handle the newest parked block and a free with room; the rest is out of line,
// so that they need no stack frame.
Allocation* ThreadCacheAllocator::AllocateImpl(std::size_t size) {
  ThreadCache* c = Local();
  if (c == nullptr) [[unlikely]]
    return AllocateSlow(size);
  const std::size_t key = RoundUp(size, options_.size_class);
  if (c->count.load(std::memory_order_relaxed) == 0) {
    // Nothing parked (parking off, or mixed sizes): straight down.
    if (c->credit <= 0 && key == c->last_free_key) [[unlikely]]
      c->credit = 1;  // a hit missed while parking was off: turn it on again
    Allocation* a = underlying().Allocate(size).release();
    a->set_requested_size(size);
    return a;
  }
  {
    c->lock.lock();
    const int top = c->count.load(std::memory_order_relaxed) - 1;
    if (top >= 0 && c->keys[top] == key && c->sizes[top] >= size) [[likely]] {
      Allocation* hit = c->blocks[top];
      c->bytes -= c->sizes[top];
      c->count.store(top, std::memory_order_relaxed);
      c->credit = std::min(c->credit + kHitCredit, kMaxCredit);
      c->lock.unlock();
      hit->set_requested_size(size);
      return hit;
    }
    c->lock.unlock();
  }
  return AllocateSlow(size);
}

Allocation* ThreadCacheAllocator::AllocateSlow(std::size_t size) {
  if (ThreadCache* c = Local(); c != nullptr) {
    const std::size_t key = RoundUp(size, options_.size_class);
    if (c->count.load(std::memory_order_relaxed) != 0) {
      Allocation* flushed[kSlots];
      int num_flushed = 0;
      {
        std::lock_guard<platform::SpinLock> lock(c->lock);
        for (int i = c->count.load(std::memory_order_relaxed) - 1; i >= 0; --i) {
          if (c->keys[i] == key && c->sizes[i] >= size) {
            Allocation* hit = c->blocks[i];
            c->bytes -= c->sizes[i];
            c->RemoveAt(i);
            c->credit = std::min(c->credit + kHitCredit, kMaxCredit);
            hit->set_requested_size(size);
            return hit;
          }
        }
        // A miss: the pool below must see every block this thread freed before it searches.
        num_flushed = c->TakeAll(flushed);
      }
      c->credit -= num_flushed;
      for (int i = 0; i < num_flushed; ++i) underlying().Free(flushed[i]);
    } else if (c->credit <= 0 && key == c->last_free_key) {
      c->credit = 1;  // a hit missed while parking was off: turn it on again
    }
  }
  Allocation* a = underlying().Allocate(size).release();
  a->set_requested_size(size);
  return a;
}

inline bool ThreadCacheAllocator::Parkable(const ThreadCache* c,
                                           const Allocation& allocation) const {
  return c != nullptr && c->credit > 0 &&
         (options_.cacheable == nullptr || options_.cacheable(allocation));
}

void ThreadCacheAllocator::FreeImpl(Allocation* allocation) {
  const std::size_t bytes = allocation->size();
  if (bytes <= max_block_) [[likely]] {
    ThreadCache* c = Local();
    if (c != nullptr && c->credit <= 0) {  // parking off: straight down
      c->last_free_key = RoundUp(allocation->requested_size(), options_.size_class);
      underlying().Free(allocation);
      return;
    }
    if (Parkable(c, *allocation)) [[likely]] {
      c->lock.lock();
      const int n = c->count.load(std::memory_order_relaxed);
      if (n != kSlots && c->bytes + bytes <= options_.max_bytes) [[likely]] {
        c->keys[n] = RoundUp(allocation->requested_size(), options_.size_class);
        c->sizes[n] = bytes;
        c->blocks[n] = allocation;
        c->bytes += bytes;
        c->count.store(n + 1, std::memory_order_relaxed);
        c->lock.unlock();
        return;
      }
      c->lock.unlock();
    }
  }
  FreeSlow(allocation);
}

void ThreadCacheAllocator::FreeSlow(Allocation* allocation) {
  const std::size_t bytes = allocation->size();
  ThreadCache* c = bytes <= max_block_ ? Local() : nullptr;
  if (!Parkable(c, *allocation)) {
    if (c != nullptr) {
      c->last_free_key = RoundUp(allocation->requested_size(), options_.size_class);
    }
    underlying().Free(allocation);
    return;
  }
  // Full: the oldest parked blocks make room.
  Allocation* evicted[kSlots];
  int num_evicted = 0;
  {
    std::lock_guard<platform::SpinLock> lock(c->lock);
    while (c->count.load(std::memory_order_relaxed) == kSlots ||
           c->bytes + bytes > options_.max_bytes) {
      evicted[num_evicted++] = c->blocks[0];
      c->bytes -= c->sizes[0];
      c->RemoveAt(0);
    }
    const int i = c->count.load(std::memory_order_relaxed);
    c->keys[i] = RoundUp(allocation->requested_size(), options_.size_class);
    c->sizes[i] = bytes;
    c->blocks[i] = allocation;
    c->bytes += bytes;
    c->count.store(i + 1, std::memory_order_relaxed);
  }
  for (int i = 0; i < num_evicted; ++i) underlying().Free(evicted[i]);
}

std::uint64_t ThreadCacheAllocator::ReleaseImpl(const platform::Place& place) {
  FlushAll();
  return underlying().Release(place);
}

std::size_t ThreadCacheAllocator::num_parked() const {
  std::size_t n = 0;
  absl::MutexLock lock(&registry_->mu);
  for (const auto& c : registry_->caches) {
    std::lock_guard<platform::SpinLock> cache_lock(c->lock);
    n += static_cast<std::size_t>(c->count.load(std::memory_order_relaxed));
  }
  return n;
}

void ThreadCacheAllocator::CollectStats(MemoryStats* stats) const {
  underlying().CollectStats(stats);
  absl::MutexLock lock(&registry_->mu);
  for (const auto& c : registry_->caches) {
    std::lock_guard<platform::SpinLock> cache_lock(c->lock);
    stats->thread_cache_blocks += c->count.load(std::memory_order_relaxed);
    stats->thread_cache_bytes += static_cast<std::int64_t>(c->bytes);
  }
}

void ThreadCacheAllocator::Snapshot(MemorySnapshot* snapshot) const {
  underlying().Snapshot(snapshot);
  absl::MutexLock lock(&registry_->mu);
  for (const auto& c : registry_->caches) {
    std::lock_guard<platform::SpinLock> cache_lock(c->lock);
    for (int i = 0; i < c->count.load(std::memory_order_relaxed); ++i)
      snapshot->Mark(c->blocks[i]->ptr(), BlockState::kThreadCache);
  }
}

}  // namespace strata::allocation
