// The fixtures of the virtual-memory pool's tests (vmm_pool_placement_test.cc,
// vmm_pool_streams_test.cc, vmm_pool_extents_test.cc, vmm_pool_holds_test.cc and the other
// vmm_*_test.cc): a pool over an emulated device of 256 MiB behind fault injection, checked to
// give every page back, and the base of the tests on a real GPU.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "allocation/memory_stats.h"
#include "platform/emulated_runtime.h"
#include "platform/fault_injection_runtime.h"
#include "platform/place.h"
#include "platform/stream.h"
#include "strategies/vmm_pool.h"
#include "support/runtimes.h"

namespace strata::strategies::vmm_test {

inline constexpr std::size_t kMiB = std::size_t{1} << 20;
inline const platform::Place kPlace = platform::CUDAPlace(0);

inline platform::EmulatedRuntime::Options Small(std::size_t capacity = 256 * kMiB) {
  platform::EmulatedRuntime::Options o;
  o.device_count = 1;
  o.capacity_bytes = capacity;
  return o;
}

// The device `lag` tasks behind the host: work is seen done only once `lag` more were enqueued on
// its stream.
inline platform::EmulatedRuntime::Options Lagging(std::uint64_t lag) {
  platform::EmulatedRuntime::Options o = Small();
  o.event_lag = lag;
  return o;
}

// One physical allocation per page: most pool tests are about pages (stitching, remapping,
// ordering), which extents would hide; vmm_pool_extents_test.cc covers extents.
inline VirtualMemoryPool::Options PageOptions() {
  VirtualMemoryPool::Options o;
  o.max_extent_pages = 1;
  return o;
}

// PageOptions under a memory limit of `limit` bytes: past it the pool must stitch idle pages.
inline VirtualMemoryPool::Options LimitedPageOptions(std::size_t limit) {
  VirtualMemoryPool::Options o = PageOptions();
  o.memory_limit = limit;
  return o;
}

inline allocation::MemoryStats Stats(const VirtualMemoryPool& pool) {
  allocation::MemoryStats s;
  pool.CollectStats(&s);
  return s;
}

// Streams from NewStream are destroyed after the test, after the pool.
class VirtualMemoryPoolTest : public ::testing::Test {
 protected:
  void TearDown() override {
    pool_.reset();
    EXPECT_EQ(runtime_.used_bytes(0), 0u) << "the pool gives every page back when destroyed";
    for (platform::Stream s : streams_) runtime_.DestroyStream(s);
  }
  platform::Stream NewStream() {
    streams_.push_back(runtime_.CreateStream(0));
    return streams_.back();
  }
  void MakePool(VirtualMemoryPool::Options o = PageOptions()) {
    pool_ = std::make_unique<VirtualMemoryPool>(&faults_, kPlace, o);
  }
  // Frees, then returns everything that can be returned (EmptyCache's sequence).
  std::uint64_t EmptyCache() {
    pool_->WaitForStreams();
    return pool_->Release();
  }

  platform::EmulatedRuntime runtime_{Small()};
  platform::FaultInjectionRuntime faults_{&runtime_};
  std::unique_ptr<VirtualMemoryPool> pool_ =
      std::make_unique<VirtualMemoryPool>(&faults_, kPlace, PageOptions());

 private:
  std::vector<platform::Stream> streams_;
};

// The pool on a real GPU: skipped without one, or when device 0 has no virtual memory. Streams
// from NewStream are destroyed after the test, so after the pools it made.
class CUDAVirtualMemoryPoolTest : public testing::CUDAFixture {
 protected:
  void SetUp() override {
    CUDAFixture::SetUp();
    if (IsSkipped()) return;
    if (runtime_->VmmGranularity(0) == 0) GTEST_SKIP() << "device 0 has no virtual memory";
  }
  void TearDown() override {
    for (platform::Stream s : streams_) runtime_->DestroyStream(s);
  }
  platform::Stream NewStream() {
    streams_.push_back(runtime_->CreateStream(0));
    return streams_.back();
  }

 private:
  std::vector<platform::Stream> streams_;
};

// Extents of up to `max_pages` pages.
inline VirtualMemoryPool::Options ExtentOptions(std::size_t max_pages) {
  VirtualMemoryPool::Options o;
  o.max_extent_pages = max_pages;
  return o;
}

}  // namespace strata::strategies::vmm_test
