// StreamSafeCUDAAllocator: makes a per-stream pool safe to use from several streams.
//
// One instance serves one (place, stream): it allocates from the pool of that stream (the
// underlying allocator) and wraps each block in a StreamSafeCUDAAllocation. A block used by
// other streams (Allocation::RecordStream) is not handed back to the pool at free time:
//
// Stream semantics
// - Free with no recorded stream: the block goes back to the pool at once, no event work. Work
//   already enqueued on the owning stream is ordered before any later use of the block by the
//   same stream, as with any caching CUDA allocator.
// - Free with recorded streams: one event (from a per-allocator event pool, never destroyed
//   while the allocator lives) is recorded on each recorded stream and the allocation joins the
//   pending list, which holds only freed-but-recorded allocations. It goes back to the pool
//   once all its events have completed.
// - Pending frees are reclaimed lazily: on the next Allocate (a try-lock: skipped when another
//   thread is reclaiming), on Release, and on out-of-memory — by QUERYING events, never by
//   synchronizing. Each stream's pending queue is in record order, so the scan stops at the
//   first not-ready event of each stream. The common path costs one relaxed atomic load.
// - Out of memory (BadAlloc from below) propagates unchanged: recovery is the chain's
//   OomRecoveryAllocator's job, whose Release of this layer reclaims what completed.
// - A recorded stream that the framework ended (EndedStreams: it may be destroyed) gets no event:
//   its end fence stands for its work. Done (a query): nothing to wait for. Else the owning
//   stream waits for the fence on the device, or, for host memory or an owner that ended too,
//   the host waits for it (counted by the runtime). The free then happens at once.
// - A recorded stream whose event cannot be recorded at free time (RecordEvent fails: a stream
//   gone without having been ended, on the emulated runtime, as CUDA does not check a handle;
//   or a stream of another device): the allocator waits for each recorded stream, or where that
//   fails too, for the device (host waits, counted by the runtime, logged), and frees at once —
//   rare and slow but safe; record only streams that outlive the free, or end them
//   (AllocatorFacade::EndStream).
// - Destruction with pending frees: the destructor waits for the remaining events
//   (SynchronizeEvent on each not-ready one — the only synchronization this layer does on a
//   healthy path), frees the blocks to the pool and destroys every event. The allocator must
//   outlive its live allocations, as for every layer. The owning stream itself may be destroyed
//   before the allocator: this layer never enqueues anything on it.
//
// Thread safety: Allocate, Free (from any thread, not only the allocating one), Release and the
// statistics may run concurrently. The pending queues and the event pool are guarded by a
// SpinLock held only for list surgery and event queries.
//
// Throws: std::invalid_argument for a null underlying allocator or runtime; BadAlloc from below;
// platform::RuntimeError from the runtime on Allocate paths. Free
// never throws.
//
// Statistics: CollectStats reclaims pending frees whose events completed (queries), forwards,
// then adds the frees still pending to active / active_bytes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "allocation/decorating_allocator.h"
#include "allocation/memory_stats.h"
#include "history/history_recorder.h"
#include "layers/ended_streams.h"
#include "layers/stream_safe_cuda_allocation.h"
#include "platform/device_runtime.h"
#include "platform/event.h"
#include "platform/place.h"
#include "platform/spin_lock.h"
#include "platform/stream.h"

namespace strata::layers {

class StreamSafeCUDAAllocator : public allocation::DecoratingAllocator {
 public:
  static constexpr char kName[] = "stream_safe_cuda";

  StreamSafeCUDAAllocator(std::shared_ptr<allocation::Allocator> underlying,
                          platform::DeviceRuntime* runtime, platform::Place place,
                          platform::Stream stream);
  // The owning stream of host (pinned) memory, which belongs to no stream: every stream
  // recorded on such a block, the default stream included, holds it until its work is done
  // (PyTorch's CachingHostAllocator). Its events are created on device 0.
  static platform::Stream HostOwner();
  ~StreamSafeCUDAAllocator() override;
  StreamSafeCUDAAllocator(const StreamSafeCUDAAllocator&) = delete;
  StreamSafeCUDAAllocator& operator=(const StreamSafeCUDAAllocator&) = delete;

  const char* Name() const override { return kName; }
  // Forwards, then marks the blocks of pending frees.
  void Snapshot(allocation::MemorySnapshot* snapshot) const override;

  // Reports deferred frees (and their reclaim) to `history` while it records. Call before the
  // layer is used.
  void RecordInto(std::shared_ptr<history::HistoryRecorder> history) {
    history_ = std::move(history);
  }
  // The streams ended so far (shared by the facade's chains; null: none are). Call before the
  // layer is used.
  void SetEndedStreams(std::shared_ptr<const EndedStreams> ended) { ended_ = std::move(ended); }

  // The stream-safe view of an allocation of a chain: the outermost stream-safe layer on its
  // decorator stack (no layer above this one wraps allocations), or null when the chain has none.
  static StreamSafeCUDAAllocation* Find(const allocation::Allocation& allocation) {
    return allocation::FindLayer<StreamSafeCUDAAllocator>(allocation) != nullptr
               ? static_cast<StreamSafeCUDAAllocation*>(
                     const_cast<allocation::Allocation*>(&allocation))
               : nullptr;
  }

  const platform::Place& place() const { return place_; }
  platform::Stream stream() const { return stream_; }

  // Returns to the pool every pending free whose events have completed (queries only); returns
  // how many allocations were reclaimed.
  std::size_t ProcessPendingFrees();

  // Introspection (tests, diagnostics).
  std::size_t num_pending_frees() const;
  std::uint64_t num_events_created() const { return events_created_.load(); }
  std::size_t num_pooled_events() const;

  void CollectStats(allocation::MemoryStats* stats) const override;
  void ResetPeakStats() override;
  void ResetAccumulatedStats() override;

 protected:
  // noinline: keeps GCC from speculatively inlining the layer into itself where it calls the
  // layer below (which "might" be the same class), a compare and register spills per call.
  [[gnu::noinline]] allocation::Allocation* AllocateImpl(std::size_t size) override;
  [[gnu::noinline]] void FreeImpl(allocation::Allocation* allocation) override;
  std::uint64_t ReleaseImpl(const platform::Place& place) override;

 private:
  using StreamUse = StreamSafeCUDAAllocation::StreamUse;
  struct StreamQueue {
    StreamUse* head = nullptr;
    StreamUse* tail = nullptr;
  };

  // Free of an allocation with recorded streams: records events, queues it as pending.
  void FreeWithEvents(StreamSafeCUDAAllocation* a);
  // Removes the recorded streams that ended, ordering the block's next use after their fences.
  void DropEndedUses(StreamSafeCUDAAllocation* a);
  // Reclaims completed pending frees; `blocking` waits for the lock instead of giving up.
  std::size_t Reclaim(bool blocking);
  // Gives the block of `a` (no recorded stream) back to the pool and recycles `a`.
  void FreeNow(StreamSafeCUDAAllocation* a);
  // Same for an allocation that had recorded streams (no longer pending).
  void FreeAfterPending(StreamSafeCUDAAllocation* a) {
    if (history_ != nullptr && history_->recording()) [[unlikely]] {
      history_->Record(history::EventKind::kReclaim, a->ptr(), 0, stream_);
    }
    a->ClearUses();
    FreeNow(a);
  }
  // Recovery for a free whose events could not be recorded: wait for the recorded streams (a
  // host wait), else for the whole device.
  void FreeAfterStreamsSync(StreamSafeCUDAAllocation* a);
  void FreeAfterDeviceSync(StreamSafeCUDAAllocation* a);
  void ReturnEventsLocked(StreamSafeCUDAAllocation* a);
  void AccountPendingLocked(const StreamSafeCUDAAllocation& a, bool add);

  platform::DeviceRuntime* const runtime_;
  const platform::Place place_;
  const platform::Stream stream_;
  std::shared_ptr<history::HistoryRecorder> history_;
  std::shared_ptr<const EndedStreams> ended_;

  // Set while any pending free exists; read without the lock on every Allocate.
  std::atomic<bool> has_pending_{false};
  mutable platform::SpinLock lock_;
  // Pending queues by recorded stream; empty queues are erased. Guarded by lock_.
  absl::flat_hash_map<platform::Stream, StreamQueue> queues_;
  std::vector<platform::Event> free_events_;           // guarded by lock_
  std::size_t num_pending_ = 0;                        // guarded by lock_
  std::uint64_t frees_queued_ = 0;                     // guarded by lock_: free_order_'s clock
  allocation::StatArray pending_{}, pending_bytes_{};  // guarded by lock_
  std::atomic<std::uint64_t> events_created_{0};
};

}  // namespace strata::layers
