// StreamSafeCUDAAllocation: the allocation handed out by StreamSafeCUDAAllocator. It wraps the
// block of the pool below (a raw pointer: the allocator frees it through the layer below) and
// remembers which streams besides its
// owning stream use the memory, so that freeing it can wait — lazily, through events — for
// their work.
//
// Contract
// - owning_stream(): the stream whose allocator created it. Work on that stream is ordered with
//   later allocations of the same allocator, so it never needs an event.
// - RecordStream(s): `s` will use the memory; the block is not reused before the work enqueued
//   on `s` up to the free has completed. A no-op for the owning stream and for empty (size 0 or
//   null) allocations; duplicates are ignored. The first kInlineStreams recorded streams are
//   stored inline, so recording does not allocate in the common case.
// - Thread safety: RecordStream may be called concurrently from several threads (a tiny spin
//   lock guards the list); it must not race with the free of the allocation itself.
// - Streams recorded here must be alive when the allocation is freed (an event is recorded on
//   them then); see StreamSafeCUDAAllocator for what happens when one is not.
// Objects are recycled through ObjectPool: only StreamSafeCUDAAllocator initialises them.
#pragma once

#include <cstddef>

#include "absl/container/inlined_vector.h"
#include "allocation/allocation.h"
#include "platform/event.h"
#include "platform/spin_lock.h"
#include "platform/stream.h"

namespace strata::layers {

class StreamSafeCUDAAllocator;

class StreamSafeCUDAAllocation : public allocation::Allocation {
 public:
  // Most allocations are used by at most one stream besides their owner.
  static constexpr std::size_t kInlineStreams = 2;

  StreamSafeCUDAAllocation() = default;

  platform::Stream owning_stream() const { return owning_stream_; }

  void RecordStream(platform::Stream stream);

  int num_recorded_streams() const;
  // Without the lock: for the free path, which RecordStream must not race with.
  bool has_recorded_streams() const { return !uses_.empty(); }
  platform::Stream recorded_stream(int i) const;
  bool HasRecordedStream(platform::Stream stream) const;
  // The allocation of the layer below (for diagnostics).
  const allocation::Allocation* underlying() const { return underlying_; }

 private:
  friend class StreamSafeCUDAAllocator;

  // One recorded stream; after the free, also a node of that stream's pending queue in the
  // allocator (intrusive, so queueing a pending free never allocates).
  struct StreamUse {
    platform::Stream stream;
    platform::Event event;  // recorded on `stream` at free time
    StreamUse* next = nullptr;
    StreamSafeCUDAAllocation* owner = nullptr;
  };

  // Takes over `underlying` (freed later by the allocator through the layer below). Objects come
  // from ObjectPool with no recorded stream, no pending event and no ready link (ClearUses()
  // restores that before recycling), so only the fields below need setting.
  void Init(allocation::Allocation* underlying, platform::Stream owning_stream) {
    ResetAsWrapperOf(*underlying);  // keeps the layers below visible (diagnostics, tests)
    underlying_ = underlying;
    owning_stream_ = owning_stream;
  }
  // Drops the recorded streams (and heap storage of a long list) before recycling.
  void ClearUses();

  allocation::Allocation* underlying_ = nullptr;
  platform::Stream owning_stream_;
  mutable platform::SpinLock uses_lock_;
  absl::InlinedVector<StreamUse, kInlineStreams> uses_;
  // Guarded by the allocator's lock while the allocation is pending.
  int pending_events_ = 0;
  std::uint64_t free_order_ = 0;  // when its free was queued (the allocator's count)
  StreamSafeCUDAAllocation* next_ready_ = nullptr;
};

}  // namespace strata::layers
