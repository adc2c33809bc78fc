#include "allocation/decorating_allocator.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "facade/scoped_cache_allocator.h"
#include "layers/memory_limit_allocator.h"
#include "layers/retry_allocator.h"
#include "layers/stat_allocator.h"
#include "layers/zero_size_allocator.h"
#include "support/test_allocators.h"

namespace strata::allocation {
namespace {

// The base alone: forwards everything.
class Forwarding : public DecoratingAllocator {
 public:
  explicit Forwarding(std::shared_ptr<Allocator> u)
      : DecoratingAllocator(std::move(u), "Forwarding") {}
  const char* Name() const override { return "forwarding"; }
};

template <typename F>
std::string NullError(F make) {
  try {
    make();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no exception";
}

TEST(DecoratingAllocatorTest, EveryDecoratorRefusesANullUnderlyingAllocator) {
  const platform::Place cpu = platform::CPUPlace();
  EXPECT_EQ(NullError([] { Forwarding f(nullptr); }),
            "Forwarding: the underlying allocator is null");
  EXPECT_NE(NullError([&] { layers::MemoryLimitAllocator m(nullptr, cpu, 0); }).find("MemoryLimit"),
            std::string::npos);
  EXPECT_NE(NullError([] { layers::RetryAllocator r(nullptr, 10); }).find("Retry"),
            std::string::npos);
  EXPECT_NE(NullError([] { layers::StatAllocator s(nullptr); }).find("Stat"), std::string::npos);
  EXPECT_NE(NullError([&] { layers::ZeroSizeAllocator z(nullptr, cpu); }).find("ZeroSize"),
            std::string::npos);
  EXPECT_NE(NullError([&] {
              facade::ScopedCacheAllocator s(nullptr, cpu, platform::Stream{}, nullptr);
            }).find("ScopedCache"),
            std::string::npos);
}

TEST(DecoratingAllocatorTest, ForwardsAllocateFreeReleaseAndStatistics) {
  auto rec = std::make_shared<testing::RecordingAllocator>();
  auto top = std::make_shared<Forwarding>(rec);
  EXPECT_EQ(&top->underlying(), rec.get());
  EXPECT_EQ(top->shared_underlying(), rec);
  {
    AllocationPtr a = top->Allocate(100);
    ASSERT_EQ(a->num_decorators(), 2);
    EXPECT_EQ(a->decorator(0), rec.get());
    EXPECT_EQ(a->decorator(1), top.get());
    EXPECT_EQ(rec->live_blocks(), 1u);
  }
  EXPECT_EQ(rec->live_blocks(), 0u);
  EXPECT_EQ(rec->num_frees(), 1u);
  EXPECT_EQ(top->Release(platform::CPUPlace()), 0u);
}

}  // namespace
}  // namespace strata::allocation
