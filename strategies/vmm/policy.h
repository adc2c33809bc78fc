// The virtual-memory pool's policy: where a request goes, when to stitch idle pages rather than
// create memory, when growth maps extents, when a free records a fence. Pure functions over
// plain figures of the pool; placement takes the pool's view of a block's cost as callbacks, so
// that each rule is tested alone (vmm_policy_test).
//
// Contract: no state, no device calls, nothing thrown (callbacks aside); thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace strata::strategies::vmm {

// Pages to map in a range that cannot be placed now: it has a mapping whose work is pending.
inline constexpr std::size_t kBlocked = ~std::size_t{0};

// The two regions of the address space, which never merge: small blocks pack into pages of
// their own instead of pinning pages (and splitting free ranges) between large ones.
inline constexpr std::uint8_t kSmallRegion = 0, kLargeRegion = 1;
inline std::uint8_t RegionFor(std::size_t size, std::size_t small_block_bytes) {
  return size <= small_block_bytes ? kSmallRegion : kLargeRegion;
}
// Bytes of the small region in a reservation of `bytes` (pages of `page` bytes); 0 when the
// reservation is too small to split.
inline std::size_t SmallRegionBytes(std::size_t bytes, std::size_t page, std::size_t divisor) {
  if (divisor == 0 || bytes / page < divisor) return 0;
  return (bytes / divisor + page - 1) / page * page;
}

// The figures stitching decides on.
struct PhysicalFigures {
  std::size_t physical = 0;         // bytes created and not released
  std::size_t live_peak_bytes = 0;  // the most pages live blocks touched at once, in bytes
  std::size_t memory_limit = 0;     // 0: none
  std::size_t page = 0;
  std::size_t stitch_slack_permille = 0;
};
// Whether `need` more bytes of physical memory should come from idle pages (stitching) rather
// than the device: they would pass the limit, or hold more than the slack above the live peak.
inline bool ShouldStitch(const PhysicalFigures& f, std::size_t need) {
  if (f.memory_limit != 0 && f.physical + need > f.memory_limit) return true;
  const std::size_t peak = f.live_peak_bytes;
  return f.physical + need > peak + peak / 1000 * f.stitch_slack_permille + 2 * f.page;
}

// The stitching slack adapts to the workload. Remapping (a page stitched into another range, or a
// range's mapping undone because its physical page is in use elsewhere) costs the host tens of
// microseconds a call; a workload that keeps remapping once its live peak stopped growing (a
// repeating step whose blocks land elsewhere each time: a KV cache grown by concatenation, shapes
// drawn from a range) pays that every step. Such a workload earns more slack, one step at a time,
// until the remapping stops or the slack reaches its ceiling: memory only where remapping persists.
// A window is a turnover of the pool's memory: allocations summing to at least `turnover` times
// the live peak.
struct SlackWindow {
  std::size_t allocated_bytes = 0;  // allocated in this window
  std::size_t peak_at_start = 0;    // the live peak (pages) when the window began
  std::size_t remaps = 0;           // pages stitched in, and mappings undone, in this window
};
struct SlackRule {
  std::size_t step_permille = 0;  // added per window that remapped at a steady live peak
  std::size_t max_permille = 0;   // the ceiling
};
// Bytes a window allocates: `turnover` times the live peak (pages of `page` bytes), at least a
// page.
inline std::size_t WindowBytes(std::size_t live_peak_pages, std::size_t page,
                               std::size_t turnover) {
  return turnover * std::max<std::size_t>(live_peak_pages, 1) * page;
}
// The slack after window `w`: one step more if it remapped while the live peak stayed put (a
// growing peak is a cold start or a new largest input: remapping then is how the pool keeps up,
// not churn).
inline std::size_t SlackAfter(std::size_t slack_permille, const SlackWindow& w,
                              std::size_t live_peak_pages, const SlackRule& rule) {
  if (w.remaps == 0 || live_peak_pages != w.peak_at_start) return slack_permille;
  return std::min(slack_permille + rule.step_permille, std::max(rule.max_permille, slack_permille));
}

// Whether growth maps runs of a range's missing pages as extents (one create and map each), when
// the pool may grow by every page missing:
// - before the first free of a block of a page or more (a model's set-up: weights and buffers,
//   which stay);
// - for a block that raises the live peak once the peak held through a slack window (a new
//   largest input after the steps settled: shapes drawn at random from a range). The pages are
//   the new peak's; the steps that reach it again use them where they are. Replays of 40 steps
//   recorded end to end, device calls in the last 20 (strata-replay --tail_percent=50):
//   seq2seq_random_len_train 85 creates and maps -> 6, detection_varsize_train 43 -> 4, with or
//   without device lag; peak reserved unchanged, and thirteen shorter traces replay identically
//   (2026-11-26, run 24).
// Otherwise pages stay single: an extent cannot be stitched into another range, nor given back
// while its last work is pending, so extents made while the peak still grows window after window
// (a model's first steps) cost memory: gpt2_train replayed with device lag 64, 1.004 -> 1.070 of
// its peak with extents at every new peak, or after the first free (run 24).
// A new peak's extents are made only while the growth leaves at least 1/`headroom_divisor` of
// the memory the pool may hold (the limit, else the device) free: near the top, a partly used
// extent strands its other pages, which single pages would have let stitching lend. `free`: the
// bytes the device has free, less any the limit withholds.
inline bool RoomForExtents(std::size_t need, std::size_t free, std::size_t capacity,
                           std::size_t headroom_divisor) {
  return headroom_divisor != 0 && free >= need && free - need >= capacity / headroom_divisor;
}
// Never under a memory cap the user set (gpu_memory_limit_mb, or a memory fraction): the user
// then asks for the most that fits, and an extent made at set-up, partly freed later, strands
// its other pages at the cap, where the headroom rule above cannot see it coming (it was made
// far below the top). llm_generate_hf at batch 66 under 1 GiB (recorded on an H200, replayed
// emulated): out of memory with extents, 12.65 MiB short with 29.5 MiB idle in partly used
// ones; without them it runs, at 1.014 of its peak requested; the smallest cap it runs under,
// 1028 -> 1024 MiB. Other recordings need the same cap either way (2026-11-28, run 35).
struct ExtentRequest {
  std::size_t missing = 0;           // pages of the range to map
  std::size_t max_extent_pages = 0;  // Options::max_extent_pages
  bool freed_large = false;          // a block of a page or more was freed once
  bool new_peak_after_steady = false;
  bool have_spares = false;  // physical pages unmapped, ready to use
  bool should_stitch = false;
  bool capped = false;  // the user set a memory limit
};
inline bool UseExtents(const ExtentRequest& r) {
  return r.missing >= 2 && r.max_extent_pages > 1 && (!r.freed_large || r.new_peak_after_steady) &&
         !r.have_spares && !r.should_stitch && !r.capped;
}

// Whether a free records a fence: every `fence_every` frees of a stream, so that another stream
// taking the block waits only for work up to about its free, and pages of work long done are
// seen as done (the host runs far ahead of the device). With one stream, only at frees of
// page-sized blocks: small frees stay off the driver.
inline bool FenceDue(std::uint64_t frees_since_fence, std::size_t num_streams, bool page_sized,
                     std::uint64_t fence_every) {
  return frees_since_fence >= fence_every && (num_streams > 1 || page_sized);
}

// Placement: the free block to carve a request from, and where in it.
template <typename Block>
struct Placement {
  Block* block = nullptr;          // nullptr: nothing fits, or every fit is blocked
  std::size_t missing = 0;         // pages of the chosen range to map
  std::size_t offset = 0;          // where in the block the range starts
  bool every_fit_blocked = false;  // every fit weighed starts on a mapping that cannot go yet
};

// Chooses among the fits of `index` (a TlsfIndex) for `size` bytes: the best fit, unless it has
// pages to map; then, of it and up to `scan` more fits, the one with the fewest pages to map. A
// fit that starts on a mapping that cannot go yet (its page is used through another range, and
// the work through this one is pending) is weighed from its first offset clear of such mappings.
// Ties go to a placement at a fit's start, then to the smaller block. If no fit weighed has a
// clear offset, every fit is tried from its first clear offset. `view` gives the pool's costs:
//   StartCost(block): pages to map for `size` bytes at the block's start, or kBlocked;
//   ClearOffset(block): the first offset from which `size` bytes cross no blocked mapping, or
//     kBlocked;
//   CostAt(block, offset): pages to map for `size` bytes at `offset`, or kBlocked.
// Weighing blocked fits past their blocked pages, rather than only once every fit is blocked,
// keeps a device that runs behind the host from steering requests onto unmapped ranges: replays
// of twelve traces at device lag 64 (docs/benchmarks/2026-11-28-run33.md), last of three passes,
// 842 -> 465 device calls, geometric mean of peak reserved over requested 1.0383 -> 1.0362
// (bert_infer_dynamic 1.0743 -> 1.0574, llm_decode_kv 1.0764 -> 1.0633); at lag 0 1.0262 ->
// 1.0269 (bert_infer_dynamic 1.0278 -> 1.0405).
template <typename Block, typename Index, typename View>
Placement<Block> ChoosePlacement(const Index& index, std::size_t size, int scan, View& view) {
  Placement<Block> p;
  Block* best = index.FindBestFit(size);
  if (best == nullptr) [[unlikely]]
    return p;
  std::size_t best_cost = view.StartCost(best);
  if (best_cost == 0) [[likely]] {
    p.block = best;
    return p;
  }
  bool every_start_blocked = best_cost == kBlocked;
  // A blocked fit's cost from its first clear offset (`offset`), or kBlocked.
  auto past_blocked = [&](Block* b, std::size_t* offset) {
    const std::size_t off = view.ClearOffset(b);
    if (off == kBlocked) return kBlocked;
    *offset = off;
    return view.CostAt(b, off);
  };
  if (best_cost == kBlocked) best_cost = past_blocked(best, &p.offset);
  index.VisitFits(size, scan, [&](Block* b) {
    if (b == best) return false;
    std::size_t offset = 0;
    std::size_t c = view.StartCost(b);
    if (c == kBlocked) {
      c = past_blocked(b, &offset);
    } else {
      every_start_blocked = false;
    }
    const bool tie = c == best_cost && c != kBlocked;
    if (c < best_cost || (tie && offset == 0 && p.offset != 0) ||
        (tie && (offset == 0) == (p.offset == 0) && b->size() < best->size())) {
      best = b;
      best_cost = c;
      p.offset = offset;
    }
    return best_cost == 0 && p.offset == 0;
  });
  p.every_fit_blocked = every_start_blocked;
  if (best_cost == kBlocked) {
    index.VisitFits(size, std::numeric_limits<int>::max(), [&](Block* b) {
      std::size_t offset = 0;
      const std::size_t c = past_blocked(b, &offset);
      if (c < best_cost) {
        best = b;
        best_cost = c;
        p.offset = offset;
      }
      return best_cost == 0;
    });
  }
  p.missing = best_cost;
  p.block = best_cost == kBlocked ? nullptr : best;
  return p;
}

}  // namespace strata::strategies::vmm
