#include "allocation/aligned_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "allocation/bad_alloc.h"
#include "allocation/stat_allocator.h"
#include "support/test_allocators.h"

namespace strata::allocation {
namespace {

bool IsAligned(const void* p, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

// Hands out pointers that are deliberately odd (malloc + 1), to exercise the padding arithmetic
// independently of what malloc happens to return.
class OddAllocator : public Allocator {
 public:
  const char* Name() const override { return "odd"; }
  int live = 0;
  std::vector<std::size_t> requests;

 protected:
  Allocation* AllocateImpl(std::size_t size) override {
    requests.push_back(size);
    char* base = static_cast<char*>(std::malloc(size + 1));
    ++live;
    return new Allocation(base + 1, base, size, platform::CPUPlace());
  }
  void FreeImpl(Allocation* a) override {
    --live;
    std::free(a->base_ptr());
    delete a;
  }
};

TEST(AlignedAllocatorTest, AlignsManySizesAndAlignments) {
  auto odd = std::make_shared<OddAllocator>();
  for (std::size_t alignment = 1; alignment <= 8192; alignment *= 2) {
    AlignedAllocator aligned(odd, alignment);
    EXPECT_EQ(aligned.alignment(), alignment);
    for (std::size_t size : {0, 1, 7, 64, 100, 255, 256, 1000, 4097, 65536}) {
      odd->requests.clear();
      AllocationPtr a = aligned.Allocate(size);
      ASSERT_TRUE(IsAligned(a->ptr(), alignment)) << alignment << " " << size;
      EXPECT_GE(a->size(), size);
      ASSERT_EQ(odd->requests.size(), 1u);
      EXPECT_EQ(odd->requests[0], size + alignment - 1);
      // The usable range lies inside what the underlying handed out.
      EXPECT_LE(static_cast<char*>(a->ptr()) + a->size(),
                static_cast<char*>(a->base_ptr()) + 1 + odd->requests[0]);
      EXPECT_GE(static_cast<char*>(a->ptr()), static_cast<char*>(a->base_ptr()) + 1);
      std::memset(a->ptr(), 0xab, size);  // writable (ASan would catch an overrun)
      EXPECT_EQ(odd->live, 1);
    }
    EXPECT_EQ(odd->live, 0);
  }
}

TEST(AlignedAllocatorTest, PadsByTheUnderlyingAlignmentOnly) {
  auto rec = std::make_shared<testing::RecordingAllocator>(platform::CPUPlace(), 16);
  for (std::size_t alignment : {32, 256, 4096}) {
    AlignedAllocator aligned(rec, alignment, 16);
    for (int i = 0; i < 200; ++i) {
      const std::size_t size = 1 + i * 37;
      AllocationPtr a = aligned.Allocate(size);
      ASSERT_TRUE(IsAligned(a->ptr(), alignment));
      EXPECT_GE(a->size(), size);
      EXPECT_EQ(rec->requests().back(), size + alignment - 16);
    }
  }
  EXPECT_EQ(rec->live_blocks(), 0u);
}

TEST(AlignedAllocatorTest, KeepsTheChainVisibleAndBasePtr) {
  auto odd = std::make_shared<OddAllocator>();
  auto aligned = std::make_shared<AlignedAllocator>(odd, 64);
  auto stat = std::make_shared<StatAllocator>(aligned);
  AllocationPtr a = stat->Allocate(1000);
  ASSERT_EQ(a->num_decorators(), 3);
  EXPECT_EQ(a->decorator(0), odd.get());
  EXPECT_EQ(a->decorator(1), aligned.get());
  EXPECT_EQ(a->decorator(2), stat.get());
  EXPECT_EQ(a->place(), platform::CPUPlace());
  EXPECT_TRUE(IsAligned(a->ptr(), 64));
  EXPECT_NE(a->ptr(), a->base_ptr());  // base_ptr: the underlying's (the odd allocator's base)
  EXPECT_TRUE(IsAligned(a->base_ptr(), 8)) << "base_ptr must be malloc's, not the odd pointer";
  EXPECT_EQ(stat->allocated_bytes_current(), static_cast<std::int64_t>(a->size()));
  a.reset();
  EXPECT_EQ(odd->live, 0);
  EXPECT_EQ(stat->allocated_bytes_current(), 0);
}

TEST(AlignedAllocatorTest, PassThroughWhenUnderlyingAlignmentSuffices) {
  auto rec = std::make_shared<testing::RecordingAllocator>(platform::CPUPlace(), 256);
  AlignedAllocator aligned(rec, 64, 256);
  AllocationPtr a = aligned.Allocate(100);
  EXPECT_EQ(rec->requests().back(), 100u);
  EXPECT_EQ(a->size(), 100u);
  EXPECT_EQ(a->ptr(), a->base_ptr());
  ASSERT_EQ(a->num_decorators(), 2);
  EXPECT_EQ(a->decorator(0), rec.get());
  EXPECT_EQ(a->decorator(1), &aligned);
  a.reset();
  EXPECT_EQ(rec->live_blocks(), 0u);
}

TEST(AlignedAllocatorTest, BrokenUnderlyingPromiseIsReportedWithoutLeak) {
  auto odd = std::make_shared<OddAllocator>();
  AlignedAllocator pass_through(odd, 64, 64);
  EXPECT_THROW(pass_through.Allocate(100), std::logic_error);
  AlignedAllocator padded(odd, 256, 64);
  // Padding of 192 bytes cannot fix an odd pointer (offset 255 may be needed).
  for (int i = 0; i < 20; ++i) {
    try {
      AllocationPtr a = padded.Allocate(100);
      EXPECT_TRUE(IsAligned(a->ptr(), 256));  // malloc + 1 happened to be close enough
    } catch (const std::logic_error&) {
    }
  }
  EXPECT_EQ(odd->live, 0);
}

TEST(AlignedAllocatorTest, RejectsInvalidAlignment) {
  auto rec = std::make_shared<testing::RecordingAllocator>();
  for (std::size_t bad : {0, 3, 6, 24, 100, 1000}) {
    EXPECT_THROW(AlignedAllocator(rec, bad), std::invalid_argument) << bad;
    EXPECT_THROW(AlignedAllocator(rec, 64, bad), std::invalid_argument) << bad;
  }
  EXPECT_NO_THROW(AlignedAllocator(rec, 1));
}

TEST(AlignedAllocatorTest, RejectsOverflowingSize) {
  auto rec = std::make_shared<testing::RecordingAllocator>();
  AlignedAllocator aligned(rec, 4096, 256);
  EXPECT_THROW(aligned.Allocate(std::numeric_limits<std::size_t>::max()), std::invalid_argument);
  EXPECT_THROW(aligned.Allocate(std::numeric_limits<std::size_t>::max() - 100),
               std::invalid_argument);
  EXPECT_EQ(rec->num_allocs(), 0u);
  EXPECT_TRUE(rec->requests().empty());
}

TEST(AlignedAllocatorTest, PropagatesOutOfMemory) {
  auto rec = std::make_shared<testing::RecordingAllocator>(platform::CPUPlace(), 16);
  AlignedAllocator aligned(std::make_shared<testing::LimitedAllocator>(rec, 1000), 64, 16);
  EXPECT_THROW(aligned.Allocate(1000), BadAlloc);  // 1000 + 48 > 1000
  AllocationPtr a = aligned.Allocate(952);
  EXPECT_TRUE(IsAligned(a->ptr(), 64));
}

TEST(AlignedAllocatorTest, RecyclesWrappersWithoutLeaks) {
  auto rec = std::make_shared<testing::RecordingAllocator>(platform::CPUPlace(), 16);
  AlignedAllocator aligned(rec, 128, 16);
  std::vector<AllocationPtr> live;
  for (int i = 0; i < 20000; ++i) {
    live.push_back(aligned.Allocate(64 + i % 300));
    ASSERT_TRUE(IsAligned(live.back()->ptr(), 128));
    if (live.size() > 1500) live.clear();  // more than one ObjectPool cache's worth
  }
  live.clear();
  EXPECT_EQ(rec->live_blocks(), 0u);
  EXPECT_EQ(rec->num_allocs(), 20000u);
  EXPECT_EQ(rec->num_frees(), 20000u);
}

}  // namespace
}  // namespace strata::allocation
