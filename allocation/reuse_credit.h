// ReuseCredit: whether parking freed blocks for quick reuse pays, kept by each cache that parks
// them (a thread's cache in ThreadCacheAllocator, the chunk pool's quick reuse). Parking pays
// only when blocks come back: with mixed sizes a parked block is given back unused more often
// than taken again, and each such block costs a flush. A hit earns kHitCredit (up to
// kMaxCredit), a parked block given back unused costs 1, and frees park only while the credit is
// positive. While it is not, an allocation of the size a free could not park last (a hit
// parking would have made) turns parking on again.
//
// Contract: a plain value, not thread-safe (its owner's thread or lock); throws nothing.
#pragma once

#include <algorithm>
#include <cstddef>

namespace strata::allocation {

class ReuseCredit {
 public:
  static constexpr int kHitCredit = 2;
  static constexpr int kMaxCredit = 32;

  bool parks() const { return credit_ > 0; }
  // A parked block taken again.
  void Hit() { credit_ = std::min(credit_ + kHitCredit, kMaxCredit); }
  // `blocks` parked blocks given back unused.
  void Unused(int blocks) { credit_ -= blocks; }
  // A free of size (class) `key` that did not park.
  void Refused(std::size_t key) { last_refused_ = key; }
  // An allocation of size (class) `key` that found nothing parked to take.
  void Missed(std::size_t key) {
    if (credit_ <= 0 && key == last_refused_) [[unlikely]]
      credit_ = 1;
  }
  void Reset() { *this = ReuseCredit(); }
  int credit() const { return credit_; }

 private:
  int credit_ = kMaxCredit;
  std::size_t last_refused_ = 0;  // 0: none
};

}  // namespace strata::allocation
