// Helpers of the facade's tests (allocator_facade_chains_test.cc, allocator_facade_stats_test.cc,
// allocator_facade_release_test.cc, allocator_facade_config_test.cc,
// allocator_facade_retry_test.cc, allocator_facade_thread_cache_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <initializer_list>
#include <string>

#include "allocation/allocation.h"
#include "allocation/memory_stats.h"
#include "facade/allocator_facade.h"
#include "flags/allocator_flags.h"
#include "platform/device_runtime.h"
#include "platform/emulated_runtime.h"
#include "platform/place.h"
#include "platform/stream.h"

namespace strata::facade::test_facade {

// The names the facade's tests use unqualified; the allocator_facade_*_test.cc files that split
// the facade's contract live in this namespace.
using allocation::AllocationPtr;
using allocation::kAggregate;
using flags::AllocatorFlags;
using flags::AllocatorStrategy;
using platform::CPUPlace;
using platform::CUDAPlace;
using platform::Stream;

// Production defaults but for the chain's choice and a short retry wait (20 ms), so that an
// out-of-memory case does not wait long.
inline AllocatorFlags Flags(AllocatorStrategy strategy = AllocatorStrategy::kAutoGrowth,
                            bool system = false, bool stream_safe = true) {
  AllocatorFlags f = AllocatorFlags::Defaults();
  f.allocator_strategy = strategy;
  f.use_system_allocator = system;
  f.use_stream_safe_cuda_allocator = stream_safe;
  f.gpu_allocator_retry_time = 20;
  return f;
}

// The same with the device pool chosen: the default virtual-memory pool (`vmm_pool`) or the
// chunk pool (auto_growth_best_fit per stream). Tests over both take it as their parameter.
inline AllocatorFlags PoolFlags(bool vmm_pool) {
  AllocatorFlags f = Flags();
  f.use_virtual_memory_auto_growth = vmm_pool;
  return f;
}

// The chunk pool, for tests of its own figures.
inline AllocatorFlags ChunkPoolFlags() { return PoolFlags(false); }

// The name of a test over both pools: its parameter's pool.
inline std::string PoolName(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "VmmPool" : "ChunkPool";
}

// Tests of both device pools: the chunk pool (false) and the virtual-memory pool (true). A file of
// such tests instantiates them with
//   INSTANTIATE_TEST_SUITE_P(Pools, AllocatorFacadePoolTest, ::testing::Bool(), PoolName);
class AllocatorFacadePoolTest : public ::testing::TestWithParam<bool> {};

// Two emulated devices of `capacity` bytes each.
inline platform::EmulatedRuntime::Options Small(std::size_t capacity = std::size_t{1} << 30) {
  return {.device_count = 2, .capacity_bytes = capacity};
}

// The end of a test that allocated on `streams` of device 0: once their work is done, the pools
// give back what they keep for those streams, and then the streams are destroyed.
inline void DestroyStreams(platform::DeviceRuntime& runtime, AllocatorFacade& facade,
                           std::initializer_list<platform::Stream> streams) {
  runtime.SynchronizeDevice(0);
  facade.EmptyCache(platform::CUDAPlace(0));
  for (platform::Stream s : streams) runtime.DestroyStream(s);
}

}  // namespace strata::facade::test_facade
