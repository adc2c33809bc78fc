#include "layers/stream_safe_cuda_allocation.h"

#include <mutex>
#include <stdexcept>

#include "glog/logging.h"

namespace strata::layers {

void StreamSafeCUDAAllocation::ClearUses() {
  uses_.clear();  // also gives back heap storage of a long stream list
  pending_events_ = 0;
  next_ready_ = nullptr;
}

void StreamSafeCUDAAllocation::RecordStream(platform::Stream stream) {
  // Empty allocations own no memory another stream could touch.
  if (stream == owning_stream_ || size() == 0 || ptr() == nullptr) return;
  std::lock_guard<platform::SpinLock> lock(uses_lock_);
  for (const StreamUse& use : uses_) {
    if (use.stream == stream) return;
  }
  VLOG(10) << "stream_safe_cuda: record " << stream << " on " << ptr() << " (owner "
           << owning_stream_ << ")";
  uses_.push_back(StreamUse{stream, platform::Event{}, nullptr, this});
}

int StreamSafeCUDAAllocation::num_recorded_streams() const {
  std::lock_guard<platform::SpinLock> lock(uses_lock_);
  return static_cast<int>(uses_.size());
}

platform::Stream StreamSafeCUDAAllocation::recorded_stream(int i) const {
  std::lock_guard<platform::SpinLock> lock(uses_lock_);
  if (i < 0 || static_cast<std::size_t>(i) >= uses_.size()) {
    throw std::out_of_range("StreamSafeCUDAAllocation::recorded_stream: index out of range");
  }
  return uses_[i].stream;
}

bool StreamSafeCUDAAllocation::HasRecordedStream(platform::Stream stream) const {
  std::lock_guard<platform::SpinLock> lock(uses_lock_);
  for (const StreamUse& use : uses_) {
    if (use.stream == stream) return true;
  }
  return false;
}

}  // namespace strata::layers
