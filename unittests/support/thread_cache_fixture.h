// The thread cache's test fixture (thread_cache_allocator_test.cc, thread_cache_races_test.cc):
// the cache over a recording allocator, a thread that keeps a parked block, and options that park
// large blocks until the next call.
#pragma once

#include <cstddef>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "layers/thread_cache_allocator.h"
#include "support/test_allocators.h"

namespace strata::layers::thread_cache_test {

using testing::RecordingAllocator;

struct Fixture {
  explicit Fixture(ThreadCacheAllocator::Options o = {})
      : below(std::make_shared<RecordingAllocator>()),
        cache(std::make_unique<ThreadCacheAllocator>(below, o)) {}
  std::shared_ptr<RecordingAllocator> below;
  std::unique_ptr<ThreadCacheAllocator> cache;
};

// Another thread that parks a block of `bytes` in its cache and then keeps its cache (stays alive,
// not touching the allocator again) until Finish. Constructed once the block is parked.
class ThreadWithParkedBlock {
 public:
  ThreadWithParkedBlock(ThreadCacheAllocator* cache, std::size_t bytes)
      : thread_([this, cache, bytes] {
          cache->Allocate(bytes).reset();
          parked_.Notify();
          finish_.WaitForNotification();
        }) {
    parked_.WaitForNotification();
  }
  ~ThreadWithParkedBlock() { Finish(); }
  ThreadWithParkedBlock(const ThreadWithParkedBlock&) = delete;
  ThreadWithParkedBlock& operator=(const ThreadWithParkedBlock&) = delete;

  void Finish() {
    if (!finish_.HasBeenNotified()) finish_.Notify();
    if (thread_.joinable()) thread_.join();
  }

 private:
  absl::Notification parked_, finish_;
  std::thread thread_;  // last: it uses the notifications
};

ThreadCacheAllocator::Options LargeUntilNextCall() {
  ThreadCacheAllocator::Options o;
  o.max_bytes = 64 << 10;
  o.max_block_bytes = 16 << 10;
  o.large_until_next_call = true;
  return o;
}

}  // namespace strata::layers::thread_cache_test
