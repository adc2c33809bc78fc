// DecoratingAllocator: the base of every layer that wraps another allocator (RMM's adaptor).
//
// Contract
// - Owns the layer below (shared: several chains may share one raw allocator) and refuses a null
//   one with std::invalid_argument naming the layer (its kName, allocator.h).
// - By default every call forwards: Allocate takes a block from below and hands it up (the
//   allocation's decorator stack then holds this layer above the one below), Free hands it back
//   down, Release and the statistics calls go to the layer below. A layer overrides only what it
//   changes, calling underlying() for the rest.
// - Thread safety and stream semantics: those of Allocator (allocator.h); the base adds no state.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "allocation/allocator.h"

namespace strata::allocation {

class DecoratingAllocator : public Allocator {
 public:
  // The layer below; never null.
  Allocator& underlying() const { return *underlying_; }
  const std::shared_ptr<Allocator>& shared_underlying() const { return owner_; }

  void CollectStats(MemoryStats* stats) const override { underlying_->CollectStats(stats); }
  void ResetPeakStats() override { underlying_->ResetPeakStats(); }
  void ResetAccumulatedStats() override { underlying_->ResetAccumulatedStats(); }
  void Snapshot(MemorySnapshot* snapshot) const override { underlying_->Snapshot(snapshot); }

 protected:
  // `name`: the decorator's kName, for the error on a null `underlying` (Name() is not yet
  // the derived class's while this runs).
  DecoratingAllocator(std::shared_ptr<Allocator> underlying, const char* name)
      : owner_(std::move(underlying)), underlying_(owner_.get()) {
    if (underlying_ == nullptr) {
      throw std::invalid_argument(std::string(name) + ": the underlying allocator is null");
    }
  }

  Allocation* AllocateImpl(std::size_t size) override {
    return underlying_->Allocate(size).release();
  }
  void FreeImpl(Allocation* allocation) override { underlying_->Free(allocation); }
  std::uint64_t ReleaseImpl(const platform::Place& place) override {
    return underlying_->Release(place);
  }

 private:
  const std::shared_ptr<Allocator> owner_;
  // The same object as owner_: the hot paths call through a plain pointer.
  Allocator* const underlying_;
};

}  // namespace strata::allocation
