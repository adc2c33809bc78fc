// SplitAccounting: the inactive-split figures of a pool (PyTorch's inactive_split and
// inactive_split_bytes: free blocks that share their chunk with other blocks), kept as plain
// counters so that the free lists update a few integers rather than six StatValues per change.
//
// Contract: not thread safe (the owner's lock guards it); throws nothing; no allocation. The
// callers decide what is a split and report each free split block as it appears (In), goes
// (Out) or changes size (Shrink / Grow, which record exactly what Out + In would).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/base/attributes.h"
#include "allocation/memory_stats.h"

namespace strata::strategies {

class SplitAccounting {
 public:
  ABSL_ATTRIBUTE_ALWAYS_INLINE void In(std::size_t bytes) {
    const allocation::StatPool p = allocation::PoolOf(bytes);
    const auto n = static_cast<std::int64_t>(bytes);
    Figure& c = count_[p];
    Figure& b = bytes_[p];
    ++c.current;
    ++c.increased;
    c.peak = std::max(c.peak, c.current);
    b.current += n;
    b.increased += n;
    b.peak = std::max(b.peak, b.current);
    UpdateAggregatePeak(count_);
    UpdateAggregatePeak(bytes_);
  }

  ABSL_ATTRIBUTE_ALWAYS_INLINE void Out(std::size_t bytes) {
    const allocation::StatPool p = allocation::PoolOf(bytes);
    --count_[p].current;
    bytes_[p].current -= static_cast<std::int64_t>(bytes);
  }

  // As Out(from) + In(to) for from > to.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Shrink(std::size_t from, std::size_t to) {
    if (to > allocation::kSmallSize || from <= allocation::kSmallSize) [[likely]] {
      const allocation::StatPool p = allocation::PoolOf(to);
      ++count_[p].increased;
      bytes_[p].current -= static_cast<std::int64_t>(from - to);
      bytes_[p].increased += static_cast<std::int64_t>(to);
    } else {
      Out(from);
      In(to);
    }
  }

  // As Out(from) + In(to) for from < to.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Grow(std::size_t from, std::size_t to) {
    if (from > allocation::kSmallSize || to <= allocation::kSmallSize) [[likely]] {
      const allocation::StatPool p = allocation::PoolOf(to);
      Figure& b = bytes_[p];
      ++count_[p].increased;
      b.current += static_cast<std::int64_t>(to - from);
      b.increased += static_cast<std::int64_t>(to);
      b.peak = std::max(b.peak, b.current);
      UpdateAggregatePeak(bytes_);
    } else {
      Out(from);
      In(to);
    }
  }

  // Adds the figures to stats->inactive_split and stats->inactive_split_bytes.
  void Collect(allocation::MemoryStats* stats) const {
    for (auto [figures, to] : {std::pair{&count_, &stats->inactive_split},
                               std::pair{&bytes_, &stats->inactive_split_bytes}}) {
      allocation::StatValue total;
      for (allocation::StatPool p : {allocation::kSmallPool, allocation::kLargePool}) {
        const Figure& f = (*figures)[p];
        allocation::StatValue v;
        v.current = f.current;
        v.peak = f.peak;
        v.allocated = f.increased;
        v.freed = f.increased - f.current + f.base;
        (*to)[p].Merge(v);
        total.current += v.current;
        total.allocated += v.allocated;
        total.freed += v.freed;
      }
      total.peak = (*figures)[allocation::kAggregate].peak;
      (*to)[allocation::kAggregate].Merge(total);
    }
  }

  void ResetPeak() {
    for (Figures* figures : {&count_, &bytes_}) {
      Figures& f = *figures;
      f[allocation::kSmallPool].peak = f[allocation::kSmallPool].current;
      f[allocation::kLargePool].peak = f[allocation::kLargePool].current;
      f[allocation::kAggregate].peak =
          f[allocation::kSmallPool].current + f[allocation::kLargePool].current;
    }
  }

  void ResetAccumulated() {
    for (Figures* figures : {&count_, &bytes_}) {
      for (Figure& f : *figures) {
        f.increased = 0;
        f.base = f.current;
      }
    }
  }

 private:
  // Indexed by StatPool. Entry kAggregate keeps only the peak (its current and increased are the
  // sums of the pools'), and `freed` is derived: increased - current + current at the last
  // ResetAccumulated.
  struct Figure {
    std::int64_t current = 0;
    std::int64_t peak = 0;
    std::int64_t increased = 0;  // StatValue::allocated
    std::int64_t base = 0;       // current at the last ResetAccumulated
  };
  using Figures = std::array<Figure, allocation::kNumStatPools>;

  static void UpdateAggregatePeak(Figures& f) {
    f[allocation::kAggregate].peak =
        std::max(f[allocation::kAggregate].peak,
                 f[allocation::kSmallPool].current + f[allocation::kLargePool].current);
  }

  Figures count_{};
  Figures bytes_{};
};

}  // namespace strata::strategies
