#include "layers/memory_limit_allocator.h"

#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "allocation/bad_alloc.h"
#include "glog/logging.h"

namespace strata::layers {

using allocation::Allocation;
using allocation::Allocator;
using allocation::BadAlloc;
using allocation::DecoratingAllocator;

MemoryLimitAllocator::MemoryLimitAllocator(std::shared_ptr<Allocator> underlying,
                                           const platform::Place& place, std::size_t limit_bytes,
                                           std::size_t granularity, std::string limit_name)
    : MemoryLimitAllocator(std::move(underlying), place, std::make_shared<Budget>(limit_bytes),
                           nullptr, granularity, std::move(limit_name)) {}

MemoryLimitAllocator::MemoryLimitAllocator(std::shared_ptr<Allocator> underlying,
                                           const platform::Place& place,
                                           std::shared_ptr<Budget> budget,
                                           HeldElsewhere held_elsewhere, std::size_t granularity,
                                           std::string limit_name)
    : DecoratingAllocator(std::move(underlying), kName),
      place_(place),
      budget_(std::move(budget)),
      held_elsewhere_(std::move(held_elsewhere)),
      granularity_(granularity),
      limit_name_(std::move(limit_name)) {
  if (budget_ == nullptr) throw std::invalid_argument(absl::StrCat(kName, ": budget is null"));
  if (granularity_ == 0 || (granularity_ & (granularity_ - 1)) != 0) {
    throw std::invalid_argument(
        absl::StrCat(kName, ": granularity must be a power of two, got ", granularity));
  }
  VLOG(4) << "memory_limit on " << place_ << ": " << limit_bytes() << " bytes";
}

std::size_t MemoryLimitAllocator::Rounded(std::size_t size) const {
  if (size > SIZE_MAX - granularity_) return SIZE_MAX;
  return (size + granularity_ - 1) & ~(granularity_ - 1);
}

void MemoryLimitAllocator::SetLimit(std::size_t limit_bytes) {
  budget_->limit.store(limit_bytes, std::memory_order_relaxed);
  VLOG(4) << "memory_limit on " << place_ << ": " << limit_bytes << " bytes";
}

Allocation* MemoryLimitAllocator::AllocateImpl(std::size_t size) {
  const std::size_t rounded = Rounded(size);
  std::atomic<std::size_t>& reserved_bytes = budget_->reserved;
  const std::size_t limit = budget_->limit.load(std::memory_order_relaxed);
  if (limit != 0) {
    const std::size_t elsewhere = held_elsewhere_ ? held_elsewhere_() : 0;
    std::size_t reserved = reserved_bytes.load(std::memory_order_relaxed);
    do {
      const std::size_t held = elsewhere > SIZE_MAX - reserved ? SIZE_MAX : reserved + elsewhere;
      if (rounded > limit || held > limit - rounded) {
        VLOG(6) << "memory_limit refuses " << size << " bytes on " << place_;
        throw BadAlloc(place_, size)
            .set_memory_limit(limit, held, limit_name_)
            .set_hint(absl::StrCat("Raise the limit (", limit_name_,
                                   ") or release cached memory (EmptyCache)."));
      }
    } while (!reserved_bytes.compare_exchange_weak(reserved, reserved + rounded));
  } else {
    reserved_bytes.fetch_add(rounded, std::memory_order_relaxed);
  }
  try {
    return underlying().Allocate(size).release();
  } catch (...) {
    reserved_bytes.fetch_sub(rounded, std::memory_order_relaxed);
    throw;
  }
}

void MemoryLimitAllocator::FreeImpl(Allocation* allocation) {
  budget_->reserved.fetch_sub(Rounded(allocation->size()), std::memory_order_relaxed);
  underlying().Free(allocation);
}

}  // namespace strata::layers
