#include "allocation/aligned_allocator.h"

#include <bit>
#include <limits>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "allocation/object_pool.h"
#include "glog/logging.h"

namespace strata::allocation {
namespace {

// Owns the underlying allocation it points into.
class AlignedAllocation : public Allocation {
 public:
  void Init(AllocationPtr underlying, std::size_t offset) {
    const auto aligned = static_cast<char*>(underlying->ptr()) + offset;
    Reset(aligned, underlying->base_ptr(), underlying->size() - offset, underlying->place());
    InheritDecorators(*underlying);
    underlying_ = std::move(underlying);
  }
  AllocationPtr TakeUnderlying() { return std::move(underlying_); }

 private:
  AllocationPtr underlying_;
};

std::size_t CheckPowerOfTwo(std::size_t value, const char* what) {
  if (!std::has_single_bit(value)) {
    throw std::invalid_argument(
        absl::StrCat("strata: AlignedAllocator ", what, " must be a power of two, got ", value));
  }
  return value;
}

}  // namespace

AlignedAllocator::AlignedAllocator(std::shared_ptr<Allocator> underlying, std::size_t alignment,
                                   std::size_t underlying_alignment)
    : underlying_(std::move(underlying)),
      alignment_(CheckPowerOfTwo(alignment, "alignment")),
      padding_(alignment_ > CheckPowerOfTwo(underlying_alignment, "underlying_alignment")
                   ? alignment_ - underlying_alignment
                   : 0) {
  VLOG(4) << "aligned: alignment " << alignment_ << " over " << underlying_->Name()
          << (padding_ == 0 ? " (pass-through)" : "");
}

Allocation* AlignedAllocator::AllocateImpl(std::size_t size) {
  if (padding_ == 0) {
    AllocationPtr a = underlying_->Allocate(size);
    if ((reinterpret_cast<std::uintptr_t>(a->ptr()) & (alignment_ - 1)) != 0) {
      throw std::logic_error(absl::StrCat("strata: AlignedAllocator: ", underlying_->Name(),
                                          " returned a pointer not aligned to ", alignment_));
    }
    return a.release();
  }
  if (size > std::numeric_limits<std::size_t>::max() - padding_) {
    throw std::invalid_argument(
        absl::StrCat("strata: AlignedAllocator: size ", size, " plus alignment padding overflows"));
  }
  AllocationPtr underlying = underlying_->Allocate(size + padding_);
  const auto raw = reinterpret_cast<std::uintptr_t>(underlying->ptr());
  const std::size_t offset = ((raw + alignment_ - 1) & ~(alignment_ - 1)) - raw;
  if (offset > padding_) {
    throw std::logic_error(absl::StrCat("strata: AlignedAllocator: ", underlying_->Name(),
                                        " returned a pointer less aligned than promised"));
  }
  AlignedAllocation* a = ObjectPool<AlignedAllocation>::Acquire();
  try {
    a->Init(std::move(underlying), offset);
  } catch (...) {  // a decorator stack too deep: give the wrapper back
    ObjectPool<AlignedAllocation>::Release(a);
    throw;
  }
  return a;
}

void AlignedAllocator::FreeImpl(Allocation* allocation) {
  if (padding_ == 0) {
    underlying_->Free(allocation);
    return;
  }
  auto* a = static_cast<AlignedAllocation*>(allocation);
  AllocationPtr underlying = a->TakeUnderlying();
  ObjectPool<AlignedAllocation>::Release(a);
  // `underlying` frees through its own chain when it goes out of scope.
}

}  // namespace strata::allocation
