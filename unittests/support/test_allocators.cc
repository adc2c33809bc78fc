#include "support/test_allocators.h"

#include <cstdlib>

#include "allocation/bad_alloc.h"

namespace strata::testing {

std::vector<std::size_t> RecordingAllocator::requests() const {
  absl::MutexLock lock(&mu_);
  return requests_;
}

allocation::Allocation* RecordingAllocator::AllocateImpl(std::size_t size) {
  {
    absl::MutexLock lock(&mu_);
    requests_.push_back(size);
  }
  int fail = fail_next_.load();
  while (fail > 0 && !fail_next_.compare_exchange_weak(fail, fail - 1)) {
  }
  if (fail > 0) throw allocation::BadAlloc(place_, size).set_detail("injected by test");
  const std::size_t rounded = (size + alignment_ - 1) / alignment_ * alignment_;
  void* p = std::aligned_alloc(alignment_, rounded == 0 ? alignment_ : rounded);
  if (p == nullptr) throw allocation::BadAlloc(place_, size);
  ++num_allocs_;
  ++live_blocks_;
  live_bytes_ += size;
  return new allocation::Allocation(p, size, place_);
}

void RecordingAllocator::FreeImpl(allocation::Allocation* allocation) {
  ++num_frees_;
  --live_blocks_;
  live_bytes_ -= allocation->size();
  std::free(allocation->ptr());
  delete allocation;
}

allocation::Allocation* LimitedAllocator::AllocateImpl(std::size_t size) {
  std::size_t used = used_.load();
  do {
    if (size > capacity_ || used > capacity_ - size) {
      throw allocation::BadAlloc(platform::CPUPlace(), size)
          .set_device_memory(capacity_, capacity_ - used);
    }
  } while (!used_.compare_exchange_weak(used, used + size));
  try {
    return underlying().Allocate(size).release();
  } catch (...) {
    used_ -= size;
    throw;
  }
}

void LimitedAllocator::FreeImpl(allocation::Allocation* allocation) {
  used_ -= allocation->size();
  underlying().Free(allocation);
}

}  // namespace strata::testing
