// The allocator's flags: every one defined once, with Abseil flags, in flags.cc.
//
// Names and defaults follow Paddle (FLAGS_<name>) and, for max_split_size_mb,
// roundup_power2_divisions and garbage_collection_threshold, PyTorch's PYTORCH_CUDA_ALLOC_CONF
// keys. `--helpfull` shows each flag's documentation.
//
// Contract
// - Don't read these flags one by one in allocator code: call strata::flags::Current()
//   (flag_sources.h), which returns one validated, consistent AllocatorFlags snapshot.
// - Sources and precedence (later wins): defaults < FLAGS_<name> environment variables <
//   STRATA_ALLOC_CONF < the embedding program's command line; see flag_sources.h.
// - Thread safety: that of Abseil flags (each read/write is atomic per flag); flag_sources.h
//   adds the cross-flag consistency.
// - Names must not collide with glog's gflags (v, vmodule, logtostderr, ...); a test checks it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/flags/declare.h"
#include "flags/allocator_strategy.h"
#include "flags/roundup_power2_divisions.h"

// Paddle's flags.
ABSL_DECLARE_FLAG(strata::flags::AllocatorStrategy, allocator_strategy);
ABSL_DECLARE_FLAG(bool, use_system_allocator);
ABSL_DECLARE_FLAG(bool, use_stream_safe_cuda_allocator);
ABSL_DECLARE_FLAG(std::int64_t, gpu_allocator_retry_time);
ABSL_DECLARE_FLAG(double, fraction_of_gpu_memory_to_use);
ABSL_DECLARE_FLAG(std::uint64_t, initial_gpu_memory_in_mb);
ABSL_DECLARE_FLAG(std::uint64_t, reallocate_gpu_memory_in_mb);
ABSL_DECLARE_FLAG(std::uint64_t, gpu_memory_limit_mb);
ABSL_DECLARE_FLAG(std::uint64_t, auto_growth_chunk_size_in_mb);
ABSL_DECLARE_FLAG(bool, free_idle_chunk);
ABSL_DECLARE_FLAG(bool, free_when_no_cache_hit);
ABSL_DECLARE_FLAG(double, fraction_of_cpu_memory_to_use);
ABSL_DECLARE_FLAG(std::uint64_t, initial_cpu_memory_in_mb);
ABSL_DECLARE_FLAG(double, fraction_of_cuda_pinned_memory_to_use);
ABSL_DECLARE_FLAG(bool, init_allocated_mem);
// PyTorch's caching-allocator options.
ABSL_DECLARE_FLAG(std::uint64_t, max_split_size_mb);
ABSL_DECLARE_FLAG(strata::flags::RoundupPower2Divisions, roundup_power2_divisions);
ABSL_DECLARE_FLAG(double, garbage_collection_threshold);

namespace strata::flags {

// Every flag above, in this order; the only names FLAGS_* and STRATA_ALLOC_CONF may set.
inline constexpr std::array<std::string_view, 18> kFlagNames = {
    "allocator_strategy",
    "use_system_allocator",
    "use_stream_safe_cuda_allocator",
    "gpu_allocator_retry_time",
    "fraction_of_gpu_memory_to_use",
    "initial_gpu_memory_in_mb",
    "reallocate_gpu_memory_in_mb",
    "gpu_memory_limit_mb",
    "auto_growth_chunk_size_in_mb",
    "free_idle_chunk",
    "free_when_no_cache_hit",
    "fraction_of_cpu_memory_to_use",
    "initial_cpu_memory_in_mb",
    "fraction_of_cuda_pinned_memory_to_use",
    "init_allocated_mem",
    "max_split_size_mb",
    "roundup_power2_divisions",
    "garbage_collection_threshold",
};

bool IsStrataFlag(std::string_view name);

// "allocator_strategy, use_system_allocator, ...", for messages.
std::string SupportedFlagList();

}  // namespace strata::flags
