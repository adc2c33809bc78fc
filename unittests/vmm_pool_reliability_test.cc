// The virtual-memory pool under faults, destroyed streams and idle devices: what a framework's
// empty_cache and recovery layers rely on.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>

#include "allocation/allocation.h"
#include "allocation/bad_alloc.h"
#include "platform/stream.h"
#include "strategies/vmm_pool.h"
#include "support/vmm_pool_fixture.h"

namespace strata::strategies::vmm_test {
namespace {

using allocation::Allocation;
using platform::Stream;

// A small free, the device idle: one Release gives the page back (a fence recorded by the
// Release itself is complete at once).
TEST_F(VirtualMemoryPoolTest, OneReleaseAfterTheDeviceIsIdleGivesEverythingBack) {
  pool_->Free(pool_->Allocate(4096, Stream{}));
  runtime_.SynchronizeDevice(0);
  EXPECT_EQ(pool_->Release(), pool_->page_bytes());
  EXPECT_EQ(pool_->reserved_bytes(), 0u);
}

// Freed on a stream that is then destroyed: empty_cache (WaitForStreams + Release) still gives
// everything back, synchronizing the device for the destroyed stream.
TEST_F(VirtualMemoryPoolTest, EmptyCacheAfterTheFreeingStreamIsDestroyedReleasesEverything) {
  const std::size_t g = pool_->page_bytes();
  const Stream s = runtime_.CreateStream(0);
  Allocation* a = pool_->Allocate(300 * g / 4, s);
  Allocation* b = pool_->Allocate(4096, s);
  pool_->Free(a);
  pool_->Free(b);
  runtime_.DestroyStream(s);
  EXPECT_NO_THROW(pool_->Release()) << "a query on a destroyed stream is not an error";
  EXPECT_NO_THROW(EmptyCache());
  EXPECT_EQ(pool_->reserved_bytes(), 0u);
  EXPECT_EQ(runtime_.used_bytes(0), 0u);
  // The pool still works.
  pool_->Free(pool_->Allocate(g, Stream{}));
  EmptyCache();
}

// A refused create is tried once more: a transient failure costs nothing.
TEST_F(VirtualMemoryPoolTest, OneRefusedCreateIsRetried) {
  faults_.FailNextCreatePhysical(1);
  Allocation* a = nullptr;
  ASSERT_NO_THROW(a = pool_->Allocate(3 * pool_->page_bytes(), Stream{}));
  std::memset(a->ptr(), 1, a->size());
  pool_->Free(a);
  faults_.FailNextCreatePhysical(2);  // refused twice: out of memory, nothing lost
  EXPECT_THROW(pool_->Allocate(8 * pool_->page_bytes(), Stream{}), allocation::BadAlloc);
  EmptyCache();
  EXPECT_EQ(runtime_.used_bytes(0), 0u);
}

// A refused map is a BadAlloc (recovery layers act on it), naming the runtime's error.
TEST_F(VirtualMemoryPoolTest, ARefusedMapIsABadAllocThatLosesNothing) {
  Allocation* keep = pool_->Allocate(pool_->page_bytes(), Stream{});
  faults_.FailNextMap(1);
  try {
    pool_->Allocate(3 * pool_->page_bytes(), Stream{});
    FAIL() << "expected BadAlloc";
  } catch (const allocation::BadAlloc& e) {
    EXPECT_NE(std::string(e.what()).find("refused to map"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool_->allocated_bytes(), pool_->page_bytes());
  Allocation* a = pool_->Allocate(3 * pool_->page_bytes(), Stream{});
  pool_->Free(a);
  pool_->Free(keep);
  EmptyCache();
  EXPECT_EQ(pool_->reserved_bytes(), 0u);
}

}  // namespace
}  // namespace strata::strategies::vmm_test
