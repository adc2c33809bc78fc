// MemoryStats: PyTorch's allocator statistics, per place.
//
// Each StatValue has current / peak / allocated (accumulated increments) / freed (accumulated
// decrements), kept for all blocks (kAggregate), the small pool (blocks of at most
// kSmallSize bytes) and the large pool. Layers contribute the part they own through
// Allocator::CollectStats: a pooling strategy fills segment / reserved / inactive_split
// figures, the stat layer allocation / allocated / requested / active figures, the stream-safe
// layer adds its pending frees to active. num_alloc_retries is the sum of two layers: the
// out-of-memory recovery layer adds one per recovery (every chain of the device released, then
// one more try) and the retry layer one per retried underlying Allocate call.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace strata::allocation {

enum StatPool : int { kAggregate = 0, kSmallPool = 1, kLargePool = 2 };
inline constexpr int kNumStatPools = 3;
// Blocks up to this size belong to the small pool (as in PyTorch).
inline constexpr std::size_t kSmallSize = std::size_t{1} << 20;

inline StatPool PoolOf(std::size_t block_bytes) {
  return block_bytes <= kSmallSize ? kSmallPool : kLargePool;
}

struct StatValue {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t allocated = 0;
  std::int64_t freed = 0;

  void Increase(std::int64_t n) {
    current += n;
    allocated += n;
    if (current > peak) peak = current;
  }
  void Decrease(std::int64_t n) {
    current -= n;
    freed += n;
  }
  void ResetPeak() { peak = current; }
  void ResetAccumulated() { allocated = freed = 0; }
  // Adds another layer's or device's figures (peaks add as an upper bound).
  void Merge(const StatValue& o) {
    current += o.current;
    peak += o.peak;
    allocated += o.allocated;
    freed += o.freed;
  }
};

using StatArray = std::array<StatValue, kNumStatPools>;

struct MemoryStats {
  StatArray allocation{};            // live allocations handed to the user
  StatArray segment{};               // device allocations (cudaMalloc) held
  StatArray active{};                // allocations not yet reusable (live or stream-pending)
  StatArray inactive_split{};        // free blocks that are part of a split segment
  StatArray allocated_bytes{};       // bytes of live allocations (after rounding)
  StatArray reserved_bytes{};        // bytes held from the device
  StatArray active_bytes{};          // bytes of active allocations
  StatArray inactive_split_bytes{};  // bytes of inactive split blocks
  StatArray requested_bytes{};       // bytes the user asked for (before rounding)

  std::int64_t num_alloc_retries = 0;
  std::int64_t num_ooms = 0;
  std::int64_t num_device_alloc = 0;
  std::int64_t num_device_free = 0;
  std::int64_t num_device_map = 0;    // virtual-memory pages mapped
  std::int64_t num_device_unmap = 0;  // virtual-memory pages unmapped
  std::int64_t num_stream_waits = 0;  // cross-stream reuses ordered on the device
  // Calls through the device runtime that made the host wait for the device (synchronize, or a
  // device free that implies one), over the whole runtime: the facade fills it in.
  std::int64_t num_host_waits = 0;
  // Calls that waited for the work of every stream of the device (EmptyCache's wait before
  // releasing pages of pending work): PyTorch's num_sync_all_streams.
  std::int64_t num_sync_all_streams = 0;
  // Blocks freed into the per-thread front caches (thread_cache_allocator.h) and not yet given
  // back to their pools: neither allocated nor active, still held by the pools.
  std::int64_t thread_cache_blocks = 0;
  std::int64_t thread_cache_bytes = 0;
  StatValue oversize_allocations{};  // allocations of at least max_split_size
  StatValue oversize_segments{};     // segments above max_split_size
  std::int64_t max_split_size = 0;   // 0: no limit
};

// The per-pool arrays of `s` under PyTorch's names, in torch.cuda.memory_stats()'s order.
struct NamedStatArray {
  const char* name;
  const StatArray* array;
};
inline std::array<NamedStatArray, 9> StatArrays(const MemoryStats& s) {
  return {{{"allocation", &s.allocation},
           {"segment", &s.segment},
           {"active", &s.active},
           {"inactive_split", &s.inactive_split},
           {"allocated_bytes", &s.allocated_bytes},
           {"reserved_bytes", &s.reserved_bytes},
           {"active_bytes", &s.active_bytes},
           {"inactive_split_bytes", &s.inactive_split_bytes},
           {"requested_bytes", &s.requested_bytes}}};
}

}  // namespace strata::allocation
