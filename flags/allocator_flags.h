// AllocatorFlags: one snapshot of every allocator flag (flags.h), read together, so the facade
// configures every layer from one consistent set of values.
//
// Get one with strata::flags::Current() (flag_sources.h); AllocatorFlags::Defaults() gives the
// flags' defaults without touching the live flags (for tests and for building allocators
// without global state). The fields are generated from flag_list.h: one per flag, with the flag's
// name and type; sizes are in MB as in the flags, and a validated snapshot guarantees `mb << 20`
// does not overflow std::uint64_t.
//
// Contract: a value type, thread-safe as any value. Validate() throws std::invalid_argument
// listing every broken constraint with the flag name(s), the value and what is allowed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flags/flag_list.h"

namespace strata::flags {

struct AllocatorFlags {
  // One field per flag of flag_list.h, with the flag's name and type, in its order (e.g.
  // `std::uint64_t max_split_size_mb`). Zero here; Defaults() has the flags' defaults.
#define STRATA_ALLOCATOR_FLAG_FIELD(type, name, default_value, help) type name{};
  STRATA_ALLOCATOR_FLAGS(STRATA_ALLOCATOR_FLAG_FIELD)
#undef STRATA_ALLOCATOR_FLAG_FIELD

  // Largest MB count accepted: 2^60 bytes, the largest request the pools serve (a chunk or
  // split size beyond it would pass here and fail every allocation).
  static constexpr std::uint64_t kMaxMb = std::uint64_t{1} << 40;
  // Longest gpu_allocator_retry_time, in milliseconds (one hour): an OOM must return.
  static constexpr std::int64_t kMaxRetryMs = 3'600'000;
  // Largest virtual_memory_stitch_slack_permille: physical memory up to twice the live peak.
  static constexpr std::uint64_t kMaxStitchSlackPermille = 1000;
  // PyTorch's lower bound for max_split_size_mb (its large-block size).
  static constexpr std::uint64_t kMinMaxSplitSizeMb = 20;

  // The flags' default values (the defaults of flag_list.h, as the Abseil flags have them).
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
