// ThreadCacheAllocator: a bounded per-thread front cache over a chain (tcmalloc's and mimalloc's
// per-thread caches, scaled down to what a device allocator needs). A free parks the block in
// the freeing thread's cache; the next allocation of its size class on that thread takes it
// back without reaching the layers below, so the common alloc/free loop of one thread touches no
// shared line: no pool lock, no shared counter.
//
// Policy
// - Size class: the request rounded up to `Options::size_class` bytes. A parked block is handed
//   out again only for a request of its class that it holds (its size() >= the request); the
//   newest parked block of the class goes first.
// - Bounded: at most kSlots blocks and Options::max_bytes bytes per thread (and per instance).
//   A block above max_bytes or max_block_bytes parks only with Options::large_until_next_call,
//   while parking pays (below), in one slot of the instance, and only until the next call on
//   the instance from any thread: taken back by that call when it asks for the block's class,
//   freed down before it otherwise. A large buffer freed and asked for again thus skips the
//   pool, which sees neither call (and the thread's smaller parked blocks stay, where that
//   request's miss would have flushed them); after any other call the pool has seen the free
//   just before it, as without parking. (Until the freeing thread's own next call instead, a
//   block freed by PyTorch's autograd thread at the end of a backward pass stayed hidden from
//   the main thread's optimizer step and next forward: gpt2_train end to end held 1.028 of its
//   peak instead of 1.004.) Parking past a bound frees the oldest parked blocks first.
// - Flushed (the parked blocks go down, oldest first, as if freed then): on a miss of that
//   thread (before the request goes down: a pool below never grows, nor searches, while a
//   thread holds blocks it could have coalesced, so single-threaded placement is the pool's
//   own); for every thread when the pool below is about to grow (it calls GiveBackForGrowth,
//   which the chain builder registers with it), on Release (which also covers out-of-memory
//   recovery, EmptyCache and garbage collection, all of which release) and at destruction; for
//   a thread at its exit.
// - Parking pays only when blocks come back (mixed sizes flush more than they hit): each thread
//   keeps an allocation::ReuseCredit (reuse_credit.h), keyed by size class.
// - Streams: one instance serves one chain, hence one stream. A free that `cacheable` refuses
//   (the facade: a block recorded on other streams, whose reuse must wait for their events)
//   goes down at once; a parked block is thus always reusable on its stream at once.
// - Frees from any thread: a block allocated on one thread and freed on another parks in the
//   freeing thread's cache.
//
// Statistics: the layers above count a parked block as freed (it is neither allocated nor
// active); the pools below still hold it, as allocated. CollectStats forwards, then reports the
// parked blocks and bytes (thread_cache_blocks / thread_cache_bytes); Snapshot marks them
// kThreadCache.
//
// Thread safety: every call may run concurrently from any thread. A thread's cache is a few
// atomic slots: its thread fills an empty one with a plain store, and whoever else takes a block
// out (Release, destruction or thread exit flushing; the thread itself outside a hit) exchanges
// it, so each block is taken once and nothing locks. The large block's slot is emptied by an
// exchange only, by whoever comes first. The list of caches is guarded by an absl::Mutex taken
// only when a thread first uses the instance, at thread exit, and by the visits of every thread's
// cache (Release, the pool below about to grow, Snapshot, the statistics). Hot path: a load of the
// large block's slot, a thread-local lookup, a compare with the newest parked block, and no
// read-modify-write: a hit takes its block with a plain load and store inside a window that a flush
// from another thread waits out, ordered by an asymmetric fence (platform/asymmetric_fence.h: the
// flushing thread pays a membarrier system call, only when some cache holds a block). A flush never
// hangs on a thread that does not leave its window (stopped, or gone in a forked child): after
// kMaxWindowWait it leaves that thread's cache as it is. Where that fence is not available, or
// Options::owner_plain_take is off, a hit exchanges the slot instead. The flushes of Release and
// thread exit give the blocks back in slot order, not free order; Snapshot and the statistics are
// consistent when no other thread allocates or frees meanwhile.
//
// Throws std::invalid_argument for a null underlying allocator or bad options; whatever the
// layer below throws on a miss (a flushed block is never lost: it went down before the miss).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "allocation/decorating_allocator.h"

namespace strata::layers {

class ThreadCacheAllocator : public allocation::DecoratingAllocator {
 public:
  static constexpr char kName[] = "thread_cache";
  // Blocks parked per thread at most.
  static constexpr int kSlots = 8;
  // How long a flush waits for another thread to leave its take window (see "Thread safety").
  static constexpr std::chrono::milliseconds kMaxWindowWait{500};

  using CacheablePredicate = bool (*)(const allocation::Allocation&);
  struct Options {
    // Bytes parked per thread at most; 0 parks nothing (a pass-through).
    std::size_t max_bytes = std::size_t{16} << 20;
    // Larger blocks are parked only as large_until_next_call says. Small blocks are where the
    // pair's cost shows; a large block parked uncoalesced changes what the pool below can place
    // (peaks on real traces).
    std::size_t max_block_bytes = std::size_t{1} << 20;
    // A block above max_block_bytes (or max_bytes) parks until the next call on the instance,
    // from any thread, outside the bytes bound: that call takes it back if it asks for its
    // class, and frees it down first otherwise. Right over a pool whose own quick reuse would hand
    // the same block back (the virtual-memory pool; see the chain builder); over one that places it
    // anew (the chunk pool's best fit), it changes placements.
    bool large_until_next_call = false;
    // Requests are grouped by this rounding (a power of two).
    std::size_t size_class = 512;
    // Whether a freed block may be parked; null: every block may.
    CacheablePredicate cacheable = nullptr;
    // A hit takes its block without a read-modify-write where the asymmetric fence is
    // available (see "Thread safety"); false always exchanges (tests of both paths).
    bool owner_plain_take = true;
    // Tests only: called inside the owner's window of a plain take, before it reads the slot.
    void (*take_window_hook)() = nullptr;
  };

  ThreadCacheAllocator(std::shared_ptr<allocation::Allocator> underlying, Options options);
  ~ThreadCacheAllocator() override;
  ThreadCacheAllocator(const ThreadCacheAllocator&) = delete;
  ThreadCacheAllocator& operator=(const ThreadCacheAllocator&) = delete;

  const char* Name() const override { return kName; }

  void CollectStats(allocation::MemoryStats* stats) const override;
  void Snapshot(allocation::MemorySnapshot* snapshot) const override;

  // For the pool below, before it grows (AutoGrowthBestFitAllocator::SetBeforeGrowth, with this
  // instance as `self`; VirtualMemoryPool::AddBeforeGrowth): every thread's parked blocks go down
  // first, so that they can make room. Returns whether any block went down. Called outside the
  // pool's lock; the instance must outlive the pool's allocations.
  static bool GiveBackForGrowth(void* self) {
    return static_cast<ThreadCacheAllocator*>(self)->FlushAll();
  }

  // Parks of every thread (introspection, tests).
  std::size_t num_parked() const;
  // Whether a hit takes its block without a read-modify-write (see "Thread safety").
  bool owner_plain_take() const { return owner_plain_take_; }

  struct ThreadCache;
  struct Registry;

 protected:
  // noinline: keeps GCC from speculatively inlining the layer into itself where it calls the
  // layer below (which "might" be the same class).
  [[gnu::noinline]] allocation::Allocation* AllocateImpl(std::size_t size) override;
  [[gnu::noinline]] void FreeImpl(allocation::Allocation* allocation) override;
  std::uint64_t ReleaseImpl(const platform::Place& place) override;

 private:
  friend struct Registry;
  ThreadCache* Local();
  bool Parkable(const ThreadCache* c, const allocation::Allocation& allocation) const;
  // The owner's hit: takes the newest parked block (null when a flush took it).
  allocation::Allocation* TakeNewest(ThreadCache* c);
  // A flush from another thread: waits (at most kMaxWindowWait) for c's owner to leave its take
  // window; false when it did not.
  static bool OwnerLeftWindow(const ThreadCache& c);
  [[gnu::noinline]] allocation::Allocation* AllocateSlow(std::size_t size);
  // Large blocks (above max_block_): out of line, so that the small blocks' paths stay short.
  // The parked large block if it suits a request of `size` bytes; else it goes down (null).
  [[gnu::noinline]] allocation::Allocation* TakeLarge(std::size_t size);
  // Frees the parked large block down, if any; returns whether there was one.
  [[gnu::noinline]] bool FlushLarge();
  [[gnu::noinline]] void FreeLarge(ThreadCache* c, allocation::Allocation* allocation);
  // The cache is full: the oldest parked blocks go down to make room for `allocation`.
  [[gnu::noinline]] void EvictAndPark(ThreadCache* c, allocation::Allocation* allocation);
  // Takes every block out of `cache` and frees them down, oldest first; returns how many.
  int Flush(ThreadCache* cache);
  // Flushes every thread's cache; returns whether any block went down.
  bool FlushAll();
  // A miss of `size` bytes goes down (the pool asks for the other threads' blocks before it
  // grows: GiveBackForGrowth).
  allocation::Allocation* AllocateBelow(std::size_t size);

  const Options options_;
  const std::size_t max_block_;  // the largest block that may park
  const std::shared_ptr<Registry> registry_;
  const std::uint64_t id_;  // unique, never reused: keys the thread-local lookups
  const bool owner_plain_take_;
  const bool large_until_next_call_;  // and max_bytes != 0 (0 parks nothing)
  // Threads flushing other threads' caches now (FlushAll); read by every hit, written rarely.
  alignas(64) std::atomic<int> remote_takers_{0};
  // The large block parked until the next call on the instance, by any thread
  // (large_until_next_call; null: none), and its size() for the statistics. Read by every call.
  alignas(64) std::atomic<allocation::Allocation*> large_{nullptr};
  std::atomic<std::size_t> large_bytes_{0};
  std::atomic<void*> large_ptr_{nullptr};  // its ptr(), for snapshots (see ThreadCache::ptrs)
};

}  // namespace strata::layers
