// The allocator's flags: listed once in flag_list.h, defined from that list as Abseil flags in
// flags.cc.
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
#include "flags/flag_list.h"

// FLAGS_<name> for every flag of flag_list.h, e.g. absl::GetFlag(FLAGS_max_split_size_mb).
#define STRATA_DECLARE_ALLOCATOR_FLAG(type, name, default_value, help) \
  ABSL_DECLARE_FLAG(type, name);
STRATA_ALLOCATOR_FLAGS(STRATA_DECLARE_ALLOCATOR_FLAG)
#undef STRATA_DECLARE_ALLOCATOR_FLAG

namespace strata::flags {

// Every flag of flag_list.h, in its order; the only names FLAGS_* and STRATA_ALLOC_CONF may set.
#define STRATA_ALLOCATOR_FLAG_NAME(type, name, default_value, help) #name,
inline constexpr auto kFlagNames =
    std::to_array<std::string_view>({STRATA_ALLOCATOR_FLAGS(STRATA_ALLOCATOR_FLAG_NAME)});
#undef STRATA_ALLOCATOR_FLAG_NAME

bool IsStrataFlag(std::string_view name);

// "allocator_strategy, use_system_allocator, ...", for messages.
std::string SupportedFlagList();

}  // namespace strata::flags
