// The stream-safe layer's test fixture and helpers (stream_safe_cuda_allocator_test.cc,
// stream_safe_cuda_allocator_lifecycle_test.cc): three emulated streams, a recording pool below.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "allocation/allocation.h"
#include "allocation/bad_alloc.h"
#include "allocation/memory_stats.h"
#include "layers/stream_safe_cuda_allocation.h"
#include "layers/stream_safe_cuda_allocator.h"
#include "platform/emulated_runtime.h"
#include "platform/place.h"
#include "platform/stream.h"
#include "support/holdable_runtime.h"
#include "support/test_allocators.h"

namespace strata::layers::stream_safe_test {

// The names the stream-safe layer's tests use unqualified.
using allocation::AllocationPtr;
using allocation::BadAlloc;
using allocation::kAggregate;
using allocation::kLargePool;
using allocation::kSmallPool;
using allocation::MemoryStats;
using platform::EmulatedRuntime;
using platform::Stream;

inline constexpr platform::CUDAPlace kPlace{0};

inline StreamSafeCUDAAllocation* AsStreamSafe(const AllocationPtr& a) {
  auto* s = StreamSafeCUDAAllocator::Find(*a);
  EXPECT_NE(s, nullptr);
  return s;
}

template <typename Pred>
void WaitUntil(Pred pred) {
  while (!pred()) std::this_thread::sleep_for(std::chrono::microseconds(200));
}

inline bool AllBytesAre(const void* p, std::size_t n, unsigned char value) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) {
    if (b[i] != value) return false;
  }
  return true;
}

// Opens a gate (a host task on a stream waits for it) when leaving the scope, so a failing test
// cannot leave a stream blocked forever. Declare it after the allocator it protects.
struct GateOpener {
  absl::Notification* gate;
  ~GateOpener() {
    if (!gate->HasBeenNotified()) gate->Notify();
  }
};

class StreamSafeCUDAAllocatorTest : public ::testing::Test {
 protected:
  StreamSafeCUDAAllocatorTest()
      : s1_(rt_.CreateStream(0)), s2_(rt_.CreateStream(0)), s3_(rt_.CreateStream(0)) {}

  EmulatedRuntime rt_;
  testing::HoldableRuntime hr_{&rt_};
  Stream s1_, s2_, s3_;
  std::shared_ptr<testing::RecordingAllocator> base_ =
      std::make_shared<testing::RecordingAllocator>(kPlace);

  void RunManyStreamsAndThreads(
      const std::function<std::shared_ptr<allocation::Allocator>(Stream)>& pool_for);
};

}  // namespace strata::layers::stream_safe_test
