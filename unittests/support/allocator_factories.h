// Named allocator configurations for the allocator conformance suite: every pooling strategy
// with a few option sets over the raw DeviceAllocator, and whole AllocatorFacade chains per flag
// set, all behind one small interface (AllocatorUnderTest) so that one suite checks them all.
//
// Each AllocatorFactory also states what its layers' contracts promise (headers of the layers
// it builds) where the contracts differ: the alignment of every pointer, what size 0 gives,
// above which size a request is std::invalid_argument rather than BadAlloc, and whether a
// second or foreign free is detected. The suite checks exactly those promises.
//
// Thread safety: an AllocatorUnderTest is as thread-safe as the chain it wraps (all of these
// are); the factory list is immutable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "allocation/allocation.h"
#include "allocation/allocator.h"
#include "allocation/memory_stats.h"
#include "platform/device_runtime.h"
#include "platform/place.h"
#include "platform/stream.h"

namespace strata::testing {

// One configured chain of device 0 of a runtime.
class AllocatorUnderTest {
 public:
  virtual ~AllocatorUnderTest() = default;

  // Allocates on `stream` (chains without per-stream state ignore it).
  virtual allocation::AllocationPtr Allocate(std::size_t size, platform::Stream stream) = 0;
  // Gives cached memory back to the device; returns the bytes.
  virtual std::uint64_t Release() = 0;
  virtual allocation::MemoryStats Stats() = 0;
  // Bytes of live allocations (their size()) as the chain itself counts them.
  virtual std::int64_t AllocatedBytes() = 0;
  // Marks `allocation` as used on `stream` too; false where the chain has no stream safety.
  virtual bool RecordStream(const allocation::Allocation& allocation, platform::Stream stream) = 0;
  virtual platform::Place place() const { return platform::CUDAPlace(0); }
};

struct AllocatorFactory {
  enum class ZeroSize {
    kEmpty,         // ptr() == nullptr, size() == 0
    kMinimalBlock,  // a unique, non-null, aligned block of at least one byte
  };

  std::string name;  // a gtest parameter name: [A-Za-z0-9_]
  std::function<std::unique_ptr<AllocatorUnderTest>(platform::DeviceRuntime*)> make;
  // Every non-empty allocation's ptr() is a multiple of this.
  std::size_t alignment = 256;
  ZeroSize zero_size = ZeroSize::kEmpty;
  // Requests above this throw std::invalid_argument; requests up to it that cannot be had
  // throw allocation::BadAlloc.
  std::size_t max_request = 0;
  // Empty when a second Free of an Allocation, or a Free of another instance's Allocation,
  // throws std::invalid_argument and changes nothing; otherwise why the contract does not
  // promise it.
  std::string no_bad_free_detection;
  // Whether allocations are made per stream (stream-safe chains).
  bool stream_safe = false;
  // Non-empty: the reserved_bytes figure is known not to match what the device holds (why).
  std::string known_reserved_bug;
};

inline void PrintTo(const AllocatorFactory& factory, std::ostream* os) { *os << factory.name; }

// Every configuration, over the raw DeviceAllocator of the runtime given to `make`.
const std::vector<AllocatorFactory>& AllocatorFactories();

}  // namespace strata::testing
