// The virtual-memory pool's fences: a free and allocate of one size in a loop (quick reuse, which
// stream order covers) records no event, frees not taken back are fenced as before, and teardown
// still waits for the work after the last fence.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "allocation/allocation.h"
#include "platform/emulated_runtime.h"
#include "platform/forwarding_runtime.h"
#include "platform/stream.h"
#include "strategies/vmm_pool.h"
#include "support/vmm_pool_fixture.h"

namespace strata::strategies::vmm_test {
namespace {

using allocation::Allocation;
using platform::Stream;

// Counts the events recorded through it.
class RecordCounter : public platform::ForwardingRuntime {
 public:
  explicit RecordCounter(platform::DeviceRuntime* base)
      : ForwardingRuntime(base, "RecordCounter") {}
  void RecordEvent(platform::Event event, Stream stream) override {
    records_.fetch_add(1, std::memory_order_relaxed);
    ForwardingRuntime::RecordEvent(event, stream);
  }
  std::uint64_t records() const { return records_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> records_{0};
};

class VmmPoolFencesTest : public ::testing::Test {
 protected:
  platform::EmulatedRuntime runtime_{Lagging(4)};
  RecordCounter counter_{&runtime_};
  Stream stream_ = runtime_.CreateStream(0);
  std::unique_ptr<VirtualMemoryPool> pool_ =
      std::make_unique<VirtualMemoryPool>(&counter_, kPlace, PageOptions());

  void TearDown() override {
    pool_.reset();
    runtime_.DestroyStream(stream_);
  }
};

TEST_F(VmmPoolFencesTest, QuickReuseOfPageSizedBlocksRecordsNoFence) {
  const std::uint64_t fence_every = VirtualMemoryPool::Options{}.fence_every;
  Allocation* a = pool_->Allocate(16 * kMiB, stream_);
  const std::uint64_t before = counter_.records();
  for (std::uint64_t i = 0; i < 4 * fence_every; ++i) {
    pool_->Free(a);
    a = pool_->Allocate(16 * kMiB, stream_);
  }
  EXPECT_EQ(counter_.records(), before) << "each free was taken back by its own stream";
  pool_->Free(a);
}

TEST_F(VmmPoolFencesTest, FreesNotTakenBackAreFencedEveryFenceEveryFrees) {
  const std::uint64_t fence_every = VirtualMemoryPool::Options{}.fence_every;
  std::vector<Allocation*> blocks;
  for (std::uint64_t i = 0; i < 2 * fence_every; ++i) {
    blocks.push_back(pool_->Allocate(4 * kMiB, stream_));
  }
  const std::uint64_t before = counter_.records();
  for (Allocation* b : blocks) pool_->Free(b);
  EXPECT_EQ(counter_.records(), before + 2);
}

// Teardown unmaps pages only once the work that used them is done, also work after the last
// fence (here there is none: every earlier free was taken back).
TEST_F(VmmPoolFencesTest, TeardownWaitsForWorkAfterTheLastFence) {
  Allocation* a = pool_->Allocate(16 * kMiB, stream_);
  for (int i = 0; i < 4; ++i) {
    pool_->Free(a);
    a = pool_->Allocate(16 * kMiB, stream_);
  }
  absl::Notification go;
  std::atomic<bool> ran{false};
  runtime_.LaunchHostTask(stream_, [&] {
    go.WaitForNotification();
    ran.store(true);
  });
  pool_->Free(a);  // its last use is the task above
  // The task runs once `go` is notified; a teardown that did not wait for it would finish first.
  std::thread later([&] {
    absl::SleepFor(absl::Milliseconds(50));
    go.Notify();
  });
  pool_.reset();
  EXPECT_TRUE(ran.load()) << "the pages went while work through them was pending";
  later.join();
}

}  // namespace
}  // namespace strata::strategies::vmm_test
