#include "raw/cuda_pinned_allocator.h"

#include <stdexcept>
#include <string>

#include "allocation/bad_alloc.h"
#include "allocation/object_pool.h"

namespace strata::raw {

using allocation::Allocation;
using allocation::BadAlloc;
using allocation::ObjectPool;

CUDAPinnedAllocator::CUDAPinnedAllocator(platform::DeviceRuntime* runtime) : runtime_(runtime) {
  if (runtime_ == nullptr) throw std::invalid_argument(std::string(kName) + ": runtime is null");
}

Allocation* CUDAPinnedAllocator::AllocateImpl(std::size_t size) {
  Allocation* a = ObjectPool<Allocation>::Acquire();
  void* ptr;
  try {
    ptr = size == 0 ? nullptr : runtime_->HostMalloc(size);
  } catch (...) {  // a runtime error (sticky CUDA error): give the object back
    ObjectPool<Allocation>::Release(a);
    throw;
  }
  if (size != 0 && ptr == nullptr) {
    ObjectPool<Allocation>::Release(a);
    throw BadAlloc(platform::CUDAPinnedPlace(), size)
        .set_detail("page-locked host allocation failed");
  }
  if (ptr != nullptr) counter_.OnAlloc(size);
  a->Reset(ptr, ptr, size, platform::CUDAPinnedPlace());
  return a;
}

void CUDAPinnedAllocator::FreeImpl(Allocation* allocation) {
  if (allocation->ptr() != nullptr) {
    runtime_->HostFree(allocation->ptr());
    counter_.OnFree(allocation->size());
  }
  ObjectPool<Allocation>::Release(allocation);
}

}  // namespace strata::raw
