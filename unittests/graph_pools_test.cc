// CUDA graph pools through the facade, on the emulated runtime's stream capture: the emulated
// runtime throws for every call CUDA refuses during a capture (a free, a synchronize, queries and
// waits across the capture), so these scenarios also check that the allocator makes none.
#include "facade/graph_pools.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "allocation/allocation.h"
#include "allocation/bad_alloc.h"
#include "facade/allocator_facade.h"
#include "flags/allocator_flags.h"
#include "platform/emulated_runtime.h"

namespace strata::facade {
namespace {

using allocation::AllocationPtr;
using allocation::kAggregate;
using platform::CUDAPlace;
using platform::Stream;

constexpr std::size_t kMiB = std::size_t{1} << 20;
const platform::Place kGpu = CUDAPlace(0);
const GraphPools::PoolId kPool{1, 7};

flags::AllocatorFlags Flags(bool vmm) {
  flags::AllocatorFlags f = flags::AllocatorFlags::Defaults();
  f.use_virtual_memory_auto_growth = vmm;
  f.gpu_allocator_retry_time = 0;
  return f;
}

class GraphPoolsTest : public ::testing::TestWithParam<bool> {
 protected:
  std::int64_t Reserved() {
    return facade_.GetMemoryStats(kGpu).reserved_bytes[kAggregate].current;
  }
  std::int64_t Allocated() {
    return facade_.GetMemoryStats(kGpu).allocated_bytes[kAggregate].current;
  }
  GraphPools::Filter Captures(Stream s) {
    return [this, s](Stream t) { return t == s && runtime_.IsCapturing(t); };
  }

  platform::EmulatedRuntime runtime_{{.device_count = 1, .capacity_bytes = std::size_t{1} << 30}};
  AllocatorFacade facade_{&runtime_, Flags(GetParam())};
};

// Allocations of the capturing stream come from the graph's pool: not from memory cached
// before, reused within the capture, kept from everyone else after it, and given back once the
// pool's last graph is released.
TEST_P(GraphPoolsTest, CaptureAllocatesFromAPrivatePoolThatOutlivesIt) {
  const Stream s = runtime_.CreateStream(0);
  {
    AllocationPtr cached = facade_.Alloc(kGpu, 4 * kMiB, s);  // then freed: cached on s
  }
  AllocationPtr before = facade_.Alloc(kGpu, 4 * kMiB, s);
  void* const cached_addr = before->ptr();
  before.reset();

  facade_.BeginAllocateToPool(kGpu, kPool, Captures(s));
  runtime_.BeginCapture(s);
  AllocationPtr a = facade_.Alloc(kGpu, 4 * kMiB, s);
  EXPECT_NE(a->ptr(), cached_addr) << "a capture took memory cached outside its pool";
  void* const a_addr = a->ptr();
  a.reset();  // freed during the capture: stays in the pool, for the capture's later requests
  AllocationPtr b = facade_.Alloc(kGpu, 4 * kMiB, s);
  EXPECT_EQ(b->ptr(), a_addr);
  EXPECT_EQ(facade_.EmptyCache(kGpu), 0u) << "nothing is freed during a capture";
  // Frees of memory from before the capture, on the capturing stream, are fine too.
  std::vector<AllocationPtr> old;
  runtime_.EndCapture(s);
  for (int i = 0; i < 40; ++i) old.push_back(facade_.Alloc(kGpu, 2 * kMiB, s));
  runtime_.BeginCapture(s);
  old.clear();
  runtime_.EndCapture(s);
  facade_.EndAllocateToPool(kGpu, kPool);

  // After the capture: the pool's memory is the graph's.
  AllocationPtr after = facade_.Alloc(kGpu, 4 * kMiB, s);
  EXPECT_NE(after->ptr(), b->ptr());
  EXPECT_EQ(Allocated(), static_cast<std::int64_t>(8 * kMiB)) << "the pool counts in the device";
  after.reset();
  facade_.EmptyCache(kGpu);
  EXPECT_GE(Reserved(), static_cast<std::int64_t>(4 * kMiB)) << "the graph's block stays";
  b.reset();  // the graph's tensors go...
  EXPECT_GE(Reserved(), static_cast<std::int64_t>(4 * kMiB)) << "...its pool stays, cached";
  facade_.ReleasePool(kGpu, kPool);  // ...then the graph
  facade_.EmptyCache(kGpu);
  EXPECT_EQ(Reserved(), 0);
  EXPECT_EQ(runtime_.used_bytes(0), 0u);
  runtime_.DestroyStream(s);
}

// The memory fraction caps the device pool and the graph pools together: neither side can take
// what the other holds past the cap (each pool had a limit of its own under the virtual-memory
// pool).
TEST_P(GraphPoolsTest, TheMemoryFractionCapsGraphPoolsAndTheDevicePoolTogether) {
  facade_.SetMemoryFraction(kGpu, 0.25);  // 256 MiB of the 1 GiB device
  const Stream s = runtime_.CreateStream(0);
  AllocationPtr outside = facade_.Alloc(kGpu, 150 * kMiB, s);
  facade_.BeginAllocateToPool(kGpu, kPool, Captures(s));
  runtime_.BeginCapture(s);
  EXPECT_THROW(facade_.Alloc(kGpu, 150 * kMiB, s), allocation::BadAlloc)
      << "the graph pool took 150 MiB past the device pool's 150 under a 256 MiB cap";
  AllocationPtr inside = facade_.Alloc(kGpu, 60 * kMiB, s);  // what is left fits
  runtime_.EndCapture(s);
  facade_.EndAllocateToPool(kGpu, kPool);
  outside.reset();
  facade_.EmptyCache(kGpu);
  EXPECT_THROW(facade_.Alloc(kGpu, 220 * kMiB, s), allocation::BadAlloc)
      << "the device pool took 220 MiB past the graph pool's 60 under a 256 MiB cap";
  EXPECT_NE(facade_.Alloc(kGpu, 150 * kMiB, s), nullptr);
  inside.reset();
  facade_.ReleasePool(kGpu, kPool);
  facade_.EmptyCache(kGpu);
  EXPECT_EQ(runtime_.used_bytes(0), 0u);
  runtime_.DestroyStream(s);
}

// A graph pool's block has no stream-safe layer: recording a stream on it is refused, and the
// message says why (not that the flags lack one).
TEST_P(GraphPoolsTest, RecordStreamOnAGraphPoolsBlockSaysItIsTheGraphs) {
  const Stream s = runtime_.CreateStream(0);
  const Stream side = runtime_.CreateStream(0);
  facade_.BeginAllocateToPool(kGpu, kPool, Captures(s));
  runtime_.BeginCapture(s);
  AllocationPtr a = facade_.Alloc(kGpu, 4 * kMiB, s);
  try {
    facade_.RecordStream(*a, side);
    ADD_FAILURE() << "a graph pool's block took a recorded stream";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA graph pool"), std::string::npos) << e.what();
  }
  a.reset();
  runtime_.EndCapture(s);
  facade_.EndAllocateToPool(kGpu, kPool);
  facade_.ReleasePool(kGpu, kPool);
  facade_.EmptyCache(kGpu);
  EXPECT_EQ(runtime_.used_bytes(0), 0u);
  runtime_.DestroyStream(side);
  runtime_.DestroyStream(s);
}

// Two graphs share a pool: it goes with the second release, and its blocks stay the graphs'
// until then.
TEST_P(GraphPoolsTest, ASharedPoolGoesWithItsLastGraph) {
  const Stream s = runtime_.CreateStream(0);
  AllocationPtr first, second;
  for (AllocationPtr* out : {&first, &second}) {
    facade_.BeginAllocateToPool(kGpu, kPool, Captures(s));
    runtime_.BeginCapture(s);
    *out = facade_.Alloc(kGpu, 3 * kMiB, s);
    runtime_.EndCapture(s);
    facade_.EndAllocateToPool(kGpu, kPool);
  }
  first.reset();
  second.reset();
  facade_.ReleasePool(kGpu, kPool);
  facade_.EmptyCache(kGpu);
  EXPECT_GT(Reserved(), 0) << "the second graph still owns the pool";
  facade_.ReleasePool(kGpu, kPool);
  facade_.EmptyCache(kGpu);
  EXPECT_EQ(Reserved(), 0);
  EXPECT_THROW(facade_.ReleasePool(kGpu, kPool), std::invalid_argument);
  runtime_.DestroyStream(s);
}

// Other streams keep allocating from their own pools during a capture; a pool of a released
// graph with live blocks is given back once they go.
TEST_P(GraphPoolsTest, OtherStreamsAreNotRoutedAndLiveBlocksKeepARetiredPool) {
  const Stream s = runtime_.CreateStream(0), other = runtime_.CreateStream(0);
  facade_.BeginAllocateToPool(kGpu, kPool, Captures(s));
  runtime_.BeginCapture(s);
  AllocationPtr graph_block = facade_.Alloc(kGpu, 2 * kMiB, s);
  AllocationPtr elsewhere = facade_.Alloc(kGpu, 2 * kMiB, other);
  runtime_.EndCapture(s);
  facade_.EndAllocateToPool(kGpu, kPool);
  facade_.ReleasePool(kGpu, kPool);
  const std::int64_t with_pool = Reserved();
  graph_block.reset();
  facade_.EmptyCache(kGpu);
  EXPECT_LT(Reserved(), with_pool);
  EXPECT_GT(Reserved(), 0) << "the other stream's block is live";
  elsewhere.reset();
  facade_.EmptyCache(kGpu);
  EXPECT_EQ(Reserved(), 0);
  runtime_.DestroyStream(s);
  runtime_.DestroyStream(other);
}

TEST_P(GraphPoolsTest, BadCallsAreRefused) {
  EXPECT_THROW(facade_.EndAllocateToPool(kGpu, kPool), std::invalid_argument);
  EXPECT_THROW(facade_.ReleasePool(kGpu, kPool), std::invalid_argument);
  EXPECT_THROW(
      facade_.BeginAllocateToPool(platform::CPUPlace(), kPool, [](Stream) { return true; }),
      std::invalid_argument);
  EXPECT_THROW(facade_.BeginAllocateToPool(kGpu, kPool, nullptr), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Pools, GraphPoolsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "virtual_memory" : "auto_growth");
                         });

}  // namespace
}  // namespace strata::facade
