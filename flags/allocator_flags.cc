#include "flags/allocator_flags.h"

#include <bit>
#include <cmath>
#include <stdexcept>

#include "absl/flags/flag.h"
#include "absl/flags/marshalling.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flags/flags.h"

namespace strata::flags {
namespace {

// Applies `read` to every flag's FLAGS_<name>, filling the snapshot field of the same name.
template <typename Read>
AllocatorFlags ReadAll(Read&& read) {
  AllocatorFlags f;
#define STRATA_READ_ALLOCATOR_FLAG(type, name, default_value, help) f.name = read(FLAGS_##name);
  STRATA_ALLOCATOR_FLAGS(STRATA_READ_ALLOCATOR_FLAG)
#undef STRATA_READ_ALLOCATOR_FLAG
  return f;
}

void CheckFraction(const char* name, double value, std::vector<AllocatorFlags::Problem>* out) {
  if (!(value > 0.0 && value <= 1.0)) {  // written so that NaN fails too
    out->push_back(
        {{name},
         absl::StrCat(name, "=", absl::UnparseFlag(value), " is out of range: must be in (0, 1]")});
  }
}

void CheckMb(const char* name, std::uint64_t value, std::vector<AllocatorFlags::Problem>* out) {
  if (value > AllocatorFlags::kMaxMb) {
    out->push_back({{name},
                    absl::StrCat(name, "=", value,
                                 " MB is larger than any allocation strata serves: must be <= ",
                                 AllocatorFlags::kMaxMb, " (2^60 bytes)")});
  }
}

}  // namespace

AllocatorFlags AllocatorFlags::Defaults() {
  AllocatorFlags f;
  // The same expressions that flags.cc gives ABSL_FLAG as defaults.
#define STRATA_DEFAULT_ALLOCATOR_FLAG(type, name, default_value, help) f.name = default_value;
  STRATA_ALLOCATOR_FLAGS(STRATA_DEFAULT_ALLOCATOR_FLAG)
#undef STRATA_DEFAULT_ALLOCATOR_FLAG
  return f;
}

std::vector<AllocatorFlags::Problem> AllocatorFlags::Problems() const {
  std::vector<Problem> problems;
  CheckFraction("fraction_of_gpu_memory_to_use", fraction_of_gpu_memory_to_use, &problems);
  CheckFraction("fraction_of_cpu_memory_to_use", fraction_of_cpu_memory_to_use, &problems);
  CheckFraction("fraction_of_cuda_pinned_memory_to_use", fraction_of_cuda_pinned_memory_to_use,
                &problems);
  if (!(garbage_collection_threshold == 0.0 ||
        (garbage_collection_threshold > 0.0 && garbage_collection_threshold < 1.0))) {
    problems.push_back({{"garbage_collection_threshold"},
                        absl::StrCat("garbage_collection_threshold=",
                                     absl::UnparseFlag(garbage_collection_threshold),
                                     " is out of range: must be 0 (off) or strictly between 0 "
                                     "and 1")});
  }
  if (max_split_size_mb != 0 && max_split_size_mb <= kMinMaxSplitSizeMb) {
    problems.push_back({{"max_split_size_mb"},
                        absl::StrCat("max_split_size_mb=", max_split_size_mb,
                                     " is too small: must be 0 (unlimited) or > ",
                                     kMinMaxSplitSizeMb, " (as in PyTorch)")});
  }
  if (gpu_allocator_retry_time > kMaxRetryMs) {
    problems.push_back({{"gpu_allocator_retry_time"},
                        absl::StrCat("gpu_allocator_retry_time=", gpu_allocator_retry_time,
                                     " ms is too long: must be <= ", kMaxRetryMs,
                                     " (one hour; <= 0 turns retrying off)")});
  }
  CheckMb("initial_gpu_memory_in_mb", initial_gpu_memory_in_mb, &problems);
  CheckMb("reallocate_gpu_memory_in_mb", reallocate_gpu_memory_in_mb, &problems);
  CheckMb("gpu_memory_limit_mb", gpu_memory_limit_mb, &problems);
  CheckMb("auto_growth_chunk_size_in_mb", auto_growth_chunk_size_in_mb, &problems);
  CheckMb("initial_cpu_memory_in_mb", initial_cpu_memory_in_mb, &problems);
  CheckMb("max_split_size_mb", max_split_size_mb, &problems);
  CheckMb("virtual_memory_extent_mb", virtual_memory_extent_mb, &problems);
  CheckMb("virtual_memory_page_mb", virtual_memory_page_mb, &problems);
  if (!std::has_single_bit(virtual_memory_page_mb) && virtual_memory_page_mb != 0) {
    problems.push_back({{"virtual_memory_page_mb"},
                        absl::StrCat("virtual_memory_page_mb=", virtual_memory_page_mb,
                                     " is not a power of two: must be 0 (the device's "
                                     "granularity) or 2, 4, 8, 16, ...")});
  }
  if (virtual_memory_stitch_slack_permille > kMaxStitchSlackPermille) {
    problems.push_back(
        {{"virtual_memory_stitch_slack_permille"},
         absl::StrCat("virtual_memory_stitch_slack_permille=", virtual_memory_stitch_slack_permille,
                      " is too large: must be <= ", kMaxStitchSlackPermille,
                      " (physical memory twice the peak)")});
  }
  CheckMb("thread_cache_mb", thread_cache_mb, &problems);
  // A chunk larger than the limit could never be allocated: say so now, not at the first OOM.
  if (gpu_memory_limit_mb != 0) {
    for (auto [name, value] :
         {std::pair{"initial_gpu_memory_in_mb", initial_gpu_memory_in_mb},
          std::pair{"reallocate_gpu_memory_in_mb", reallocate_gpu_memory_in_mb},
          std::pair{"auto_growth_chunk_size_in_mb", auto_growth_chunk_size_in_mb}}) {
      if (value > gpu_memory_limit_mb) {
        problems.push_back({{name, "gpu_memory_limit_mb"},
                            absl::StrCat(name, "=", value, " exceeds gpu_memory_limit_mb=",
                                         gpu_memory_limit_mb, ": must be <= the limit")});
      }
    }
  }
  return problems;
}

void AllocatorFlags::Validate() const {
  std::vector<Problem> problems = Problems();
  if (problems.empty()) return;
  throw std::invalid_argument(absl::StrCat(
      "invalid allocator flags: ",
      absl::StrJoin(problems, "; ",
                    [](std::string* out, const Problem& p) { out->append(p.message); })));
}

std::string AllocatorFlags::DebugString() const {
  std::vector<std::string> parts;
  auto add = [&](const char* name, const auto& value) {
    parts.push_back(absl::StrCat(name, "=", absl::UnparseFlag(value)));
  };
#define STRATA_PRINT_ALLOCATOR_FLAG(type, name, default_value, help) add(#name, name);
  STRATA_ALLOCATOR_FLAGS(STRATA_PRINT_ALLOCATOR_FLAG)
#undef STRATA_PRINT_ALLOCATOR_FLAG
  return absl::StrJoin(parts, " ");
}

AllocatorFlags AllocatorFlags::ReadLive() {
  return ReadAll([](const auto& flag) { return absl::GetFlag(flag); });
}

}  // namespace strata::flags
