// SharedAllocatorView: lets several chains (one per stream) share one allocator below them —
// the device's raw allocator and memory limit. Every call forwards; statistics too, which is
// right because pooling strategies report the segments they hold themselves and do not forward
// to the raw layer (so a segment is never counted twice). Thread safety: that of the shared one.
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
  void CollectStats(allocation::MemoryStats* stats) const override { shared_->CollectStats(stats); }
  void ResetPeakStats() override { shared_->ResetPeakStats(); }
  void ResetAccumulatedStats() override { shared_->ResetAccumulatedStats(); }

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
