// Allocation: a block of memory handed out by an Allocator chain.
//
// An Allocation records the allocators that decorated it, innermost first, so that freeing it
// runs back through the same layers in reverse (the deleter calls the top allocator's Free,
// each layer pops itself and hands the allocation to the layer below). The stack is inline:
// registering a layer never allocates.
//
// Thread safety: an Allocation is owned by one AllocationPtr at a time; its methods are not
// synchronized. Layers that pool Allocation objects reinitialise them with Reset().
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "platform/place.h"

namespace strata::allocation {

class Allocator;

class Allocation {
 public:
  static constexpr int kMaxDecorators = 12;

  Allocation() = default;
  Allocation(void* ptr, std::size_t size, const platform::Place& place)
      : Allocation(ptr, ptr, size, place) {}
  Allocation(void* ptr, void* base_ptr, std::size_t size, const platform::Place& place)
      : ptr_(ptr), base_ptr_(base_ptr), size_(size), place_(place) {}
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;
  virtual ~Allocation() = default;

  void* ptr() const { return ptr_; }
  // The start of the underlying device allocation (segment) this block lives in.
  void* base_ptr() const { return base_ptr_; }
  // Usable bytes: at least what was asked for (strategies round up).
  std::size_t size() const { return size_; }
  // Bytes the caller asked for; set by the outermost layer that knows it (0 if unknown).
  std::size_t requested_size() const { return requested_size_; }
  void set_requested_size(std::size_t n) { requested_size_ = n; }
  const platform::Place& place() const { return place_; }

  // Decorator stack.
  void RegisterDecoratedAllocator(Allocator* allocator) {
    if (num_decorators_ == kMaxDecorators) [[unlikely]]
      ThrowChainTooDeep();
    decorators_[num_decorators_++] = allocator;
  }
  void PopDecoratedAllocator() {
    if (num_decorators_ == 0) [[unlikely]]
      ThrowNothingToPop();
    --num_decorators_;
  }
  Allocator* TopDecoratedAllocator() const {
    return num_decorators_ == 0 ? nullptr : decorators_[num_decorators_ - 1];
  }
  int num_decorators() const { return num_decorators_; }
  // i = 0 is the innermost layer (the one that created the memory).
  const Allocator* decorator(int i) const { return decorators_[i]; }
  // Copies `other`'s stack below this one's: a layer that wraps another allocation in a new
  // object uses it so that the whole chain stays visible (for diagnostics and tests).
  void InheritDecorators(const Allocation& other);

  // For a layer that wraps `other` in a recycled object: reinitialises every field as a copy of
  // `other`'s, decorator stack included (as Reset + set_requested_size + InheritDecorators, but
  // without checks, never throws). Stacks below a wrapper are shallow: a fixed-size copy of the
  // first kInlineCopy entries, a loop only for deeper ones.
  void ResetAsWrapperOf(const Allocation& other) {
    constexpr int kInlineCopy = 4;
    ptr_ = other.ptr_;
    base_ptr_ = other.base_ptr_;
    size_ = other.size_;
    requested_size_ = other.requested_size_;
    place_ = other.place_;
    num_decorators_ = other.num_decorators_;
    for (int i = 0; i < kInlineCopy; ++i) decorators_[i] = other.decorators_[i];
    for (int i = kInlineCopy; i < other.num_decorators_; ++i) decorators_[i] = other.decorators_[i];
  }

  // For layers that recycle Allocation objects (ObjectPool): reinitialises every field.
  void Reset(void* ptr, void* base_ptr, std::size_t size, const platform::Place& place) {
    ptr_ = ptr;
    base_ptr_ = base_ptr;
    size_ = size;
    requested_size_ = 0;
    place_ = place;
    num_decorators_ = 0;
  }

 protected:
  void set_ptr(void* ptr) { ptr_ = ptr; }
  void set_size(std::size_t size) { size_ = size; }

 private:
  [[noreturn]] static void ThrowChainTooDeep();
  [[noreturn]] static void ThrowNothingToPop();

  void* ptr_ = nullptr;
  void* base_ptr_ = nullptr;
  std::size_t size_ = 0;
  std::size_t requested_size_ = 0;
  platform::Place place_;
  std::uint8_t num_decorators_ = 0;
  std::array<Allocator*, kMaxDecorators> decorators_{};
};

// Frees through the top decorator.
struct AllocationDeleter {
  void operator()(Allocation* allocation) const;
};

using AllocationPtr = std::unique_ptr<Allocation, AllocationDeleter>;
using SharedAllocation = std::shared_ptr<Allocation>;

inline SharedAllocation ToShared(AllocationPtr p) {
  return SharedAllocation(p.release(), AllocationDeleter());
}

}  // namespace strata::allocation
