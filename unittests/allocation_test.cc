#include "allocation/allocation.h"

#include <gtest/gtest.h>

#include "allocation/allocator.h"
#include "allocation/decorating_allocator.h"
#include "support/shared_copies.h"
#include "support/test_allocators.h"

namespace strata::allocation {
namespace {

using testing::PassThroughAllocator;

TEST(AllocationTest, DecoratorStackRecordsLayersInnermostFirst) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  auto mid = std::make_shared<PassThroughAllocator>(base);
  auto top = std::make_shared<PassThroughAllocator>(mid);
  {
    AllocationPtr a = top->Allocate(100);
    ASSERT_EQ(a->num_decorators(), 3);
    EXPECT_EQ(a->decorator(0), base.get());
    EXPECT_EQ(a->decorator(1), mid.get());
    EXPECT_EQ(a->decorator(2), top.get());
    EXPECT_EQ(a->TopDecoratedAllocator(), top.get());
    EXPECT_EQ(base->live_blocks(), 1u);
  }
  EXPECT_EQ(top->num_frees(), 1u);
  EXPECT_EQ(mid->num_frees(), 1u);
  EXPECT_EQ(base->live_blocks(), 0u);
}

// Another class under the same name string: layers are told apart by their own kName.
class SameNameString : public DecoratingAllocator {
 public:
  static constexpr char kName[] = "pass_through";
  explicit SameNameString(std::shared_ptr<Allocator> u)
      : DecoratingAllocator(std::move(u), kName) {}
  const char* Name() const override { return kName; }
};

TEST(AllocationTest, LayersAreFoundByType) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  auto mid = std::make_shared<PassThroughAllocator>(base);
  auto same_name = std::make_shared<SameNameString>(mid);
  auto top = std::make_shared<PassThroughAllocator>(same_name);
  EXPECT_EQ(AsLayer<PassThroughAllocator>(*mid), mid.get());
  EXPECT_EQ(AsLayer<PassThroughAllocator>(*same_name), nullptr);
  EXPECT_EQ(AsLayer<SameNameString>(*same_name), same_name.get());
  const Allocator& const_base = *base;
  EXPECT_EQ(AsLayer<PassThroughAllocator>(const_base), nullptr);

  AllocationPtr a = top->Allocate(100);
  EXPECT_EQ(FindLayer<PassThroughAllocator>(*a), top.get()) << "the outermost one";
  EXPECT_EQ(FindLayer<SameNameString>(*a), same_name.get());
  AllocationPtr b = mid->Allocate(100);
  EXPECT_EQ(FindLayer<SameNameString>(*b), nullptr);
}

TEST(AllocationTest, SharedFormFreesOnLastReference) {
  auto base = std::make_shared<testing::RecordingAllocator>();
  testing::DropSharedCopies(base->Allocate(64),
                            [&](const Allocation&) { EXPECT_EQ(base->live_blocks(), 1u); });
  EXPECT_EQ(base->live_blocks(), 0u);
}

TEST(AllocationTest, TooDeepChainIsALogicError) {
  Allocation a(nullptr, 0, platform::CPUPlace());
  for (int i = 0; i < Allocation::kMaxDecorators; ++i) a.RegisterDecoratedAllocator(nullptr);
  EXPECT_THROW(a.RegisterDecoratedAllocator(nullptr), std::logic_error);
}

}  // namespace
}  // namespace strata::allocation
