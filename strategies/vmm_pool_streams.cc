// VirtualMemoryPool, streams: fences on the streams that freed blocks, and the ordering of
// one stream's use after another's (queries and device-side waits; the host waits only in
// WaitForStreams).
#include "strategies/vmm_pool.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "allocation/bad_alloc.h"
#include "glog/logging.h"
#include "reporting/byte_format.h"
#include "strategies/vmm_pool_internal.h"

namespace strata::strategies {

using allocation::BadAlloc;
using allocation::FormatBytes;
using platform::PhysicalMemory;
using platform::Stream;

VirtualMemoryPool::StreamState& VirtualMemoryPool::StateOf(Stream stream) {
  // Most frees in a row come from one stream: skip the hash lookup for it.
  if (last_state_ != nullptr && stream == last_stream_) [[likely]]
    return *last_state_;
  last_state_ = &streams_[stream];
  last_stream_ = stream;
  return *last_state_;
}

bool VirtualMemoryPool::Done(Stream stream, std::uint64_t epoch) {
  if (epoch == 0) return true;
  StreamState& s = StateOf(stream);
  if (epoch <= s.done_epoch) return true;
  StreamState::FenceSlot* f = s.Covering(epoch);
  if (f == nullptr || !runtime_->QueryEvent(f->event)) return false;
  s.done_epoch = std::max(s.done_epoch, f->epoch);
  return true;
}

platform::Event VirtualMemoryPool::Fence(Stream stream) {
  StreamState& s = StateOf(stream);
  if (s.last_fence_epoch == s.epoch && s.epoch != 0) return s.Covering(s.epoch)->event;
  return RecordFence(stream, s);
}

platform::Event VirtualMemoryPool::RecordFence(Stream stream, StreamState& s) {
  // A record on a capturing stream would be a node of the graph, never queryable: no fence
  // while `stream` captures (its captured work does not run now; the caller orders nothing).
  if (runtime_->IsCapturing(stream)) [[unlikely]]
    return platform::Event{};
  // Re-recording the oldest slot is safe: a wait already enqueued on it keeps what it waited
  // for, and a later query of an epoch it covered finds a newer (more conservative) fence.
  StreamState::FenceSlot& f = s.fences[s.next_slot];
  s.next_slot = (s.next_slot + 1) % StreamState::kFences;
  if (f.event.handle == nullptr) f.event = runtime_->CreateEvent(place_.device());
  runtime_->RecordEvent(f.event, stream);
  f.epoch = s.epoch;
  s.last_fence_epoch = s.epoch;
  return f.event;
}

bool VirtualMemoryPool::AllStreamsDone() {
  bool done = true;
  for (auto& [stream, s] : streams_) {
    if (s.epoch == 0) continue;
    if (!Done(stream, s.epoch)) {
      Fence(stream);
      done = false;
    }
  }
  return done;
}

void VirtualMemoryPool::OrderAfter(Stream last_stream, std::uint64_t epoch, Stream stream) {
  if (Done(last_stream, epoch)) return;  // the last user's work is complete
  StreamState& last = StateOf(last_stream);
  // The oldest fence after the free: waiting for a newer one would also wait for the last
  // user's later work, which serializes the two streams.
  StreamState::FenceSlot* f = last.Covering(epoch);
  try {
    const platform::Event fence = f != nullptr ? f->event : Fence(last_stream);
    if (fence.handle == nullptr) return;  // `last_stream` captures: nothing runs to wait for
    runtime_->StreamWaitEvent(stream, fence);
    ++num_waits_;
    VLOG(8) << "vmm_pool: " << stream << " waits for " << last_stream << " on the device";
  } catch (const platform::RuntimeError& e) {
    // The last user's stream is gone (destroyed): its work cannot be fenced any more.
    LOG(WARNING) << "vmm_pool on " << place_ << ": cannot order " << stream << " after "
                 << last_stream << " (" << e.what() << "); synchronizing the device instead";
    runtime_->SynchronizeDevice(place_.device());
    last.done_epoch = last.epoch;
  }
}

void VirtualMemoryPool::OrderAfterPhys(const PhysPage& x, Stream stream) {
  if (x.epoch == 0) return;
  if (!x.mixed) {
    if (x.stream != stream) OrderAfter(x.stream, x.epoch, stream);
    return;
  }
  OrderAfterAllStreams(stream);  // freed by several streams
}

void VirtualMemoryPool::OrderAfterAllStreams(Stream stream) {
  for (auto& [other, s] : streams_) {
    if (other != stream && s.epoch != 0) OrderAfter(other, s.epoch, stream);
  }
}

void VirtualMemoryPool::WaitForStreams() {
  std::vector<std::pair<Stream, platform::Event>> fences;
  {
    std::lock_guard<platform::SpinLock> lock(mu_);
    FlushParked();  // their frees get numbers the fences below cover
    for (auto& [stream, s] : streams_) {
      if (s.epoch == 0 || Done(stream, s.epoch)) continue;
      const platform::Event fence = Fence(stream);
      if (fence.handle != nullptr) fences.emplace_back(stream, fence);
    }
    if (!fences.empty()) ++num_sync_all_;
  }
  // Outside the lock: other threads keep allocating while the host waits.
  for (const auto& [stream, fence] : fences) runtime_->SynchronizeEvent(fence);
  VLOG(1) << "vmm_pool on " << place_ << ": waited for " << fences.size() << " stream(s)";
}

}  // namespace strata::strategies
