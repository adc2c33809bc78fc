// AutoGrowthOptions: the knobs of AutoGrowthBestFitAllocator (a plain struct), their validation,
// and the request rounding they define. The defaults are those production uses (the facade's
// auto_growth chain): one pool for all sizes, grown by at least 20 MiB, idle chunks given back
// before the reservation would reach a new high.
//
// Contract: ValidateAutoGrowthOptions throws std::invalid_argument naming the first bad option,
// its value and what is allowed; the rest throws nothing. Everything here is pure (no state).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "strategies/device_reserved.h"

namespace strata::strategies {

struct AutoGrowthOptions {
  static constexpr std::size_t kMiB = std::size_t{1} << 20;
  // Requests above this are rejected with std::invalid_argument (no device has 1 EiB, and it
  // keeps every rounding below free of overflow).
  static constexpr std::size_t kMaxRequestBytes = std::size_t{1} << 60;
  // roundup_power2_divisions has at most this many entries: [1 MiB, 2 MiB) ... [2^63, 2^64).
  static constexpr std::size_t kMaxRoundupIntervals = 44;

  // Every block size is a multiple of this (and every block starts at a multiple of it relative
  // to its chunk). A power of two, at most growth_granularity.
  std::size_t alignment = 512;
  // Minimum bytes to grow by for the large pool; 0 = just the rounded request (Paddle's
  // auto_growth_chunk_size_in_mb). Rounded up to growth_granularity. 20 MiB is PyTorch's
  // large-buffer size.
  std::size_t chunk_size = 20 * kMiB;
  // Paddle: release a chunk to the device as soon as it becomes entirely free.
  bool free_idle_chunk = false;
  // Paddle: on a cache miss, release all idle chunks before growing.
  bool free_when_no_cache_hit = false;
  // On a cache miss whose growth would lift reserved bytes above their high-water mark, first
  // release idle chunks (longest idle first) until the growth fits under the mark. Keeps the
  // peak reservation near the peak demand without churning the device below the peak.
  // (On the PyTorch traces of docs/benchmarks/2026-11-21-trace-replays.md, with small_size = 0
  // and chunk_size = 20 MiB, peak reserved / peak requested was 1.03-1.17 at fewer device mallocs
  // than PyTorch segments.)
  bool release_idle_before_new_peak = true;
  // PyTorch max_split_size (bytes, 0 = unlimited). Blocks of at least this size ("oversize")
  // are never split; requests below it never take an oversize block; an oversize request takes
  // an oversize block at most oversize_slack bytes bigger than itself (PyTorch: 20 MiB).
  // Must be 0 or larger than small_size.
  std::size_t max_split_size = 0;
  std::size_t oversize_slack = 20 * kMiB;
  // PyTorch roundup_power2_divisions. Entry i applies to sizes in [2^(20+i), 2^(21+i)) — i.e.
  // entry 0 to sizes below 2 MiB (including those below 1 MiB, as in PyTorch), entry 1 to
  // [2 MiB, 4 MiB), ... — and the last entry to every larger size. A size is rounded up to the
  // next of `divisions` equal steps of its power-of-two interval (e.g. 4 divisions: 1280 MiB
  // -> 1536 MiB), when divisions > 1 and size > alignment * divisions. Each entry is 0 or a
  // power of two (0 and 1: no rounding). Empty: no rounding beyond alignment. Use
  // UniformRoundup(n) for PyTorch's single-number form.
  std::vector<std::size_t> roundup_power2_divisions;
  // PyTorch garbage_collection_threshold: 0 = off, else in (0, 1) and needs memory_limit.
  double garbage_collection_threshold = 0.0;
  // What the device's pools hold together (device_reserved.h): when set, this pool counts its
  // chunks into it, and garbage collection judges the device's total, as PyTorch does.
  std::shared_ptr<DeviceReserved> device;
  // Bytes the allocator may reserve from the device (0 = no limit). Growth past it throws
  // BadAlloc before the device is asked.
  std::size_t memory_limit = 0;
  // Small pool: rounded requests <= small_size (0 = no small pool: one pool for all sizes) grow
  // chunks of small_chunk_size (>= small_size, a multiple of growth_granularity), so small
  // blocks never fragment large chunks. allocation::kSmallSize (1 MiB) is PyTorch's split.
  std::size_t small_size = 0;
  std::size_t small_chunk_size = 2 * kMiB;
  // Growth is rounded up to this (the device allocator rounds to 2 MiB anyway). A power of two.
  std::size_t growth_granularity = 2 * kMiB;
  // Quick reuse: a freed block may wait uncoalesced for the next request of exactly its size,
  // which then takes it back without a search or split. Invisible in placement, growth,
  // releases and statistics (see auto_growth_quick_reuse.cc); it only makes a free + allocate of
  // one size in a loop cheaper (the emulated cached-pair benchmark of the whole chain: about
  // 40 ns instead of 55), at a small cost to other frees and allocations. Production uses it.
  bool quick_reuse = true;

  static std::vector<std::size_t> UniformRoundup(std::size_t divisions) {
    return std::vector<std::size_t>(1, divisions);
  }
};

// Throws std::invalid_argument naming the first bad option.
void ValidateAutoGrowthOptions(const AutoGrowthOptions& options);

// The roundup_power2_divisions rounding of `size` (<= kMaxRequestBytes), then alignment; size 0
// gives the minimal block. (With no divisions this is the alignment rounding alone.)
std::size_t RoundWithDivisions(const AutoGrowthOptions& options, std::size_t size);

// garbage_collection_threshold * memory_limit in bytes, or 0 when garbage collection is off.
std::size_t GcTargetBytes(const AutoGrowthOptions& options);

}  // namespace strata::strategies
