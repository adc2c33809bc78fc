#include "layers/oom_recovery_allocator.h"

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#include "allocation/bad_alloc.h"
#include "glog/logging.h"

namespace strata::layers {

using allocation::Allocation;
using allocation::Allocator;
using allocation::BadAlloc;

OomRecoveryAllocator::OomRecoveryAllocator(std::shared_ptr<Allocator> underlying, Recover recover)
    : RetryCountingAllocator(std::move(underlying), kName), recover_(std::move(recover)) {
  if (!recover_) throw std::invalid_argument(std::string(kName) + ": the recover callback is null");
}

Allocation* OomRecoveryAllocator::AllocateImpl(std::size_t size) {
  try {
    return underlying().Allocate(size).release();
  } catch (const BadAlloc&) {
    // Recover outside the handler: the callback may allocate and throw on its own.
  }
  return RecoverAndRetry(size);
}

Allocation* OomRecoveryAllocator::RecoverAndRetry(std::size_t size) {
  CountRetry();
  std::uint64_t released = 0;
  try {
    released = recover_(size);
  } catch (const std::exception& e) {
    LOG(ERROR) << "oom_recovery: the recover callback threw: " << e.what();
  }
  VLOG(1) << "oom_recovery: out of memory for " << size << " bytes; released " << released
          << " cached bytes, trying once more";
  return underlying().Allocate(size).release();
}

}  // namespace strata::layers
