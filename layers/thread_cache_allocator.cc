#include "layers/thread_cache_allocator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "allocation/reuse_credit.h"
#include "glog/logging.h"
#include "platform/asymmetric_fence.h"
#include "platform/thread_local_slots.h"

namespace strata::layers {

using allocation::Allocation;
using allocation::Allocator;
using allocation::BlockState;
using allocation::DecoratingAllocator;
using allocation::MemorySnapshot;
using allocation::MemoryStats;

// One thread's parked blocks. The slots are shared: the owner fills an empty slot with a plain
// release store, and anyone empties one with an exchange (the owner taking a block back; Release,
// the instance's destruction and thread exit flushing), so a block is taken exactly once and a
// parking free needs no read-modify-write. The owner's hit may instead take the newest block
// with a plain load and store inside its `busy` window (TakeNewest). The rest is the owner's
// alone and may lag behind slots emptied by others (an emptied slot is found by the owner's
// take, which then gets null).
struct alignas(64) ThreadCacheAllocator::ThreadCache {
  std::atomic<Allocation*> slots[kSlots] = {};
  // The owner is between a check of `remote_takers_` and the end of a plain take (TakeNewest).
  std::atomic<int> busy{0};
  std::atomic<std::size_t> sizes[kSlots] = {};  // the parked blocks' size(), for statistics
  // Their ptr(), for snapshots: another thread may take a block and reuse its record at any time,
  // so a snapshot reads these, never the records (a stale address marks a block cached that was
  // just taken: a snapshot taken while threads allocate is approximate anyway).
  std::atomic<void*> ptrs[kSlots] = {};
  // The owner's.
  std::size_t keys[kSlots] = {};   // size classes
  int order[kSlots] = {};          // slots in use, oldest first
  int count = 0;                   // entries of `order`
  std::uint32_t used = 0;          // the slots in `order`, as bits
  std::size_t bytes = 0;           // their sizes
  allocation::ReuseCredit credit;  // see "Parking pays only when blocks come back"

  // Owner: removes the entry order[i] and returns its slot.
  int Forget(int i) {
    const int slot = order[i];
    for (int j = i + 1; j < count; ++j) order[j - 1] = order[j];
    --count;
    used &= ~(1u << slot);
    bytes -= sizes[slot].load(std::memory_order_relaxed);
    return slot;
  }
  // Owner: the block of order[i] (null when someone else took it) and its entry removed.
  Allocation* TakeAt(int i) {
    return slots[Forget(i)].exchange(nullptr, std::memory_order_acquire);
  }
  // Owner: parks `a` in a free slot (there is one).
  void Park(Allocation* a, std::size_t key, std::size_t size) {
    const int slot = __builtin_ctz(~used);
    keys[slot] = key;
    sizes[slot].store(size, std::memory_order_relaxed);
    ptrs[slot].store(a->ptr(), std::memory_order_relaxed);
    slots[slot].store(a, std::memory_order_release);
    order[count++] = slot;
    used |= 1u << slot;
    bytes += size;
  }
  // Owner, or its thread at exit: forgets every entry.
  void Reset() {
    count = 0;
    used = 0;
    bytes = 0;
    credit.Reset();
  }
};

// Owns the caches, which outlive the instance as long as a thread still refers to them.
struct ThreadCacheAllocator::Registry {
  absl::Mutex mu;
  ThreadCacheAllocator* layer ABSL_GUARDED_BY(mu) = nullptr;  // null once destroyed
  std::atomic<bool> dead{false};  // set with `layer` null: threads then drop their cache lazily
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

  // The thread owning `c` exits (and calls this): its blocks go down, the cache is kept for
  // another thread.
  void Return(ThreadCache* c) {
    absl::MutexLock lock(&mu);
    if (layer != nullptr) layer->Flush(c);
    c->Reset();
    unused.push_back(c);
  }
  bool Dead() const { return dead.load(std::memory_order_acquire); }
};

namespace {

std::atomic<std::uint64_t> g_next_id{1};

struct ThreadCachesTag {};
// The thread's cache of each instance (one compare on the hot path).
using ThreadCaches = platform::ThreadLocalSlots<ThreadCachesTag, ThreadCacheAllocator::Registry,
                                                ThreadCacheAllocator::ThreadCache>;

constexpr std::size_t RoundUp(std::size_t x, std::size_t a) { return (x + a - 1) & ~(a - 1); }

}  // namespace

ThreadCacheAllocator::ThreadCacheAllocator(std::shared_ptr<Allocator> underlying, Options options)
    : DecoratingAllocator(std::move(underlying), kName),
      options_(options),
      max_block_(std::min(options_.max_bytes, options_.max_block_bytes)),
      registry_(std::make_shared<Registry>()),
      id_(g_next_id.fetch_add(1, std::memory_order_relaxed)),
      owner_plain_take_(options_.owner_plain_take && platform::AsymmetricFenceAvailable()),
      large_until_next_call_(options_.large_until_next_call && options_.max_bytes != 0) {
  if (options_.size_class == 0 || (options_.size_class & (options_.size_class - 1)) != 0) {
    throw std::invalid_argument(
        absl::StrCat(kName, ": size_class must be a power of two, got ", options_.size_class));
  }
  {
    absl::MutexLock lock(&registry_->mu);
    registry_->layer = this;
  }
  VLOG(4) << "thread_cache: over " << this->underlying().Name() << ", " << kSlots << " blocks and "
          << options_.max_bytes << " bytes per thread, blocks up to " << options_.max_block_bytes
          << " bytes" << (large_until_next_call_ ? " (larger ones until the next call)" : "")
          << ", size class " << options_.size_class << ", owner hits by "
          << (owner_plain_take_ ? "plain load and store" : "exchange");
}

ThreadCacheAllocator::~ThreadCacheAllocator() {
  // Threads that still refer to the registry find it detached and keep nothing.
  absl::MutexLock lock(&registry_->mu);
  FlushLarge();
  for (const auto& c : registry_->caches) Flush(c.get());
  registry_->layer = nullptr;
  registry_->dead.store(true, std::memory_order_release);
}

inline ThreadCacheAllocator::ThreadCache* ThreadCacheAllocator::Local() {
  return ThreadCaches::Get(id_, registry_);
}

int ThreadCacheAllocator::Flush(ThreadCache* cache) {
  int n = 0;
  for (auto& slot : cache->slots) {
    if (Allocation* a = slot.exchange(nullptr, std::memory_order_acq_rel)) {
      underlying().Free(a);
      ++n;
    }
  }
  return n;
}

bool ThreadCacheAllocator::FlushLarge() {
  Allocation* a = large_.exchange(nullptr, std::memory_order_acq_rel);
  if (a != nullptr) underlying().Free(a);
  return a != nullptr;
}

bool ThreadCacheAllocator::FlushAll() {
  absl::MutexLock lock(&registry_->mu);
  int flushed = FlushLarge() ? 1 : 0;
  if (!owner_plain_take_) {
    for (const auto& c : registry_->caches) flushed += Flush(c.get());
    return flushed != 0;
  }
  // Caches with nothing parked now need no handshake: a block parked after this look is as if
  // parked after the flush.
  bool any = false;
  for (const auto& c : registry_->caches) {
    for (const auto& slot : c->slots) any |= slot.load(std::memory_order_relaxed) != nullptr;
  }
  if (!any) return flushed != 0;
  // The cold side of TakeNewest's handshake: once the fence has run, an owner either sees
  // remote_takers_ and takes by exchange, or is inside its busy window, which we wait out.
  remote_takers_.fetch_add(1, std::memory_order_relaxed);
  if (!platform::HeavyFence()) [[unlikely]] {
    // Unordered: taking a block an owner may be taking too is not safe. Their own threads
    // flush them (a miss, thread exit).
    remote_takers_.fetch_sub(1, std::memory_order_relaxed);
    return flushed != 0;
  }
  for (const auto& c : registry_->caches) {
    if (OwnerLeftWindow(*c)) flushed += Flush(c.get());
  }
  remote_takers_.fetch_sub(1, std::memory_order_release);
  return flushed != 0;
}

// The window is a few instructions without calls: a preempted owner makes this yield. One that
// never leaves it (stopped in a debugger; a thread that was inside it when the process forked)
// makes the flush give up on that cache after kMaxWindowWait, rather than hang: leaving blocks
// parked is always safe, their own thread flushes them.
bool ThreadCacheAllocator::OwnerLeftWindow(const ThreadCache& c) {
  if (c.busy.load(std::memory_order_acquire) == 0) [[likely]]
    return true;
  const auto deadline = std::chrono::steady_clock::now() + kMaxWindowWait;
  for (int spins = 0; c.busy.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < 64) continue;
    if (std::chrono::steady_clock::now() > deadline) {
      LOG_FIRST_N(WARNING, 1) << "thread_cache: a thread stayed " << kMaxWindowWait.count()
                              << " ms inside its take window; its cache is not flushed";
      return false;
    }
    std::this_thread::yield();
  }
  return true;
}

// The owner's hit on its newest block. Without the handshake (or while another thread flushes)
// it takes by exchange; with it, a plain load and store: the one locked instruction of the
// cached pair was about a sixth of its time.
inline Allocation* ThreadCacheAllocator::TakeNewest(ThreadCache* c) {
  if (!owner_plain_take_) return c->TakeAt(c->count - 1);
  c->busy.store(1, std::memory_order_relaxed);
  platform::LightFence();
  if (remote_takers_.load(std::memory_order_acquire) != 0) [[unlikely]] {
    c->busy.store(0, std::memory_order_release);
    return c->TakeAt(c->count - 1);
  }
  std::atomic<Allocation*>& slot = c->slots[c->Forget(c->count - 1)];
  if (options_.take_window_hook != nullptr) [[unlikely]]
    options_.take_window_hook();
  Allocation* hit = slot.load(std::memory_order_relaxed);
  slot.store(nullptr, std::memory_order_relaxed);
  c->busy.store(0, std::memory_order_release);
  return hit;
}

inline Allocation* ThreadCacheAllocator::AllocateBelow(std::size_t size) {
  // Blocks other threads keep may be what the pool lacks: the pool asks for them before it
  // grows (GiveBackForGrowth).
  Allocation* a = underlying().Allocate(size).release();
  a->set_requested_size(size);
  return a;
}

// The hot paths handle the newest parked block and a free with room; the rest is out of line,
// so that they need no stack frame.
Allocation* ThreadCacheAllocator::AllocateImpl(std::size_t size) {
  if (large_.load(std::memory_order_relaxed) != nullptr) [[unlikely]] {
    if (Allocation* hit = TakeLarge(size); hit != nullptr) return hit;
  }
  ThreadCache* c = Local();
  if (c == nullptr) [[unlikely]]
    return AllocateSlow(size);
  const std::size_t key = RoundUp(size, options_.size_class);
  if (c->count == 0) {
    // Nothing parked (parking off, or mixed sizes): straight down.
    c->credit.Missed(key);  // a hit missed while parking was off turns it on again
    return AllocateBelow(size);
  }
  const int top = c->order[c->count - 1];
  if (c->keys[top] == key && c->sizes[top].load(std::memory_order_relaxed) >= size) [[likely]] {
    if (Allocation* hit = TakeNewest(c); hit != nullptr) [[likely]] {
      c->credit.Hit();
      hit->set_requested_size(size);
      return hit;
    }
  }
  return AllocateSlow(size);
}

// The last call on the instance parked a large block: a request of its class takes it back; any
// other sends it down first (null). Whoever empties the slot first has it: another call, a flush.
Allocation* ThreadCacheAllocator::TakeLarge(std::size_t size) {
  Allocation* a = large_.exchange(nullptr, std::memory_order_acq_rel);
  if (a == nullptr) return nullptr;
  if (RoundUp(a->requested_size(), options_.size_class) == RoundUp(size, options_.size_class) &&
      a->size() >= size) {
    if (ThreadCache* c = Local(); c != nullptr) c->credit.Hit();
    a->set_requested_size(size);
    return a;
  }
  underlying().Free(a);
  return nullptr;
}

Allocation* ThreadCacheAllocator::AllocateSlow(std::size_t size) {
  if (ThreadCache* c = Local(); c != nullptr) {
    const std::size_t key = RoundUp(size, options_.size_class);
    for (int i = c->count - 1; i >= 0; --i) {
      const int slot = c->order[i];
      if (c->keys[slot] == key && c->sizes[slot].load(std::memory_order_relaxed) >= size) {
        if (Allocation* hit = c->TakeAt(i); hit != nullptr) {
          c->credit.Hit();
          hit->set_requested_size(size);
          return hit;
        }
      }
    }
    if (c->count != 0) {
      // A miss: the pool below must see every block this thread freed before it searches.
      int flushed = 0;
      while (c->count != 0) {
        if (Allocation* a = c->TakeAt(0); a != nullptr) {
          underlying().Free(a);
          ++flushed;
        }
      }
      c->credit.Unused(flushed);
    } else {
      c->credit.Missed(key);  // a hit missed while parking was off turns it on again
    }
  }
  return AllocateBelow(size);
}

inline bool ThreadCacheAllocator::Parkable(const ThreadCache* c,
                                           const Allocation& allocation) const {
  return c != nullptr && c->credit.parks() &&
         (options_.cacheable == nullptr || options_.cacheable(allocation));
}

void ThreadCacheAllocator::FreeImpl(Allocation* allocation) {
  // A large block parked by the last call goes down before anything else happens here.
  if (large_.load(std::memory_order_relaxed) != nullptr) [[unlikely]]
    FlushLarge();
  const std::size_t bytes = allocation->size();
  ThreadCache* c = Local();
  if (bytes > max_block_) [[unlikely]] {
    FreeLarge(c, allocation);
    return;
  }
  if (!Parkable(c, *allocation)) [[unlikely]] {
    // Parking off (remembered, to turn it on again), a refused block, or thread exit.
    if (c != nullptr) c->credit.Refused(RoundUp(allocation->requested_size(), options_.size_class));
    underlying().Free(allocation);
    return;
  }
  if (c->count != kSlots && c->bytes + bytes <= options_.max_bytes) [[likely]] {
    c->Park(allocation, RoundUp(allocation->requested_size(), options_.size_class), bytes);
    return;
  }
  EvictAndPark(c, allocation);
}

void ThreadCacheAllocator::FreeLarge(ThreadCache* c, Allocation* allocation) {
  if (!large_until_next_call_ || !Parkable(c, *allocation)) {
    underlying().Free(allocation);
    return;
  }
  // Outside the bytes bound, in the instance's one slot: it stays only until the next call on
  // the instance, from any thread (TakeLarge). One from another thread meanwhile goes down.
  // It counts among the freeing thread's kSlots blocks, as when it parked in the thread's own
  // slots: one thread's calls reach the pool as before (the 39 replays of rp3 unchanged).
  if (c->count == kSlots) {
    if (Allocation* a = c->TakeAt(0); a != nullptr) underlying().Free(a);
  }
  large_bytes_.store(allocation->size(), std::memory_order_relaxed);
  large_ptr_.store(allocation->ptr(), std::memory_order_relaxed);
  if (Allocation* a = large_.exchange(allocation, std::memory_order_acq_rel); a != nullptr) {
    underlying().Free(a);
  }
}

void ThreadCacheAllocator::EvictAndPark(ThreadCache* c, Allocation* allocation) {
  const std::size_t bytes = allocation->size();
  while (c->count == kSlots || c->bytes + bytes > options_.max_bytes) {
    if (Allocation* a = c->TakeAt(0); a != nullptr) underlying().Free(a);
  }
  c->Park(allocation, RoundUp(allocation->requested_size(), options_.size_class), bytes);
}

std::uint64_t ThreadCacheAllocator::ReleaseImpl(const platform::Place& place) {
  FlushAll();
  return underlying().Release(place);
}

std::size_t ThreadCacheAllocator::num_parked() const {
  std::size_t n = large_.load(std::memory_order_acquire) != nullptr ? 1 : 0;
  absl::MutexLock lock(&registry_->mu);
  for (const auto& c : registry_->caches) {
    for (const auto& slot : c->slots) n += slot.load(std::memory_order_acquire) != nullptr;
  }
  return n;
}

void ThreadCacheAllocator::CollectStats(MemoryStats* stats) const {
  underlying().CollectStats(stats);
  if (large_.load(std::memory_order_acquire) != nullptr) {
    ++stats->thread_cache_blocks;
    stats->thread_cache_bytes +=
        static_cast<std::int64_t>(large_bytes_.load(std::memory_order_relaxed));
  }
  absl::MutexLock lock(&registry_->mu);
  for (const auto& c : registry_->caches) {
    for (int i = 0; i < kSlots; ++i) {
      if (c->slots[i].load(std::memory_order_acquire) == nullptr) continue;
      ++stats->thread_cache_blocks;
      stats->thread_cache_bytes +=
          static_cast<std::int64_t>(c->sizes[i].load(std::memory_order_relaxed));
    }
  }
}

void ThreadCacheAllocator::Snapshot(MemorySnapshot* snapshot) const {
  underlying().Snapshot(snapshot);
  absl::MutexLock lock(&registry_->mu);
  // Addresses only (ThreadCache::ptrs): the records may be taken and reused meanwhile.
  if (large_.load(std::memory_order_acquire) != nullptr) {
    snapshot->Mark(large_ptr_.load(std::memory_order_relaxed), BlockState::kThreadCache);
  }
  for (const auto& c : registry_->caches) {
    for (int i = 0; i < kSlots; ++i) {
      if (c->slots[i].load(std::memory_order_acquire) != nullptr) {
        snapshot->Mark(c->ptrs[i].load(std::memory_order_relaxed), BlockState::kThreadCache);
      }
    }
  }
}

}  // namespace strata::layers
