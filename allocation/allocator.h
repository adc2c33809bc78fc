// Allocator: the interface every layer implements and every decorator wraps.
//
// Contract
// - Allocate(size) returns an AllocationPtr whose deleter frees through this allocator (and,
//   for decorators, back down the chain). It throws BadAlloc when memory cannot be had, and
//   std::invalid_argument for requests no device could satisfy (e.g. sizes that overflow).
// - Release(place) returns cached memory of `place` to the device and says how many bytes.
// - Thread safety: every allocator is thread-safe. Allocate, Free (from any thread, not only the
//   allocating one), Release and the statistics calls may run concurrently; a layer that keeps
//   per-thread state (thread_local) says so in its header. No layer locks around the one below.
// - Streams: a layer that serves one stream says so in its header; the stream-safe layer
//   (stream_safe_cuda_allocator.h) is the one that makes memory safe across streams.
// - Decorators derive from DecoratingAllocator (decorating_allocator.h): they own the layer below
//   and know only this interface; by default they forward every call.
// - Names: every allocator class has one name, `static constexpr char kName[]` ("retry",
//   "vmm_pool", ...): Name() returns it, the facade's ChainOf lists it, and the layer's logs and
//   errors call the layer by it.
// - Finding a layer: code that needs a particular layer finds it by type, with AsLayer<T> (is
//   this allocator a T?) or FindLayer<T> (the T on an allocation's decorator stack), below. Both
//   compare Name() with the address of T::kName: one virtual call per layer, no RTTI, and no
//   other test (no dynamic_cast, no comparison of name strings) tells layers apart.
#pragma once

#include <cstddef>
#include <cstdint>

#include "allocation/allocation.h"
#include "allocation/memory_snapshot.h"
#include "allocation/memory_stats.h"
#include "platform/place.h"

namespace strata::allocation {

class Allocator {
 public:
  virtual ~Allocator() = default;

  AllocationPtr Allocate(std::size_t size) {
    Allocation* allocation = AllocateImpl(size);
    allocation->RegisterDecoratedAllocator(this);
    return AllocationPtr(allocation);
  }

  // Reached through AllocationDeleter (or a decorator above): pops this layer, then frees.
  void Free(Allocation* allocation) {
    allocation->PopDecoratedAllocator();
    FreeImpl(allocation);
  }

  std::uint64_t Release(const platform::Place& place) { return ReleaseImpl(place); }

  // The class's kName (see "Names" above).
  virtual const char* Name() const = 0;

  // Statistics: each layer adds what it owns to `stats` and decorators forward to the layer
  // below (see memory_stats.h). Reset* apply to the same figures.
  virtual void CollectStats(MemoryStats* /*stats*/) const {}
  virtual void ResetPeakStats() {}
  virtual void ResetAccumulatedStats() {}

  // Snapshot (memory_snapshot.h): pools add their segments and blocks; a layer that holds
  // allocated blocks in a state of its own marks them; decorators forward first.
  virtual void Snapshot(MemorySnapshot* /*snapshot*/) const {}

 protected:
  virtual Allocation* AllocateImpl(std::size_t size) = 0;
  virtual void FreeImpl(Allocation* allocation) = 0;
  virtual std::uint64_t ReleaseImpl(const platform::Place& /*place*/) { return 0; }
};

// `allocator` as a T, or null when it is another layer (see "Finding a layer" above).
template <typename T>
T* AsLayer(Allocator& allocator) {
  return allocator.Name() == T::kName ? static_cast<T*>(&allocator) : nullptr;
}
template <typename T>
const T* AsLayer(const Allocator& allocator) {
  return allocator.Name() == T::kName ? static_cast<const T*>(&allocator) : nullptr;
}

// The outermost layer of type T on `allocation`'s decorator stack, or null.
template <typename T>
T* FindLayer(const Allocation& allocation) {
  for (int i = allocation.num_decorators() - 1; i >= 0; --i) {
    // decorator() is a read-only view of the stack; the layers on it are not const objects.
    if (T* layer = AsLayer<T>(*const_cast<Allocator*>(allocation.decorator(i)))) return layer;
  }
  return nullptr;
}

}  // namespace strata::allocation
