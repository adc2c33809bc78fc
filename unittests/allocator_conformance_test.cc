// One suite over every allocator configuration (support/allocator_factories.h): each pooling
// strategy with a few option sets, and whole facade chains per flag set, all on the emulated
// runtime (whose device memory is host-mapped, so the tests write and check it directly).
//
// What every configuration must do: aligned, writable blocks that never overlap; size 0 as its
// contract says; absurd sizes refused with the promised exception and nothing lost; Release
// giving back exactly the reserved bytes; consistent statistics; bad frees detected where
// promised; and all of it under concurrent allocation and free across threads and streams.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "allocation/bad_alloc.h"
#include "allocation/memory_stats.h"
#include "platform/emulated_runtime.h"
#include "support/allocator_factories.h"
#include "support/threads.h"

namespace strata::testing {
namespace {

using allocation::AllocationPtr;
using allocation::kAggregate;
using allocation::kLargePool;
using allocation::kSmallPool;
using allocation::MemoryStats;
using allocation::StatArray;
using platform::Stream;

constexpr std::size_t kKiB = std::size_t{1} << 10;
constexpr std::size_t kMiB = std::size_t{1} << 20;

// ---- block contents -----------------------------------------------------------------------------

// A block holds its 8-byte tag at both ends and a byte derived from the tag in between, so a
// block overlapping another, or written by someone else, fails Intact.
unsigned char FillByte(std::uint64_t tag) {
  return static_cast<unsigned char>((tag * 0x9E3779B97F4A7C15ull) >> 56);
}

void Fill(void* ptr, std::size_t size, std::uint64_t tag) {
  auto* p = static_cast<unsigned char*>(ptr);
  std::memset(p, FillByte(tag), size);
  if (size >= 2 * sizeof(tag)) {
    std::memcpy(p, &tag, sizeof(tag));
    std::memcpy(p + size - sizeof(tag), &tag, sizeof(tag));
  }
}

bool Intact(const void* ptr, std::size_t size, std::uint64_t tag) {
  const auto* p = static_cast<const unsigned char*>(ptr);
  std::size_t begin = 0, end = size;
  if (size >= 2 * sizeof(tag)) {
    if (std::memcmp(p, &tag, sizeof(tag)) != 0) return false;
    if (std::memcmp(p + size - sizeof(tag), &tag, sizeof(tag)) != 0) return false;
    begin += sizeof(tag);
    end -= sizeof(tag);
  }
  if (begin == end) return true;
  // Every byte equals the first, which is the fill byte: one memcmp.
  return p[begin] == FillByte(tag) && std::memcmp(p + begin, p + begin + 1, end - begin - 1) == 0;
}

struct Block {
  AllocationPtr allocation;
  std::uint64_t tag = 0;
  bool intact() const { return Intact(allocation->ptr(), allocation->size(), tag); }
};

// ---- statistics ---------------------------------------------------------------------------------

// Identities every layer's figures keep at a quiet moment (no call in flight).
void ExpectConsistent(const MemoryStats& s, const std::string& when) {
  SCOPED_TRACE(when);
  for (const auto& [name, array] : allocation::StatArrays(s)) {
    for (int p = 0; p < allocation::kNumStatPools; ++p) {
      const allocation::StatValue& v = (*array)[p];
      EXPECT_GE(v.current, 0) << name << " pool " << p;
      EXPECT_EQ(v.current, v.allocated - v.freed) << name << " pool " << p;
      EXPECT_GE(v.peak, v.current) << name << " pool " << p;
    }
    EXPECT_EQ((*array)[kSmallPool].current + (*array)[kLargePool].current,
              (*array)[kAggregate].current)
        << name;
  }
  const auto current = [](const StatArray& a) { return a[kAggregate].current; };
  EXPECT_LE(current(s.allocated_bytes), current(s.reserved_bytes));
  EXPECT_LE(current(s.allocated_bytes) + current(s.inactive_split_bytes),
            current(s.reserved_bytes));
  EXPECT_LE(current(s.requested_bytes), current(s.allocated_bytes));
  EXPECT_LE(current(s.allocation), current(s.active));
  EXPECT_LE(current(s.allocated_bytes), current(s.active_bytes));
  EXPECT_EQ(current(s.segment), s.num_device_alloc - s.num_device_free);
}

// Nothing is live, nothing is cached.
void ExpectEmpty(const MemoryStats& s, const std::string& when) {
  SCOPED_TRACE(when);
  for (const auto& [name, array] : allocation::StatArrays(s)) {
    for (int p = 0; p < allocation::kNumStatPools; ++p) {
      EXPECT_EQ((*array)[p].current, 0) << name << " pool " << p;
    }
  }
  EXPECT_EQ(s.num_device_alloc, s.num_device_free);
}

// Everything but the counters of failures (num_ooms, num_alloc_retries).
void ExpectSameFigures(const MemoryStats& a, const MemoryStats& b) {
  const auto x = allocation::StatArrays(a), y = allocation::StatArrays(b);
  for (std::size_t i = 0; i < x.size(); ++i) {
    for (int p = 0; p < allocation::kNumStatPools; ++p) {
      const allocation::StatValue &u = (*x[i].array)[p], &v = (*y[i].array)[p];
      EXPECT_EQ(u.current, v.current) << x[i].name << " pool " << p;
      EXPECT_EQ(u.peak, v.peak) << x[i].name << " pool " << p;
      EXPECT_EQ(u.allocated, v.allocated) << x[i].name << " pool " << p;
      EXPECT_EQ(u.freed, v.freed) << x[i].name << " pool " << p;
    }
  }
  EXPECT_EQ(a.num_device_alloc, b.num_device_alloc);
  EXPECT_EQ(a.num_device_free, b.num_device_free);
  EXPECT_EQ(a.oversize_segments.current, b.oversize_segments.current);
}

// ---- the suite ----------------------------------------------------------------------------------

class AllocatorConformance : public ::testing::TestWithParam<AllocatorFactory> {
 protected:
  void SetUp() override { allocator_ = GetParam().make(&runtime_); }

  void TearDown() override {
    allocator_.reset();
    // Whatever the test did, destroying the chain gives every device byte back.
    EXPECT_EQ(runtime_.used_bytes(0), 0u);
  }

  AllocationPtr Allocate(std::size_t size, Stream stream = Stream{}) {
    return allocator_->Allocate(size, stream);
  }

  // Frees nothing itself: checks that with nothing live, Release empties the chain.
  void ExpectReleaseEmpties(const std::string& when) {
    const MemoryStats before = allocator_->Stats();
    EXPECT_EQ(allocator_->AllocatedBytes(), 0) << when;
    EXPECT_EQ(allocator_->Release(),
              static_cast<std::uint64_t>(before.reserved_bytes[kAggregate].current))
        << when;
    const MemoryStats after = allocator_->Stats();
    ExpectConsistent(after, when + ", after Release");
    ExpectEmpty(after, when + ", after Release");
    EXPECT_EQ(runtime_.used_bytes(0), 0u) << when;
  }

  // Address space only: untouched pages cost nothing.
  platform::EmulatedRuntime runtime_{{.device_count = 1, .capacity_bytes = std::size_t{4} << 30}};
  std::unique_ptr<AllocatorUnderTest> allocator_;
};

TEST_P(AllocatorConformance, AlignedWritableAndDisjoint) {
  const std::size_t alignment = GetParam().alignment;
  std::vector<std::size_t> sizes = {1, 7, 255, 256, 257, 511, 512, 513, 1000, 4095, 4097, 65537};
  sizes.insert(sizes.end(), {kMiB - 1, kMiB, kMiB + 1, 2 * kMiB + 3, 3 * kMiB, 21 * kMiB + 5,
                             40 * kMiB + 1});  // small / large pool, oversize blocks
  for (std::size_t i = 1; i <= 64; ++i) sizes.push_back(i * 97);  // many small odd sizes
  std::vector<Block> live;
  std::uint64_t tag = 0;
  for (std::size_t size : sizes) {
    Block b{Allocate(size), ++tag};
    const allocation::Allocation& a = *b.allocation;
    ASSERT_NE(a.ptr(), nullptr) << size;
    EXPECT_GE(a.size(), size);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.ptr()) % alignment, 0u)
        << size << " bytes at " << a.ptr();
    EXPECT_EQ(a.place(), allocator_->place());
    Fill(a.ptr(), a.size(), b.tag);  // the whole usable size is writable
    live.push_back(std::move(b));
  }
  EXPECT_EQ(allocator_->AllocatedBytes(), [&] {
    std::int64_t sum = 0;
    for (const Block& b : live) sum += static_cast<std::int64_t>(b.allocation->size());
    return sum;
  }());
  for (const Block& b : live) EXPECT_TRUE(b.intact()) << "block " << b.tag << " overwritten";
  ExpectConsistent(allocator_->Stats(), "all live");
  live.clear();
  ExpectReleaseEmpties("all freed");
}

TEST_P(AllocatorConformance, SizeZero) {
  AllocationPtr a = Allocate(0);
  AllocationPtr other = Allocate(100);
  AllocationPtr b = Allocate(0);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->place(), allocator_->place());
  if (GetParam().zero_size == AllocatorFactory::ZeroSize::kEmpty) {
    EXPECT_EQ(a->ptr(), nullptr);
    EXPECT_EQ(a->size(), 0u);
    EXPECT_EQ(b->ptr(), nullptr);
    EXPECT_EQ(b->size(), 0u);
  } else {
    ASSERT_NE(a->ptr(), nullptr);
    ASSERT_NE(b->ptr(), nullptr);
    EXPECT_NE(a->ptr(), b->ptr());
    EXPECT_GE(a->size(), 1u);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a->ptr()) % GetParam().alignment, 0u);
    Fill(a->ptr(), a->size(), 1);
    Fill(b->ptr(), b->size(), 2);
    EXPECT_TRUE(Intact(a->ptr(), a->size(), 1));
  }
  Fill(other->ptr(), other->size(), 3);
  EXPECT_TRUE(Intact(other->ptr(), other->size(), 3));
  ExpectConsistent(allocator_->Stats(), "size-0 allocations live");
  a.reset();
  b.reset();
  other.reset();
  ExpectReleaseEmpties("size-0 allocations freed");
}

TEST_P(AllocatorConformance, AbsurdSizesLoseNothing) {
  // Live blocks and no idle chunk: an out-of-memory path that releases idle caches finds none,
  // so every figure must stay as it is.
  std::vector<Block> live;
  live.push_back({Allocate(1000), 1});
  live.push_back({Allocate(3 * kMiB), 2});
  for (Block& b : live) Fill(b.allocation->ptr(), b.allocation->size(), b.tag);
  const MemoryStats before = allocator_->Stats();
  const std::size_t device_before = runtime_.used_bytes(0);

  const std::size_t max_request = GetParam().max_request;
  for (std::size_t size :
       {std::size_t{1} << 61, std::size_t{1} << 62, std::size_t{1} << 63, SIZE_MAX - 1, SIZE_MAX}) {
    SCOPED_TRACE(size);
    if (size > max_request) {
      EXPECT_THROW(Allocate(size), std::invalid_argument);
    } else {
      EXPECT_THROW(Allocate(size), allocation::BadAlloc);
    }
  }
  ExpectSameFigures(before, allocator_->Stats());
  EXPECT_EQ(runtime_.used_bytes(0), device_before);

  // Still works.
  live.push_back({Allocate(5 * kMiB), 3});
  Fill(live.back().allocation->ptr(), live.back().allocation->size(), 3);
  for (const Block& b : live) EXPECT_TRUE(b.intact()) << b.tag;
  ExpectConsistent(allocator_->Stats(), "after the refusals");
  live.clear();
  ExpectReleaseEmpties("after the refusals");
}

TEST_P(AllocatorConformance, ReleaseReturnsExactlyTheReservedBytes) {
  std::mt19937_64 rng(7);
  std::vector<AllocationPtr> live;
  for (int i = 0; i < 300; ++i) {
    const std::size_t size = i % 40 == 0 ? kMiB + rng() % (12 * kMiB) : 1 + rng() % (96 * kKiB);
    live.push_back(Allocate(size));
    if (rng() % 3 == 0) live.erase(live.begin() + static_cast<long>(rng() % live.size()));
  }
  ExpectConsistent(allocator_->Stats(), "blocks live");
  live.clear();
  ExpectReleaseEmpties("everything freed");
  EXPECT_EQ(allocator_->Release(), 0u) << "a second Release has nothing to give";
}

// reserved_bytes is what the chain holds from the device, as the device counts it (2 MiB
// granules), whichever path a request takes (pooled, oversize, bypassing the pool).
TEST_P(AllocatorConformance, ReservedBytesAreWhatTheDeviceHolds) {
  if (!GetParam().known_reserved_bug.empty()) GTEST_SKIP() << GetParam().known_reserved_bug;
  const auto expect_match = [&](const std::string& when) {
    EXPECT_EQ(allocator_->Stats().reserved_bytes[kAggregate].current,
              static_cast<std::int64_t>(runtime_.used_bytes(0)))
        << when;
  };
  std::vector<AllocationPtr> live;
  for (std::size_t size : {std::size_t{1000}, 100 * kKiB, 3 * kMiB + 1, 5 * kMiB + 1, 40 * kMiB + 1,
                           70 * kMiB + 3, 2 * kMiB, 300 * kKiB + 7, 300 * kMiB + 5}) {
    live.push_back(Allocate(size));
    expect_match("after allocating " + std::to_string(size) + " bytes");
  }
  for (std::size_t i = 0; i < live.size(); i += 2) live[i].reset();
  expect_match("half freed");
  live.clear();
  expect_match("all freed");
  allocator_->Release();
  expect_match("released");
}

TEST_P(AllocatorConformance, StatisticsIdentities) {
  std::mt19937_64 rng(11);
  std::vector<AllocationPtr> live;
  std::int64_t live_bytes = 0, peak_reserved_seen = 0;
  for (int step = 0; step < 1500; ++step) {
    if (live.empty() || rng() % 100 < 55) {
      const std::size_t size = rng() % 25 == 0 ? rng() % (24 * kMiB) : rng() % (64 * kKiB);
      live.push_back(Allocate(size));
      live_bytes += static_cast<std::int64_t>(live.back()->size());
    } else {
      std::swap(live[rng() % live.size()], live.back());
      live_bytes -= static_cast<std::int64_t>(live.back()->size());
      live.pop_back();
    }
    if (step % 50 == 0) {
      const MemoryStats s = allocator_->Stats();
      ExpectConsistent(s, "step " + std::to_string(step));
      peak_reserved_seen = std::max(peak_reserved_seen, s.reserved_bytes[kAggregate].current);
      EXPECT_GE(s.reserved_bytes[kAggregate].peak, peak_reserved_seen);
      ASSERT_EQ(allocator_->AllocatedBytes(), live_bytes) << "step " << step;
      if (step == 750) allocator_->Release();  // a cache given back midway changes no identity
    }
  }
  live.clear();
  const MemoryStats freed = allocator_->Stats();
  ExpectConsistent(freed, "all freed");
  EXPECT_EQ(freed.allocation[kAggregate].current, 0);
  EXPECT_EQ(freed.allocated_bytes[kAggregate].current, 0);
  EXPECT_EQ(freed.requested_bytes[kAggregate].current, 0);
  EXPECT_EQ(freed.active_bytes[kAggregate].current, 0);
  ExpectReleaseEmpties("all freed");
}

TEST_P(AllocatorConformance, BadFreeIsDetectedAndLosesNothing) {
  if (!GetParam().no_bad_free_detection.empty()) {
    GTEST_SKIP() << GetParam().no_bad_free_detection;
  }
  std::vector<AllocationPtr> keep;
  keep.push_back(Allocate(1000));
  AllocationPtr victim = Allocate(1000);
  keep.push_back(Allocate(1000));

  // A second Free of the same Allocation.
  allocation::Allocation* raw = victim.release();
  allocation::Allocator* top = raw->TopDecoratedAllocator();
  ASSERT_NE(top, nullptr);
  top->Free(raw);
  const MemoryStats after_free = allocator_->Stats();
  raw->RegisterDecoratedAllocator(top);
  EXPECT_THROW(top->Free(raw), std::invalid_argument);
  ExpectSameFigures(after_free, allocator_->Stats());

  // Another instance's Allocation: refused, and it can still be freed where it belongs.
  std::unique_ptr<AllocatorUnderTest> other = GetParam().make(&runtime_);
  allocation::Allocation* foreign = other->Allocate(1000, Stream{}).release();
  allocation::Allocator* foreign_top = foreign->TopDecoratedAllocator();
  const MemoryStats before_foreign = allocator_->Stats();
  EXPECT_THROW(top->Free(foreign), std::invalid_argument);
  ExpectSameFigures(before_foreign, allocator_->Stats());
  foreign->RegisterDecoratedAllocator(foreign_top);
  AllocationPtr(foreign).reset();
  EXPECT_EQ(other->AllocatedBytes(), 0);
  other.reset();

  // Still works, and everything comes back.
  keep.push_back(Allocate(5000));
  Fill(keep.back()->ptr(), keep.back()->size(), 9);
  EXPECT_TRUE(Intact(keep.back()->ptr(), keep.back()->size(), 9));
  keep.clear();
  ExpectReleaseEmpties("after the bad frees");
}

// Sixteen threads (a framework's data loaders, inference workers and autograd threads at once;
// also run under TSan and ASan) allocate on random streams, write a per-block pattern, keep some
// blocks, hand others to other threads, and check each block before it is freed. On stream-safe
// chains some blocks are also used by a task on another stream (RecordStream) that checks them
// there: they must not be handed out again before that task ran. One thread releases the caches
// midway.
TEST_P(AllocatorConformance, ConcurrentAllocFreeAcrossStreams) {
  constexpr int kThreads = 16, kStreams = 3, kSteps = 2000;
  std::vector<Stream> streams;
  for (int i = 0; i < kStreams; ++i) streams.push_back(runtime_.CreateStream(0));
  absl::Mutex mu;
  std::deque<Block> handoff;
  std::atomic<int> corrupted{0}, recorded{0};
  testing::RunThreads(kThreads, [&](int t) {
    std::mt19937_64 rng(1000 + t);
    std::vector<Block> mine;
    for (int step = 0; step < kSteps; ++step) {
      const unsigned op = rng() % 10;
      if (op < 5 || mine.empty()) {
        const unsigned kind = rng() % 256;
        const std::size_t size = kind == 0  ? 1 + rng() % (6 * kMiB)
                                 : kind < 8 ? 1 + rng() % (512 * kKiB)
                                            : 1 + rng() % (8 * kKiB);
        const Stream stream = streams[rng() % kStreams];
        Block b{Allocate(size, stream), (static_cast<std::uint64_t>(t) << 40) | step};
        Fill(b.allocation->ptr(), b.allocation->size(), b.tag);
        if (GetParam().stream_safe && rng() % 8 == 0) {
          const Stream user = streams[rng() % kStreams];
          if (allocator_->RecordStream(*b.allocation, user)) {
            ++recorded;
            runtime_.LaunchHostTask(
                user, [&corrupted, p = b.allocation->ptr(), n = b.allocation->size(), tag = b.tag] {
                  if (!Intact(p, n, tag)) ++corrupted;
                });
          }
        }
        if (op == 0) {
          absl::MutexLock lock(&mu);
          handoff.push_back(std::move(b));
        } else {
          mine.push_back(std::move(b));
        }
      } else if (op < 8) {
        std::swap(mine[rng() % mine.size()], mine.back());
        if (!mine.back().intact()) ++corrupted;
        mine.pop_back();
      } else {
        Block b;
        {
          absl::MutexLock lock(&mu);
          if (handoff.empty()) continue;
          b = std::move(handoff.front());
          handoff.pop_front();
        }
        if (!b.intact()) ++corrupted;  // freed on another thread than its own
      }
      if (mine.size() > 48) {
        if (!mine.front().intact()) ++corrupted;
        mine.erase(mine.begin());
      }
      if (t == 0 && step == kSteps / 2) allocator_->Release();
    }
    for (const Block& b : mine) {
      if (!b.intact()) ++corrupted;
    }
  });
  for (const Block& b : handoff) EXPECT_TRUE(b.intact()) << b.tag;
  handoff.clear();
  runtime_.SynchronizeDevice(0);  // the checking tasks ran
  EXPECT_EQ(corrupted.load(), 0);
  if (GetParam().stream_safe) {
    EXPECT_GT(recorded.load(), 0);
  }

  const MemoryStats s = allocator_->Stats();
  ExpectConsistent(s, "all freed");
  EXPECT_EQ(s.allocation[kAggregate].current, 0);
  EXPECT_EQ(s.allocated_bytes[kAggregate].current, 0);
  ExpectReleaseEmpties("after the threads");
  for (Stream stream : streams) runtime_.DestroyStream(stream);
}

INSTANTIATE_TEST_SUITE_P(Conformance, AllocatorConformance,
                         ::testing::ValuesIn(AllocatorFactories()),
                         [](const ::testing::TestParamInfo<AllocatorFactory>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace strata::testing
