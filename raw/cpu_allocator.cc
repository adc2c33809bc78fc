#include "raw/cpu_allocator.h"

#include <cstdlib>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "allocation/bad_alloc.h"
#include "allocation/object_pool.h"

namespace strata::raw {

using allocation::Allocation;
using allocation::BadAlloc;
using allocation::ObjectPool;

CPUAllocator::CPUAllocator(std::size_t alignment) : alignment_(alignment) {
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) {
    throw std::invalid_argument(absl::StrCat(
        kName, ": alignment must be a power of two >= ", sizeof(void*), ", got ", alignment));
  }
}

Allocation* CPUAllocator::AllocateImpl(std::size_t size) {
  Allocation* a = ObjectPool<Allocation>::Acquire();
  if (size == 0) {
    a->Reset(nullptr, nullptr, 0, platform::CPUPlace());
    return a;
  }
  if (size > SIZE_MAX - alignment_) {
    ObjectPool<Allocation>::Release(a);
    throw std::invalid_argument(
        absl::StrCat("strata: cannot allocate ", size, " bytes on cpu: the size overflows"));
  }
  const std::size_t rounded = (size + alignment_ - 1) / alignment_ * alignment_;
  void* ptr = std::aligned_alloc(alignment_, rounded);
  if (ptr == nullptr) {
    ObjectPool<Allocation>::Release(a);
    throw BadAlloc(platform::CPUPlace(), size).set_detail("aligned_alloc failed");
  }
  counter_.OnAlloc(rounded);
  a->Reset(ptr, ptr, rounded, platform::CPUPlace());
  return a;
}

void CPUAllocator::FreeImpl(Allocation* allocation) {
  if (allocation->ptr() != nullptr) {
    counter_.OnFree(allocation->size());
    std::free(allocation->ptr());
  }
  ObjectPool<Allocation>::Release(allocation);
}

}  // namespace strata::raw
