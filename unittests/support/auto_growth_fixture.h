// The auto-growth pool's test fixture (auto_growth_best_fit_allocator_test.cc,
// auto_growth_release_test.cc, auto_growth_quick_reuse_test.cc): the pool over a recording
// allocator behind a free log.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "allocation/memory_stats.h"
#include "strategies/auto_growth_best_fit_allocator.h"
#include "support/test_allocators.h"

namespace strata::strategies::auto_growth_test {

using allocation::AllocationPtr;
using allocation::MemoryStats;
using Options = AutoGrowthBestFitAllocator::Options;

inline constexpr std::size_t kKiB = std::size_t{1} << 10;
inline constexpr std::size_t kMiB = std::size_t{1} << 20;

inline char* P(const AllocationPtr& a) { return static_cast<char*>(a->ptr()); }

// Most tests are written against two pools (a 1 MiB small pool of 2 MiB chunks), large
// chunks of just the request, and idle chunks kept until something releases them.
inline Options TwoPoolOptions() {
  Options o;
  o.chunk_size = 0;
  o.small_size = allocation::kSmallSize;
  o.release_idle_before_new_peak = false;
  return o;
}

// TwoPoolOptions() with a test's own changes, e.g.
// Fixture f(TwoPoolOptions([](Options& o) { o.memory_limit = 8 * kMiB; }));
template <typename Change>
Options TwoPoolOptions(Change&& change) {
  Options o = TwoPoolOptions();
  std::forward<Change>(change)(o);
  return o;
}

// A pass-through decorator that logs which underlying blocks are freed, in order.
class FreeLog : public allocation::Allocator {
 public:
  explicit FreeLog(std::shared_ptr<allocation::Allocator> u) : underlying_(std::move(u)) {}
  const char* Name() const override { return "free_log"; }
  std::vector<void*> freed() const {
    absl::MutexLock lock(&mu_);
    return freed_;
  }

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override {
    return underlying_->Allocate(size).release();
  }
  void FreeImpl(allocation::Allocation* a) override {
    {
      absl::MutexLock lock(&mu_);
      freed_.push_back(a->ptr());
    }
    underlying_->Free(a);
  }

 private:
  std::shared_ptr<allocation::Allocator> underlying_;
  mutable absl::Mutex mu_;
  std::vector<void*> freed_;
};

struct Fixture {
  explicit Fixture(Options o = TwoPoolOptions(), std::size_t device_alignment = 4096)
      : recording(std::make_shared<testing::RecordingAllocator>(platform::CUDAPlace(0),
                                                                device_alignment)),
        log(std::make_shared<FreeLog>(recording)),
        alloc(std::make_shared<AutoGrowthBestFitAllocator>(log, platform::CUDAPlace(0),
                                                           std::move(o))) {}
  MemoryStats Stats() const {
    MemoryStats s;
    alloc->CollectStats(&s);
    return s;
  }
  std::shared_ptr<testing::RecordingAllocator> recording;
  std::shared_ptr<FreeLog> log;
  std::shared_ptr<AutoGrowthBestFitAllocator> alloc;
};

// The pool's figures agree with each other and with what it holds below.
inline void ExpectConsistent(const Fixture& f) {
  const MemoryStats s = f.Stats();
  for (auto* arr : {&s.segment, &s.reserved_bytes, &s.inactive_split, &s.inactive_split_bytes}) {
    const auto& a = *arr;
    EXPECT_EQ(a[0].current, a[1].current + a[2].current);
    EXPECT_EQ(a[0].allocated, a[1].allocated + a[2].allocated);
    EXPECT_EQ(a[0].freed, a[1].freed + a[2].freed);
    for (const auto& v : a) {
      EXPECT_GE(v.current, 0);
      EXPECT_GE(v.peak, v.current);
      EXPECT_EQ(v.current, v.allocated - v.freed);
    }
  }
  EXPECT_EQ(s.reserved_bytes[0].current, static_cast<std::int64_t>(f.alloc->reserved_bytes()));
  EXPECT_EQ(s.segment[0].current, static_cast<std::int64_t>(f.alloc->num_chunks()));
  EXPECT_LE(f.alloc->allocated_bytes() + s.inactive_split_bytes[0].current,
            f.alloc->reserved_bytes());
  EXPECT_EQ(s.num_device_alloc - s.num_device_free, s.segment[0].current);
  EXPECT_EQ(f.recording->live_bytes(), f.alloc->reserved_bytes());
  EXPECT_EQ(f.recording->live_blocks(), f.alloc->num_chunks());
}

// Once nothing is live: Release gives back the `bytes` the pool held, the device holds nothing
// more, and the figures agree.
inline void ExpectReleasesEverything(const Fixture& f, std::size_t bytes) {
  EXPECT_EQ(f.alloc->Release(platform::CUDAPlace(0)), bytes);
  EXPECT_EQ(f.recording->live_blocks(), 0u);
  ExpectConsistent(f);
}

}  // namespace strata::strategies::auto_growth_test
