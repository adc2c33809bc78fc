// AllocatorFlags: one snapshot of every allocator flag (flags.h), read together, so the facade
// configures every layer from one consistent set of values.
//
// Get one with strata::flags::Current() (flag_sources.h); AllocatorFlags::Defaults() gives the
// flags' defaults without touching the live flags (for tests and for building allocators
// without global state). Field names are the flag names; sizes are in MB as in the flags, and a
// validated snapshot guarantees `mb << 20` does not overflow std::uint64_t.
//
// Contract: a value type, thread-safe as any value. Validate() throws std::invalid_argument
// listing every broken constraint with the flag name(s), the value and what is allowed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flags/allocator_strategy.h"
#include "flags/roundup_power2_divisions.h"

namespace strata::flags {

struct AllocatorFlags {
  // Paddle's flags.
  AllocatorStrategy allocator_strategy{};
  bool use_system_allocator{};
  bool use_stream_safe_cuda_allocator{};
  std::int64_t gpu_allocator_retry_time{};  // ms; <= 0: no retry
  double fraction_of_gpu_memory_to_use{};
  std::uint64_t initial_gpu_memory_in_mb{};
  std::uint64_t reallocate_gpu_memory_in_mb{};
  std::uint64_t gpu_memory_limit_mb{};  // 0: no limit
  std::uint64_t auto_growth_chunk_size_in_mb{};
  bool free_idle_chunk{};
  bool free_when_no_cache_hit{};
  double fraction_of_cpu_memory_to_use{};
  std::uint64_t initial_cpu_memory_in_mb{};
  double fraction_of_cuda_pinned_memory_to_use{};
  bool init_allocated_mem{};
  // PyTorch's options.
  std::uint64_t max_split_size_mb{};  // 0: unlimited
  RoundupPower2Divisions roundup_power2_divisions;
  double garbage_collection_threshold{};  // 0: off

  // Largest MB count whose byte size fits std::uint64_t.
  static constexpr std::uint64_t kMaxMb = ~std::uint64_t{0} >> 20;
  // PyTorch's lower bound for max_split_size_mb (its large-block size).
  static constexpr std::uint64_t kMinMaxSplitSizeMb = 20;

  // The flags' default values (parsed from the flag definitions: one source of truth).
  static AllocatorFlags Defaults();
  // The live flags, read one by one and not validated. Prefer Current() (flag_sources.h), which
  // reads them under the lock that ApplyAllocConf & co. write under, then validates.
  static AllocatorFlags ReadLive();

  struct Problem {
    std::vector<std::string> flags;  // the flag(s) involved
    std::string message;             // names the flag(s), the value(s) and what is allowed
  };
  // Every broken constraint; empty when valid.
  std::vector<Problem> Problems() const;
  // Throws std::invalid_argument with every problem's message.
  void Validate() const;

  // "allocator_strategy=auto_growth use_system_allocator=false ...", for logs.
  std::string DebugString() const;

  friend bool operator==(const AllocatorFlags&, const AllocatorFlags&) = default;
};

}  // namespace strata::flags
