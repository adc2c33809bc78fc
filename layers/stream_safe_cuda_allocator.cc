#include "layers/stream_safe_cuda_allocator.h"

#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "allocation/bad_alloc.h"
#include "allocation/object_pool.h"
#include "glog/logging.h"

namespace strata::layers {

using allocation::Allocation;
using allocation::Allocator;
using allocation::BlockState;
using allocation::DecoratingAllocator;
using allocation::kAggregate;
using allocation::kNumStatPools;
using allocation::MemorySnapshot;
using allocation::MemoryStats;
using allocation::ObjectPool;
using allocation::PoolOf;
using allocation::StatArray;
using allocation::StatValue;

namespace {
// Added to pending_events_ of an allocation that must never be reused (its work could not be
// waited for): it stays leaked rather than risk corruption.
constexpr int kLeaked = 1 << 28;

// Per-allocation logging, out of line: the hot paths then need no stack frame for it.
[[gnu::noinline, gnu::cold]] void LogAllocate(const Allocation& a, platform::Stream stream) {
  VLOG(10) << "stream_safe_cuda: allocate " << a.size() << " at " << a.ptr() << " on " << stream;
}
[[gnu::noinline, gnu::cold]] void LogFree(const Allocation& a) {
  VLOG(10) << "stream_safe_cuda: free " << a.size() << " at " << a.ptr();
}

}  // namespace

inline void StreamSafeCUDAAllocator::FreeNow(StreamSafeCUDAAllocation* a) {
  if (VLOG_IS_ON(10)) [[unlikely]]
    LogFree(*a);
  Allocation* block = a->underlying_;
  ObjectPool<StreamSafeCUDAAllocation>::Release(a);
  underlying().Free(block);  // back down the chain (its top decorator is the layer below)
}

StreamSafeCUDAAllocator::StreamSafeCUDAAllocator(std::shared_ptr<Allocator> underlying,
                                                 platform::DeviceRuntime* runtime,
                                                 platform::Place place, platform::Stream stream)
    : DecoratingAllocator(std::move(underlying), kName),
      runtime_(runtime),
      place_(place),
      stream_(stream) {
  if (runtime_ == nullptr) {
    throw std::invalid_argument(std::string(kName) + ": the device runtime is null");
  }
  free_events_.reserve(16);
  VLOG(4) << "stream_safe_cuda: allocator for " << place_ << " " << stream_ << " over "
          << this->underlying().Name();
}

StreamSafeCUDAAllocator::~StreamSafeCUDAAllocator() {
  // Take every pending queue; nobody may use the allocator concurrently with its destruction.
  absl::flat_hash_map<platform::Stream, StreamQueue> queues;
  {
    std::lock_guard<platform::SpinLock> lock(lock_);
    queues.swap(queues_);
    num_pending_ = 0;
    has_pending_.store(false, std::memory_order_relaxed);
  }
  std::size_t synced = 0, leaked = 0;
  StreamSafeCUDAAllocation* ready = nullptr;
  for (auto& [stream, queue] : queues) {
    for (StreamUse* use = queue.head; use != nullptr;) {
      StreamUse* next = use->next;
      StreamSafeCUDAAllocation* owner = use->owner;
      try {
        // The one synchronization of this layer: the blocks must not go back to the pool (which
        // outlives us) while another stream may still use them.
        if (!runtime_->QueryEvent(use->event)) {
          runtime_->SynchronizeEvent(use->event);
          ++synced;
        }
      } catch (const std::exception& e) {
        LOG(ERROR) << "stream_safe_cuda: cannot wait for " << use->stream
                   << " while destroying the allocator of " << place_ << " " << stream_ << ": "
                   << e.what() << "; leaking the block at " << owner->ptr();
        owner->pending_events_ += kLeaked;
        ++leaked;
      }
      free_events_.push_back(use->event);
      use->event = platform::Event{};
      if (--owner->pending_events_ == 0) {
        owner->next_ready_ = ready;
        ready = owner;
      }
      use = next;
    }
  }
  while (ready != nullptr) {
    StreamSafeCUDAAllocation* next = ready->next_ready_;
    FreeAfterPending(ready);
    ready = next;
  }
  for (platform::Event event : free_events_) {
    try {
      runtime_->DestroyEvent(event);
    } catch (const std::exception& e) {
      LOG(ERROR) << "stream_safe_cuda: DestroyEvent failed: " << e.what();
    }
  }
  VLOG(2) << "stream_safe_cuda: destroyed allocator of " << place_ << " " << stream_ << " ("
          << synced << " event sync(s), " << free_events_.size() << " event(s) destroyed, "
          << leaked << " leaked)";
}

platform::Stream StreamSafeCUDAAllocator::HostOwner() {
  static char tag;  // an address no CUDA stream has
  return platform::Stream{&tag};
}

Allocation* StreamSafeCUDAAllocator::AllocateImpl(std::size_t size) {
  // Common path: one relaxed load when nothing is pending.
  if (has_pending_.load(std::memory_order_relaxed)) [[unlikely]]
    Reclaim(/*blocking=*/false);
  // The block first: a BadAlloc from below leaves nothing to undo.
  Allocation* block = underlying().Allocate(size).release();
  StreamSafeCUDAAllocation* a = nullptr;
  try {
    a = ObjectPool<StreamSafeCUDAAllocation>::Acquire();
  } catch (...) {
    underlying().Free(block);
    throw;
  }
  a->Init(block, stream_);
  if (VLOG_IS_ON(10)) [[unlikely]]
    LogAllocate(*a, stream_);
  return a;
}

void StreamSafeCUDAAllocator::FreeImpl(Allocation* allocation) {
  auto* a = static_cast<StreamSafeCUDAAllocation*>(allocation);
  // Common path: no recorded stream (RecordStream must not race with the free).
  if (a->uses_.empty()) [[likely]] {
    FreeNow(a);
    return;
  }
  FreeWithEvents(a);
}

void StreamSafeCUDAAllocator::DropEndedUses(StreamSafeCUDAAllocation* a) {
  const bool owner_ended = stream_ == HostOwner() || ended_->Contains(stream_);
  std::size_t kept = 0;
  for (std::size_t i = 0; i < a->uses_.size(); ++i) {
    const bool ended = ended_->With(a->uses_[i].stream, [&](platform::Event fence) {
      if (runtime_->QueryEvent(fence)) return;  // its work is done
      if (owner_ended) {
        VLOG(1) << "stream_safe_cuda: the free of " << a->ptr() << " waits (host) for ended "
                << a->uses_[i].stream;
        runtime_->SynchronizeEvent(fence);
      } else {
        runtime_->StreamWaitEvent(stream_, fence);  // the block's next user comes after it
      }
    });
    if (!ended) a->uses_[kept++] = a->uses_[i];
  }
  a->uses_.resize(kept);
}

void StreamSafeCUDAAllocator::FreeWithEvents(StreamSafeCUDAAllocation* a) {
  if (ended_ != nullptr) {  // the facade's layers have it; a lookup is one load until a stream ends
    try {
      DropEndedUses(a);
    } catch (const std::exception& e) {
      LOG(WARNING) << "stream_safe_cuda: cannot order the free of " << a->ptr() << " on " << place_
                   << " after an ended stream: " << e.what()
                   << "; synchronizing the device instead";
      FreeAfterDeviceSync(a);
      return;
    }
    if (a->uses_.empty()) {
      a->ClearUses();
      FreeNow(a);
      return;
    }
  }
  const std::size_t n = a->uses_.size();
  // Events: reuse pooled ones (creating one costs about a microsecond on CUDA).
  std::size_t pooled = 0;
  {
    std::lock_guard<platform::SpinLock> lock(lock_);
    while (pooled < n && !free_events_.empty()) {
      a->uses_[pooled++].event = free_events_.back();
      free_events_.pop_back();
    }
  }
  try {
    for (std::size_t i = pooled; i < n; ++i) {
      a->uses_[i].event = runtime_->CreateEvent(place_.device());
      events_created_.fetch_add(1, std::memory_order_relaxed);
    }
    // Recorded outside the lock: the queue order below may then differ slightly from the record
    // order between racing frees, which only delays a reclaim, never makes one unsafe.
    for (StreamUse& use : a->uses_) runtime_->RecordEvent(use.event, use.stream);
  } catch (const std::exception& e) {
    LOG(WARNING) << "stream_safe_cuda: cannot record an event for the free of " << a->ptr()
                 << " on " << place_
                 << " (a recorded stream destroyed, or of another device?): " << e.what()
                 << "; waiting for the recorded streams instead";
    FreeAfterStreamsSync(a);
    return;
  }
  // Before the block is queued: once queued, another thread may reclaim it.
  if (history_ != nullptr && history_->recording()) [[unlikely]] {
    history_->Record(history::EventKind::kPending, a->ptr(), n, a->uses_[0].stream);
  }
  std::lock_guard<platform::SpinLock> lock(lock_);
  for (StreamUse& use : a->uses_) {
    use.next = nullptr;
    use.owner = a;
    StreamQueue& queue = queues_[use.stream];
    if (queue.tail != nullptr) {
      queue.tail->next = &use;
    } else {
      queue.head = &use;
    }
    queue.tail = &use;
  }
  a->pending_events_ = static_cast<int>(n);
  a->free_order_ = ++frees_queued_;
  AccountPendingLocked(*a, /*add=*/true);
  ++num_pending_;
  has_pending_.store(true, std::memory_order_release);
  VLOG(8) << "stream_safe_cuda: free of " << a->ptr() << " pending on " << n << " stream(s)";
}

void StreamSafeCUDAAllocator::FreeAfterStreamsSync(StreamSafeCUDAAllocation* a) {
  // The recorded streams themselves, whichever device they belong to: this place's device
  // alone would not cover a stream of another device that uses the block.
  try {
    for (const StreamUse& use : a->uses_) runtime_->SynchronizeStream(use.stream);
  } catch (const std::exception& e) {
    LOG(WARNING) << "stream_safe_cuda: cannot wait for a recorded stream of " << a->ptr() << " on "
                 << place_ << ": " << e.what() << "; synchronizing the device";
    FreeAfterDeviceSync(a);
    return;
  }
  {
    std::lock_guard<platform::SpinLock> lock(lock_);
    ReturnEventsLocked(a);
  }
  FreeAfterPending(a);
}

void StreamSafeCUDAAllocator::FreeAfterDeviceSync(StreamSafeCUDAAllocation* a) {
  try {
    runtime_->SynchronizeDevice(place_.device());
  } catch (const std::exception& e) {
    LOG(ERROR) << "stream_safe_cuda: SynchronizeDevice failed: " << e.what()
               << "; leaking the block at " << a->ptr() << " rather than risk reusing it";
    return;
  }
  {
    std::lock_guard<platform::SpinLock> lock(lock_);
    ReturnEventsLocked(a);
  }
  FreeAfterPending(a);
}

void StreamSafeCUDAAllocator::ReturnEventsLocked(StreamSafeCUDAAllocation* a) {
  for (StreamUse& use : a->uses_) {
    if (use.event.valid()) free_events_.push_back(use.event);
    use.event = platform::Event{};
  }
}

std::size_t StreamSafeCUDAAllocator::ProcessPendingFrees() { return Reclaim(/*blocking=*/true); }

std::size_t StreamSafeCUDAAllocator::Reclaim(bool blocking) {
  if (!has_pending_.load(std::memory_order_acquire)) return 0;
  StreamSafeCUDAAllocation* ready_head = nullptr;
  StreamSafeCUDAAllocation* ready_tail = nullptr;
  std::size_t reclaimed = 0;
  {
    std::unique_lock<platform::SpinLock> lock(lock_, std::defer_lock);
    if (blocking) {
      lock.lock();
    } else if (!lock.try_lock()) {
      return 0;  // another thread is reclaiming or freeing; try again next time
    }
    for (auto it = queues_.begin(); it != queues_.end();) {
      StreamQueue& queue = it->second;
      // Where this queue's last ready block went in the list: one freed later goes after it.
      StreamSafeCUDAAllocation** after = &ready_head;
      std::uint64_t after_order = 0;
      // Events of one stream complete in record order: stop at the first one not ready.
      while (queue.head != nullptr) {
        StreamUse* use = queue.head;
        bool done;
        try {
          done = runtime_->QueryEvent(use->event);
        } catch (const std::exception& e) {
          LOG(ERROR) << "stream_safe_cuda: QueryEvent failed on " << use->stream << ": "
                     << e.what();
          done = false;
        }
        if (!done) break;
        queue.head = use->next;
        use->next = nullptr;
        free_events_.push_back(use->event);
        use->event = platform::Event{};
        StreamSafeCUDAAllocation* owner = use->owner;
        if (--owner->pending_events_ == 0) {
          AccountPendingLocked(*owner, /*add=*/false);
          --num_pending_;
          ++reclaimed;
          // In free order: the queues are walked in hash order, and the pool below places
          // what follows by the order blocks come back (a run then repeats exactly, too).
          if (ready_tail == nullptr || ready_tail->free_order_ < owner->free_order_) {
            owner->next_ready_ = nullptr;
            (ready_tail != nullptr ? ready_tail->next_ready_ : ready_head) = owner;
            ready_tail = owner;
          } else {
            // A queue's blocks mostly come in free order (racing frees may swap two): the
            // search starts after its previous one unless this one was freed before it.
            StreamSafeCUDAAllocation** at = after_order < owner->free_order_ ? after : &ready_head;
            while ((*at)->free_order_ < owner->free_order_) at = &(*at)->next_ready_;
            owner->next_ready_ = *at;
            *at = owner;
          }
          after = &owner->next_ready_;
          after_order = owner->free_order_;
        }
      }
      if (queue.head == nullptr) {
        queues_.erase(it++);
      } else {
        ++it;
      }
    }
    if (num_pending_ == 0) has_pending_.store(false, std::memory_order_relaxed);
  }
  // Oldest first, outside the lock: the pool below has its own.
  while (ready_head != nullptr) {
    StreamSafeCUDAAllocation* next = ready_head->next_ready_;
    FreeAfterPending(ready_head);
    ready_head = next;
  }
  if (reclaimed > 0) VLOG(8) << "stream_safe_cuda: reclaimed " << reclaimed << " pending free(s)";
  return reclaimed;
}

std::uint64_t StreamSafeCUDAAllocator::ReleaseImpl(const platform::Place& place) {
  const std::size_t reclaimed = Reclaim(/*blocking=*/true);
  const std::uint64_t released = underlying().Release(place);
  VLOG(1) << "stream_safe_cuda: release on " << place << " " << stream_ << ": reclaimed "
          << reclaimed << " pending free(s), released " << released << " bytes";
  return released;
}

void StreamSafeCUDAAllocator::AccountPendingLocked(const StreamSafeCUDAAllocation& a, bool add) {
  const auto bytes = static_cast<std::int64_t>(a.size());
  for (int pool : {static_cast<int>(kAggregate), static_cast<int>(PoolOf(a.size()))}) {
    if (add) {
      pending_[pool].Increase(1);
      pending_bytes_[pool].Increase(bytes);
    } else {
      pending_[pool].Decrease(1);
      pending_bytes_[pool].Decrease(bytes);
    }
  }
}

std::size_t StreamSafeCUDAAllocator::num_pending_frees() const {
  std::lock_guard<platform::SpinLock> lock(lock_);
  return num_pending_;
}

std::size_t StreamSafeCUDAAllocator::num_pooled_events() const {
  std::lock_guard<platform::SpinLock> lock(lock_);
  return free_events_.size();
}

void StreamSafeCUDAAllocator::CollectStats(MemoryStats* stats) const {
  // Frees whose events completed are not active any more: reclaim them first (queries only,
  // skipped while another thread reclaims), so that active_bytes does not keep them until the
  // next allocation.
  if (has_pending_.load(std::memory_order_relaxed)) {
    const_cast<StreamSafeCUDAAllocator*>(this)->Reclaim(/*blocking=*/false);
  }
  underlying().CollectStats(stats);
  std::lock_guard<platform::SpinLock> lock(lock_);
  for (int i = 0; i < kNumStatPools; ++i) {
    stats->active[i].Merge(pending_[i]);
    stats->active_bytes[i].Merge(pending_bytes_[i]);
  }
}

void StreamSafeCUDAAllocator::Snapshot(MemorySnapshot* snapshot) const {
  underlying().Snapshot(snapshot);
  std::lock_guard<platform::SpinLock> lock(lock_);
  for (const auto& [stream, queue] : queues_) {
    for (const StreamUse* use = queue.head; use != nullptr; use = use->next) {
      snapshot->Mark(use->owner->ptr(), BlockState::kPendingEvents);
    }
  }
}

void StreamSafeCUDAAllocator::ResetPeakStats() {
  underlying().ResetPeakStats();
  std::lock_guard<platform::SpinLock> lock(lock_);
  for (StatArray* s : {&pending_, &pending_bytes_}) {
    for (StatValue& v : *s) v.ResetPeak();
  }
}

void StreamSafeCUDAAllocator::ResetAccumulatedStats() {
  underlying().ResetAccumulatedStats();
  std::lock_guard<platform::SpinLock> lock(lock_);
  for (StatArray* s : {&pending_, &pending_bytes_}) {
    for (StatValue& v : *s) v.ResetAccumulated();
  }
}

}  // namespace strata::layers
