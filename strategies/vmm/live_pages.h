// LivePageCount: how many pages of address space live blocks touch, and the most ever at once,
// at block granularity: the base of the virtual-memory pool's stitching threshold.
//
// Pages strictly inside a block are touched by it alone, so only a block's first and last pages
// need a count of the live blocks whose end they are: constant work, whatever the block's size.
//
// Contract: not thread-safe (the pool's lock); nothing thrown.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata::strategies::vmm {

class LivePageCount {
 public:
  void Resize(std::size_t pages) { ends_.assign(pages, 0); }

  // A live block covering address pages [first, last].
  void Activate(std::size_t first, std::size_t last) {
    if (last - first > 1) live_ += last - first - 1;
    if (ends_[first]++ == 0) ++live_;
    if (last != first && ends_[last]++ == 0) ++live_;
    peak_ = std::max(peak_, live_);
  }
  void Deactivate(std::size_t first, std::size_t last) {
    if (last - first > 1) live_ -= last - first - 1;
    if (--ends_[first] == 0) --live_;
    if (last != first && --ends_[last] == 0) --live_;
  }

  std::size_t live() const { return live_; }
  std::size_t peak() const { return peak_; }

 private:
  std::vector<std::uint32_t> ends_;  // per page: live blocks whose first or last page it is
  std::size_t live_ = 0;
  std::size_t peak_ = 0;
};

}  // namespace strata::strategies::vmm
