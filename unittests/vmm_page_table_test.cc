#include "strategies/vmm/page_table.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "allocation/memory_stats.h"
#include "platform/emulated_runtime.h"
#include "support/vmm_pool_fixture.h"

namespace strata::strategies::vmm {
namespace {

using vmm_test::kMiB;
using vmm_test::kPlace;
using vmm_test::Small;

class VmmPageTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    page_ = runtime_.VmmGranularity(0);
    table_ = std::make_unique<PageTable>(&runtime_, kPlace, page_);
    table_->Reserve(16 * page_);
  }
  void TearDown() override {
    table_->Teardown();
    EXPECT_EQ(runtime_.used_bytes(0), 0u);
  }
  std::vector<std::int32_t> IdleList() const {
    std::vector<std::int32_t> ys;
    for (std::int32_t y = table_->idle_head(); y >= 0; y = table_->phys(y).idle_next) {
      ys.push_back(y);
    }
    return ys;
  }

  platform::EmulatedRuntime runtime_{Small()};
  std::size_t page_ = 0;
  std::unique_ptr<PageTable> table_;
};

TEST_F(VmmPageTableTest, CreateMapUnmapReleaseCountsEveryCall) {
  const std::int32_t y = table_->Create();
  ASSERT_GE(y, 0);
  EXPECT_EQ(table_->phys(y).state, PhysState::kTaken);
  table_->MapAt(3, y);
  table_->MapAt(5, y);  // an alias
  table_->Move(y, PhysState::kInUse);
  EXPECT_EQ(table_->phys(y).maps, 2u);
  EXPECT_EQ(table_->mapped_bytes(), 2 * page_);
  EXPECT_TRUE(table_->MappedBelow(table_->phys(y), 0, 5));
  EXPECT_FALSE(table_->MappedBelow(table_->phys(y), 4, 5));
  table_->Move(y, PhysState::kIdle);
  table_->UnmapAll(y);
  EXPECT_EQ(table_->page(3).phys, -1);
  table_->AddSpare(y);
  table_->ReleaseSpares();
  allocation::MemoryStats s;
  table_->CollectStats(&s);
  EXPECT_EQ(s.num_device_alloc, 1);
  EXPECT_EQ(s.num_device_free, 1);
  EXPECT_EQ(s.num_device_map, 2);
  EXPECT_EQ(s.num_device_unmap, 2);
  EXPECT_EQ(s.reserved_bytes[allocation::kAggregate].peak, static_cast<std::int64_t>(page_));
  EXPECT_EQ(table_->physical_bytes(), 0u);
}

TEST_F(VmmPageTableTest, IllegalTransitionsThrowAndChangeNothing) {
  const std::int32_t y = table_->Create();
  EXPECT_THROW(table_->Move(y, PhysState::kTaken), std::logic_error);
  table_->MapAt(0, y);
  table_->Move(y, PhysState::kInUse);
  EXPECT_THROW(table_->Move(y, PhysState::kSpare), std::logic_error);  // mapped and used
  EXPECT_THROW(table_->Move(y, PhysState::kTaken), std::logic_error);  // borrowed while used
  EXPECT_EQ(table_->phys(y).state, PhysState::kInUse);
  EXPECT_EQ(table_->idle_head(), -1);
  table_->Move(y, PhysState::kIdle);
  EXPECT_THROW(table_->Move(y, PhysState::kIdle), std::logic_error);
  EXPECT_EQ(IdleList(), std::vector<std::int32_t>{y}) << "listed once";
}

TEST(VmmPageTableTransitions, TheCheckAgreesWithTheTableForEveryPair) {
  // Move checks a bit mask built from kLegalMove; every pair of states must read the same.
  for (int from = 0; from < kNumPhysStates; ++from) {
    for (int to = 0; to < kNumPhysStates; ++to) {
      EXPECT_EQ(IsLegalMove(static_cast<PhysState>(from), static_cast<PhysState>(to)),
                kLegalMove[from][to])
          << ToString(static_cast<PhysState>(from)) << " -> "
          << ToString(static_cast<PhysState>(to));
    }
  }
}

TEST_F(VmmPageTableTest, TheIdleListKeepsIdleOrder) {
  std::vector<std::int32_t> ys;
  for (std::size_t i = 0; i < 3; ++i) {
    ys.push_back(table_->Create());
    table_->MapAt(i, ys.back());
    table_->Move(ys.back(), PhysState::kInUse);
  }
  table_->Move(ys[1], PhysState::kIdle);
  table_->Move(ys[0], PhysState::kIdle);
  table_->Move(ys[2], PhysState::kIdle);
  EXPECT_EQ(IdleList(), (std::vector<std::int32_t>{ys[1], ys[0], ys[2]}));
  table_->Move(ys[0], PhysState::kInUse);  // its own range takes it back
  EXPECT_EQ(IdleList(), (std::vector<std::int32_t>{ys[1], ys[2]}));
  table_->Move(ys[1], PhysState::kTaken);  // borrowed
  EXPECT_EQ(IdleList(), (std::vector<std::int32_t>{ys[2]}));
  table_->Move(ys[1], PhysState::kIdle);  // put back
  EXPECT_EQ(IdleList(), (std::vector<std::int32_t>{ys[2], ys[1]}));
}

TEST_F(VmmPageTableTest, TheLimitRefusesCreation) {
  table_->set_memory_limit(2 * page_);
  const std::int32_t a = table_->Create(2);
  ASSERT_GE(a, 0);
  EXPECT_TRUE(table_->PassesLimit(1));
  EXPECT_EQ(table_->Create(), -1);
  table_->Release(a);
  EXPECT_FALSE(table_->PassesLimit(page_));
}

TEST_F(VmmPageTableTest, ExtentsMapRunsOfUnmappedPagesWhole) {
  const std::int32_t single = table_->Create();
  table_->MapAt(2, single);
  table_->Move(single, PhysState::kInUse);
  // Pages 0-1 and 3-6 are unmapped: two extents (2 and 4 pages, at most 4 each).
  EXPECT_EQ(table_->MapExtents(0, 6, 4), 6u);
  const std::int32_t e = table_->page(3).phys;
  EXPECT_EQ(table_->phys(e).pages, 4u);
  EXPECT_EQ(table_->phys(e).state, PhysState::kInUse);
  EXPECT_EQ(table_->page(6).phys, e);
  EXPECT_NE(table_->page(0).phys, e);
  table_->phys(e).live_pages = 0;
  table_->Move(e, PhysState::kIdle);
  table_->UnmapExtent(e);
  table_->Release(e);
  EXPECT_EQ(table_->page(4).phys, -1);
  allocation::MemoryStats s;
  table_->CollectStats(&s);
  EXPECT_EQ(s.num_device_map, 3);  // one page and two extents
  EXPECT_EQ(s.num_device_unmap, 1);
}

}  // namespace
}  // namespace strata::strategies::vmm
