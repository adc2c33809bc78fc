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
  return streams_[stream];
}

bool VirtualMemoryPool::Done(Stream stream, std::uint64_t epoch) {
  if (epoch == 0) return true;
  StreamState& s = StateOf(stream);
  if (!s.has_fence || s.fence_epoch < epoch) return false;
  if (!s.fence_done) s.fence_done = runtime_->QueryEvent(s.fence);
  return s.fence_done;
}

platform::Event VirtualMemoryPool::Fence(Stream stream) {
  StreamState& s = StateOf(stream);
  if (s.has_fence && s.fence_epoch == s.epoch) return s.fence;
  if (s.fence.handle == nullptr) s.fence = runtime_->CreateEvent(place_.device());
  runtime_->RecordEvent(s.fence, stream);
  s.has_fence = true;
  s.fence_epoch = s.epoch;
  s.fence_done = false;
  return s.fence;
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

bool VirtualMemoryPool::NeedsWait(const Block& block, Stream stream) {
  return block.epoch != 0 && block.stream != stream && !Done(block.stream, block.epoch);
}

void VirtualMemoryPool::OrderAfterLastUse(const Block& block, Stream stream) {
  if (Done(block.stream, block.epoch)) return;  // the last user's work is complete
  try {
    runtime_->StreamWaitEvent(stream, Fence(block.stream));
    ++num_waits_;
    VLOG(8) << "vmm_pool: " << stream << " waits for " << block.stream << " on the device";
  } catch (const platform::RuntimeError& e) {
    // The last user's stream is gone (destroyed): its work cannot be fenced any more.
    LOG(WARNING) << "vmm_pool on " << place_ << ": cannot order " << stream << " after "
                 << block.stream << " (" << e.what() << "); synchronizing the device instead";
    runtime_->SynchronizeDevice(place_.device());
    StateOf(block.stream).epoch = 0;
  }
}

void VirtualMemoryPool::WaitForStreams() {
  std::vector<std::pair<Stream, platform::Event>> fences;
  {
    std::lock_guard<platform::SpinLock> lock(mu_);
    for (auto& [stream, s] : streams_) {
      if (s.epoch != 0 && !Done(stream, s.epoch)) fences.emplace_back(stream, Fence(stream));
    }
  }
  // Outside the lock: other threads keep allocating while the host waits.
  for (const auto& [stream, fence] : fences) runtime_->SynchronizeEvent(fence);
  VLOG(1) << "vmm_pool on " << place_ << ": waited for " << fences.size() << " stream(s)";
}

}  // namespace strata::strategies
