// Out-of-memory observers of AllocatorFacade (AddOomObserver).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "allocation/bad_alloc.h"
#include "facade/allocator_facade.h"
#include "nlohmann/json.hpp"
#include "platform/emulated_runtime.h"

namespace strata::facade {
namespace {

using allocation::kAggregate;
using platform::CUDAPlace;

constexpr std::size_t kMiB = std::size_t{1} << 20;

flags::AllocatorFlags Flags() {
  flags::AllocatorFlags f = flags::AllocatorFlags::Defaults();
  f.gpu_allocator_retry_time = 0;
  return f;
}

class OomObserverTest : public ::testing::Test {
 protected:
  platform::EmulatedRuntime runtime_{{.device_count = 1, .capacity_bytes = 64 * kMiB}};
  AllocatorFacade facade_{&runtime_, Flags()};
};

TEST_F(OomObserverTest, CalledOncePerSurfacingOomWithTheFigures) {
  std::vector<AllocatorFacade::OomReport> reports;
  facade_.AddOomObserver([&](const AllocatorFacade::OomReport& r) { reports.push_back(r); });
  auto live = facade_.Alloc(CUDAPlace(0), 10 * kMiB);
  EXPECT_THROW(facade_.Alloc(CUDAPlace(0), 100 * kMiB), allocation::BadAlloc);
  ASSERT_EQ(reports.size(), 1u);
  const AllocatorFacade::OomReport& r = reports[0];
  EXPECT_EQ(r.place, CUDAPlace(0));
  EXPECT_EQ(r.requested, 100 * kMiB);
  EXPECT_EQ(r.stats.allocated_bytes[kAggregate].current, static_cast<std::int64_t>(10 * kMiB));
  EXPECT_EQ(r.stats.num_ooms, 1);
  EXPECT_TRUE(r.snapshot.empty());
  EXPECT_TRUE(absl::StrContains(r.message, "out of memory")) << r.message;
  EXPECT_THROW(facade_.Alloc(CUDAPlace(0), 200 * kMiB), allocation::BadAlloc);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[1].requested, 200 * kMiB);
  EXPECT_EQ(reports[1].stats.num_ooms, 2);
  // Allocations that succeed call nothing.
  auto more = facade_.Alloc(CUDAPlace(0), kMiB);
  EXPECT_EQ(reports.size(), 2u);
}

TEST_F(OomObserverTest, ASnapshotComesWhenAskedFor) {
  std::string snapshot;
  facade_.AddOomObserver([&](const AllocatorFacade::OomReport& r) { snapshot = r.snapshot; },
                         /*with_snapshot=*/true);
  auto live = facade_.Alloc(CUDAPlace(0), 3 * kMiB);
  EXPECT_THROW(facade_.Alloc(CUDAPlace(0), 100 * kMiB), allocation::BadAlloc);
  ASSERT_FALSE(snapshot.empty());
  const nlohmann::json j = nlohmann::json::parse(snapshot);
  ASSERT_FALSE(j["segments"].empty());
  EXPECT_EQ(j["segments"][0]["blocks"][0]["requested_size"], 3 * kMiB);
}

TEST_F(OomObserverTest, RemovedObserversAreNotCalledAndUnknownIdsAreRefused) {
  int calls = 0;
  const int id = facade_.AddOomObserver([&](const AllocatorFacade::OomReport&) { ++calls; });
  facade_.RemoveOomObserver(id);
  EXPECT_THROW(facade_.Alloc(CUDAPlace(0), 100 * kMiB), allocation::BadAlloc);
  EXPECT_EQ(calls, 0);
  EXPECT_THROW(facade_.RemoveOomObserver(id), std::invalid_argument);
  EXPECT_THROW(facade_.AddOomObserver(nullptr), std::invalid_argument);
}

TEST_F(OomObserverTest, AThrowingOrAllocatingObserverDoesNotChangeTheOom) {
  int calls = 0;
  facade_.AddOomObserver([&](const AllocatorFacade::OomReport&) {
    ++calls;
    throw std::runtime_error("observer bug");
  });
  facade_.AddOomObserver([&](const AllocatorFacade::OomReport&) {
    ++calls;
    // Fails too: no observer hears of this one.
    EXPECT_THROW(facade_.Alloc(CUDAPlace(0), 500 * kMiB), allocation::BadAlloc);
  });
  EXPECT_THROW(facade_.Alloc(CUDAPlace(0), 100 * kMiB), allocation::BadAlloc);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace strata::facade
