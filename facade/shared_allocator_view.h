// SharedAllocatorView: lets several chains (one per stream) share one allocator below them —
// the device's raw allocator and memory limit — while statistics stay counted once.
//
// Allocate, Free and Release forward; CollectStats and the resets do NOT: the facade collects
// the shared allocator's figures itself, once per place. Thread safety: that of the shared one.
#pragma once

#include <memory>

#include "allocation/allocator.h"

namespace strata::facade {

class SharedAllocatorView : public allocation::Allocator {
 public:
  explicit SharedAllocatorView(std::shared_ptr<allocation::Allocator> shared)
      : shared_(std::move(shared)) {}

  const char* Name() const override { return "shared_view"; }
  bool IsAllocThreadSafe() const override { return shared_->IsAllocThreadSafe(); }

 protected:
  allocation::Allocation* AllocateImpl(std::size_t size) override {
    return shared_->Allocate(size).release();
  }
  void FreeImpl(allocation::Allocation* allocation) override { shared_->Free(allocation); }
  std::uint64_t ReleaseImpl(const platform::Place& place) override {
    return shared_->Release(place);
  }

 private:
  std::shared_ptr<allocation::Allocator> shared_;
};

}  // namespace strata::facade
