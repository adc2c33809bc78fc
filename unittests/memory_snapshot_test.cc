#include "allocation/memory_snapshot.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>

#include "facade/allocator_facade.h"
#include "facade/cache_scope.h"
#include "nlohmann/json.hpp"
#include "platform/emulated_runtime.h"
#include "platform/fault_injection_runtime.h"

namespace strata::facade {
namespace {

using platform::CUDAPlace;
using platform::Stream;

flags::AllocatorFlags Flags() {
  flags::AllocatorFlags f = flags::AllocatorFlags::Defaults();
  f.gpu_allocator_retry_time = 0;
  return f;
}

struct Totals {
  std::map<std::string, std::uint64_t> bytes;      // by state
  std::map<std::string, std::uint64_t> requested;  // by state
  std::uint64_t segments = 0;
  std::map<std::string, int> pools;
};

// Sums the snapshot, checking that each segment's blocks tile it in address order.
Totals Sum(const nlohmann::json& snapshot) {
  Totals t;
  std::uint64_t last_end = 0;
  for (const auto& s : snapshot["segments"]) {
    const std::uint64_t address = s["address"], size = s["size"];
    EXPECT_GE(address, last_end) << "segments overlap or are out of order";
    last_end = address + size;
    t.segments += size;
    ++t.pools[s["pool"]];
    std::uint64_t at = address;
    for (const auto& b : s["blocks"]) {
      EXPECT_EQ(b["address"].get<std::uint64_t>(), at) << "blocks must tile their segment";
      at += b["size"].get<std::uint64_t>();
      t.bytes[b["state"]] += b["size"].get<std::uint64_t>();
      t.requested[b["state"]] += b["requested_size"].get<std::uint64_t>();
    }
    EXPECT_EQ(at, address + size) << "blocks must tile their segment";
  }
  return t;
}

std::int64_t Stat(const nlohmann::json& snapshot, const std::string& key) {
  return snapshot["stats"][key].get<std::int64_t>();
}

TEST(MemorySnapshotTest, BlocksAddUpToTheStatisticsAndSegmentsToTheDevice) {
  platform::EmulatedRuntime emulated({.device_count = 1, .capacity_bytes = std::size_t{1} << 30});
  platform::FaultInjectionRuntime runtime(&emulated);
  flags::AllocatorFlags f = Flags();
  f.use_virtual_memory_auto_growth = false;  // a pool per stream (the shared pool's: below)
  AllocatorFacade facade(&runtime, f);
  const Stream side = runtime.CreateStream(0);
  auto a = facade.Alloc(CUDAPlace(0), 1000);
  auto b = facade.Alloc(CUDAPlace(0), 3 << 20, side);
  auto c = facade.Alloc(CUDAPlace(0), 5000);
  auto pending = facade.Alloc(CUDAPlace(0), 70000);
  auto freed = facade.Alloc(CUDAPlace(0), 2 << 20);
  runtime.HoldEvents(true);
  ASSERT_TRUE(facade.RecordStream(*pending, side));
  pending.reset();
  freed.reset();
  {
    CacheScope scope(facade, CUDAPlace(0), "loop");
    auto cached = facade.Alloc(CUDAPlace(0), 8192);
  }  // freed into the cache

  const nlohmann::json j = nlohmann::json::parse(facade.Snapshot(CUDAPlace(0)));
  EXPECT_EQ(j["place"], "cuda:0");
  const Totals t = Sum(j);
  EXPECT_EQ(t.pools.count("stream 0"), 1u);
  EXPECT_EQ(t.pools.count("stream 1"), 1u);
  EXPECT_EQ(t.bytes.at("pending_events"), 70144u);  // rounded to 512
  EXPECT_EQ(t.bytes.at("named_cache"), 8192u);
  EXPECT_EQ(t.requested.at("allocated"), 1000u + (3 << 20) + 5000);
  // The statistics layer counts what the user holds: the named cache's block is still out.
  EXPECT_EQ(static_cast<std::int64_t>(t.bytes.at("allocated") + t.bytes.at("named_cache")),
            Stat(j, "allocated_bytes.all.current"));
  EXPECT_EQ(static_cast<std::int64_t>(t.bytes.at("allocated") + t.bytes.at("named_cache") +
                                      t.bytes.at("pending_events")),
            Stat(j, "active_bytes.all.current"));
  EXPECT_EQ(static_cast<std::int64_t>(t.segments), Stat(j, "reserved_bytes.all.current"));
  // Segments are the device's allocations: all the emulated device has handed out.
  std::size_t free_bytes = 0, total = 0;
  runtime.MemInfo(0, &free_bytes, &total);
  EXPECT_EQ(t.segments, total - free_bytes);
  runtime.HoldEvents(false);
  a.reset();
  b.reset();
  c.reset();
  facade.InvalidateCache(CUDAPlace(0), "loop");
  facade.EmptyCache(CUDAPlace(0));
  const nlohmann::json empty = nlohmann::json::parse(facade.Snapshot(CUDAPlace(0)));
  EXPECT_TRUE(empty["segments"].empty()) << empty.dump();
}

TEST(MemorySnapshotTest, TheVirtualMemoryPoolListsItsMappedRuns) {
  platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = std::size_t{1} << 30});
  flags::AllocatorFlags f = Flags();
  f.use_virtual_memory_auto_growth = true;
  AllocatorFacade facade(&runtime, f);
  const Stream side = runtime.CreateStream(0);
  const std::size_t page = runtime.VmmGranularity(0);
  auto a = facade.Alloc(CUDAPlace(0), 3 * page + 100);
  auto b = facade.Alloc(CUDAPlace(0), 1000, side);
  auto c = facade.Alloc(CUDAPlace(0), page);
  c.reset();  // parked: free
  const nlohmann::json j = nlohmann::json::parse(facade.Snapshot(CUDAPlace(0)));
  const Totals t = Sum(j);
  EXPECT_EQ(t.pools.size(), 1u);
  EXPECT_EQ(t.pools.count("device"), 1u);
  EXPECT_EQ(static_cast<std::int64_t>(t.bytes.at("allocated")),
            Stat(j, "allocated_bytes.all.current"));
  EXPECT_EQ(t.requested.at("allocated"), 3 * page + 100 + 1000);
  // Nothing was stitched: every mapped page has a physical page of its own.
  EXPECT_EQ(static_cast<std::int64_t>(t.segments), Stat(j, "reserved_bytes.all.current"));
  EXPECT_GT(t.bytes.at("free"), 0u);
}

// The buddy-based strategies (and host places) list their chunks and blocks too.
TEST(MemorySnapshotTest, BuddyStrategiesAndHostPlacesListTheirBlocks) {
  for (const auto strategy :
       {flags::AllocatorStrategy::kNaiveBestFit, flags::AllocatorStrategy::kThreadLocal}) {
    SCOPED_TRACE(flags::AllocatorStrategyName(strategy));
    platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = std::size_t{4} << 30});
    flags::AllocatorFlags f = Flags();
    f.allocator_strategy = strategy;
    f.initial_gpu_memory_in_mb = f.reallocate_gpu_memory_in_mb = 64;
    AllocatorFacade facade(&runtime, f);
    auto a = facade.Alloc(CUDAPlace(0), 4000);
    auto b = facade.Alloc(CUDAPlace(0), 3 << 20);
    auto big = facade.Alloc(CUDAPlace(0), std::size_t{100} << 20);  // bypasses the pool
    auto gone = facade.Alloc(CUDAPlace(0), 9000);
    gone.reset();
    const nlohmann::json j = nlohmann::json::parse(facade.Snapshot(CUDAPlace(0)));
    const Totals t = Sum(j);
    EXPECT_EQ(t.pools.count("device"), 1u);
    EXPECT_EQ(t.requested.at("allocated"), 4000u + (3 << 20) + (std::size_t{100} << 20));
    EXPECT_EQ(static_cast<std::int64_t>(t.bytes.at("allocated")),
              Stat(j, "allocated_bytes.all.current"));
    EXPECT_EQ(static_cast<std::int64_t>(t.segments), Stat(j, "reserved_bytes.all.current"));
  }
  platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = std::size_t{1} << 30});
  AllocatorFacade facade(&runtime, Flags());
  auto host = facade.Alloc(platform::CPUPlace(), 5000);
  const nlohmann::json j = nlohmann::json::parse(facade.Snapshot(platform::CPUPlace()));
  const Totals t = Sum(j);
  EXPECT_EQ(t.pools.count("host"), 1u);
  EXPECT_EQ(t.requested.at("allocated"), 5000u);
}

TEST(MemorySnapshotTest, MarksApplyToAllocatedBlocksOnly) {
  allocation::MemorySnapshot s;
  s.set_pool("stream 0");
  allocation::SnapshotSegment seg;
  seg.address = 0x1000;
  seg.size = 0x200;
  seg.blocks = {{0x1000, 0x100, 10, allocation::BlockState::kAllocated},
                {0x1100, 0x100, 0, allocation::BlockState::kFree}};
  s.AddSegment(seg);
  s.Mark(reinterpret_cast<void*>(0x1000), allocation::BlockState::kPendingEvents);
  s.Mark(reinterpret_cast<void*>(0x1100), allocation::BlockState::kNamedCache);
  const auto out = s.Segments();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].pool, "stream 0");
  EXPECT_EQ(out[0].blocks[0].state, allocation::BlockState::kPendingEvents);
  EXPECT_EQ(out[0].blocks[1].state, allocation::BlockState::kFree);
}

}  // namespace
}  // namespace strata::facade
