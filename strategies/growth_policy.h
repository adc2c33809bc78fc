// Growth policy of AutoGrowthBestFitAllocator: on a cache miss (no free block fits), how many
// bytes to ask the underlying allocator for and which idle chunks (chunks that are one free
// block) to give back first. Pure functions of the options and a few figures of the pool: no
// state, no locks, no allocation, nothing thrown; the allocator carries out the plan.
//
// The rules, in the order applied (every release takes the longest-idle chunks first):
// - Growth: the small pool grows by small_chunk_size (or the request, if larger). The large pool
//   grows by the request or chunk_size, whichever is larger, but a chunk meant for splitting
//   stays below max_split_size so its pieces remain usable by ordinary requests; an oversize
//   request (>= max_split_size) gets exactly its size, since oversize blocks are never split.
//   Every growth is rounded up to growth_granularity.
// - free_when_no_cache_hit: release every idle chunk.
// - release_idle_before_new_peak: when reserved + growth would pass the high-water mark (the
//   most ever reserved), release idle chunks until it does not, or none is left.
// - garbage_collection_threshold: likewise while the device's reserved bytes (this pool's and
//   `others`, the device's other pools') + growth exceed threshold * memory_limit; if releasing
//   this pool's idle chunks is not enough, the plan asks for a collection in the other pools
//   (collect_elsewhere).
// - memory_limit: when reserved + growth would pass it, shrink the growth to the bare request
//   (rounded to growth_granularity); if that still does not fit, release every idle chunk; if it
//   still does not fit, the request fails (over_limit) without asking the device.
// - The underlying allocator failing (not part of the plan): release every idle chunk and retry
//   once with MinimalGrowthBytes.
#pragma once

#include <cstddef>
#include <span>

#include "strategies/auto_growth_options.h"

namespace strata::strategies {

// The pool's state at a cache miss.
struct GrowthRequest {
  bool small_pool = false;     // the request belongs to the small pool
  std::size_t size = 0;        // the rounded request
  std::size_t reserved = 0;    // bytes held from the underlying allocator
  std::size_t high_water = 0;  // the most ever reserved
  std::size_t others = 0;      // bytes the device's other pools hold (0: unknown or none)
};

struct GrowthPlan {
  std::size_t release_idle = 0;  // how many idle chunks to release first, longest idle first
  std::size_t grow = 0;          // then ask the underlying allocator for this many bytes
  std::size_t gc_bytes = 0;      // of the bytes released, those garbage collection asked for
  bool over_limit = false;       // instead of growing, fail: memory_limit cannot be kept
  // The device stays past its garbage-collection target after this pool's release: the other
  // pools' idle memory should go too.
  bool collect_elsewhere = false;
};

// Bytes to grow `request.size` by, before any memory-limit shrinking.
std::size_t GrowthBytes(const AutoGrowthOptions& options, bool small_pool, std::size_t size);

// The least growth that can serve `size`: used when memory is tight (limit or device OOM).
std::size_t MinimalGrowthBytes(const AutoGrowthOptions& options, std::size_t size);

// Whether PlanGrowth may release any idle chunk for `request`; when not, the idle chunks need
// not be listed.
bool MayReleaseIdle(const AutoGrowthOptions& options, const GrowthRequest& request);

// The plan for `request`, given the sizes of the idle chunks, longest idle first.
GrowthPlan PlanGrowth(const AutoGrowthOptions& options, const GrowthRequest& request,
                      std::span<const std::size_t> idle_sizes);

}  // namespace strata::strategies
