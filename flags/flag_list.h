// STRATA_ALLOCATOR_FLAGS: the one list of the allocator's flags. Everything per flag is generated
// from it: the Abseil flag (flags.cc) and its declaration and name in kFlagNames (flags.h), the
// AllocatorFlags field of the same name and type, its default, reading and printing
// (allocator_flags.h/.cc), and so the FLAGS_<name> and STRATA_ALLOC_CONF keys (flag_sources.h).
// Adding a flag is one X(...) line here; constraints on its value, if any, go into
// AllocatorFlags::Problems() (allocator_flags.cc).
//
//   X(type, name, default, help)
//
// - type: bool, std::int64_t, std::uint64_t, double, or a type with AbslParseFlag /
//   AbslUnparseFlag (AllocatorStrategy, RoundupPower2Divisions), fully qualified since the
//   flags are defined at global scope; it is also the AllocatorFlags field's type.
// - name: the flag's name, also the FLAGS_<name> environment variable's suffix and the
//   STRATA_ALLOC_CONF key. Paddle's names first, then PyTorch's PYTORCH_CUDA_ALLOC_CONF options
//   (max_split_size_mb, roundup_power2_divisions, garbage_collection_threshold).
// - default: an expression of that type (parenthesize one with a top-level comma). Sizes are
//   in MB.
// - help: what the flag does, its unit, what 0 means, and which strategy reads it
//   (`--helpfull` shows it).
//
// Order matters only for messages: kFlagNames, SupportedFlagList() and DebugString() follow it.
//
// Contract: only macros and the headers of the flag types; nothing here has state or throws.
#pragma once

#include <cstdint>

#include "flags/allocator_strategy.h"
#include "flags/roundup_power2_divisions.h"

#define STRATA_ALLOCATOR_FLAGS(X)                                                            \
  X(::strata::flags::AllocatorStrategy, allocator_strategy,                                  \
    ::strata::flags::AllocatorStrategy::kAutoGrowth,                                         \
    "Pooling strategy for GPU and pinned memory: naive_best_fit (a best-fit/buddy pool "     \
    "carved from big chunks sized by fraction_of_gpu_memory_to_use or "                      \
    "initial_gpu_memory_in_mb, grown by reallocate_gpu_memory_in_mb), auto_growth (a "       \
    "best-fit pool that asks the device for more only when it has to, in chunks of at "      \
    "least auto_growth_chunk_size_in_mb) or thread_local (one pool per thread, no "          \
    "locking).")                                                                             \
  X(bool, use_system_allocator, false,                                                       \
    "Bypass all pooling: every allocation goes straight to the device/host allocator. "      \
    "Slow; meant for tests and for finding memory bugs with external tools.")                \
  X(bool, use_stream_safe_cuda_allocator, true,                                              \
    "Wrap GPU pools in the stream-safe layer: memory freed while other streams may still "   \
    "use it is reused only once those streams' recorded events completed. auto_growth "      \
    "only: with naive_best_fit or thread_local (or this flag off) RecordStream is refused "  \
    "with an error, since nothing would keep the block from reuse.")                         \
  X(std::int64_t, gpu_allocator_retry_time, 10000,                                           \
    "Milliseconds a failed GPU allocation keeps waiting for other threads to free memory "   \
    "and retrying before out-of-memory is raised, at most 3600000. <= 0: no retry layer.")   \
  X(double, fraction_of_gpu_memory_to_use, 0.92,                                             \
    "naive_best_fit: size of each GPU chunk as this fraction of the device's memory "        \
    "available at start, in (0, 1]. Ignored when initial_gpu_memory_in_mb is set.")          \
  X(std::uint64_t, initial_gpu_memory_in_mb, 0,                                              \
    "naive_best_fit: size in MB of the first GPU chunk; 0 = use "                            \
    "fraction_of_gpu_memory_to_use instead.")                                                \
  X(std::uint64_t, reallocate_gpu_memory_in_mb, 0,                                           \
    "naive_best_fit: size in MB of each further GPU chunk once the first is full; 0 = same " \
    "rule as the first chunk.")                                                              \
  X(std::uint64_t, gpu_memory_limit_mb, 0,                                                   \
    "Upper bound in MB on the GPU memory this process reserves per device; beyond it "       \
    "allocations fail with out-of-memory even if the device has more. 0 = no limit.")        \
  X(std::uint64_t, auto_growth_chunk_size_in_mb, 0,                                          \
    "auto_growth: minimum size in MB of each request to the device; 0 = strata's default "   \
    "(20 MB: PyTorch's large-buffer size, measured best on real traces).")                   \
  X(bool, use_virtual_memory_auto_growth, true,                                              \
    "auto_growth: one pool per device on virtual memory, shared by every stream (physical "  \
    "pages mapped on demand and remapped where needed); the default, as it reserved the "    \
    "least of every allocator measured end to end (docs/BENCHMARKS.md). false: the chunk "   \
    "pool (one auto_growth pool per stream). STRATA_ALLOC_CONF also accepts PyTorch's "      \
    "expandable_segments:True/False. Devices without virtual memory management get the "     \
    "chunk pool.")                                                                           \
  X(std::uint64_t, virtual_memory_extent_mb, 32,                                             \
    "use_virtual_memory_auto_growth: until a block of a page (2 MB on H100) or more is "     \
    "first freed (a model's set-up), and for a block that raises the peak of live pages "    \
    "after it held for a while (a new largest input; not within an eighth of the memory "    \
    "limit or device), growth maps up to this many MB of one block as one physical "         \
    "allocation (an extent: one create, map and set-access for many pages; it serves its "   \
    "address range only). Never under a memory cap (gpu_memory_limit_mb, a memory "          \
    "fraction). 0, or less than a page: one physical allocation per page.")                  \
  X(std::uint64_t, virtual_memory_page_mb, 0,                                                \
    "use_virtual_memory_auto_growth: the physical page in MB, a power of two (a multiple "   \
    "of the device's granularity, 2 MB on H100). 0 = the granularity. The device charges "   \
    "each physical allocation tens of microseconds whatever its size: larger pages make a "  \
    "cold start cheaper in proportion and reserve more (docs/BENCHMARKS.md).")               \
  X(std::uint64_t, virtual_memory_stitch_slack_permille, 31,                                 \
    "use_virtual_memory_auto_growth: how far, in thousandths, physical memory may exceed "   \
    "the most pages live blocks touched at once (plus two pages) before idle pages are "     \
    "remapped rather than more created. The pool raises it, a step at a time up to 350, "    \
    "while it keeps remapping at a steady peak. Lower: less memory, more remapping (tens "   \
    "of microseconds a page on a GPU) until it settles. At most 1000.")                      \
  X(std::uint64_t, thread_cache_mb, 16,                                                      \
    "auto_growth with the stream-safe layer: MB each thread may keep, per stream, of the "   \
    "blocks of up to 1 MB it freed, for its next allocations of their sizes (a bounded "     \
    "front cache that needs no lock shared with other threads; over the vmm pool a larger "  \
    "block stays until the next call on its stream, from any thread). 0 = no thread cache.") \
  X(bool, thread_cache_asymmetric_fence, true,                                               \
    "thread_cache_mb: a thread takes a block back from its cache without an atomic "         \
    "read-modify-write; a thread flushing other threads' caches (Release, a miss that "      \
    "would grow the pool) then pays a membarrier system call, which briefly interrupts "     \
    "every running thread of the process. false: every take is an atomic exchange. "         \
    "Ignored where the kernel lacks membarrier.")                                            \
  X(bool, free_idle_chunk, false,                                                            \
    "auto_growth: return a chunk to the device as soon as it becomes entirely free, "        \
    "instead of caching it for later allocations.")                                          \
  X(bool, free_when_no_cache_hit, false,                                                     \
    "auto_growth: when no cached block fits a request, first return idle chunks to the "     \
    "device; when false, idle chunks are returned only after an out-of-memory.")             \
  X(double, fraction_of_cpu_memory_to_use, 1.0,                                              \
    "Fraction of physical host memory the CPU pool may hold at most (a cap, not a refill "   \
    "size), in (0, 1].")                                                                     \
  X(std::uint64_t, initial_cpu_memory_in_mb, 500,                                            \
    "Size in MB of each refill of the CPU pool (at most 1/32 of its cap, "                   \
    "fraction_of_cpu_memory_to_use).")                                                       \
  X(double, fraction_of_cuda_pinned_memory_to_use, 0.5,                                      \
    "Fraction of physical host memory the pinned (page-locked) pool may hold at most (a "    \
    "cap), in (0, 1]; it refills by 1/256 of that.")                                         \
  X(bool, init_allocated_mem, false,                                                         \
    "Fill every new allocation with a non-zero byte pattern, to expose code that wrongly "   \
    "expects fresh memory to be zeroed. Debugging only: costs a memset per allocation.")     \
  X(std::uint64_t, max_split_size_mb, 0,                                                     \
    "PyTorch option: cached blocks larger than this many MB are never split for a smaller "  \
    "request, which limits fragmentation of big blocks. 0 = unlimited; when set it must "    \
    "be > 20 (as in PyTorch).")                                                              \
  X(::strata::flags::RoundupPower2Divisions, roundup_power2_divisions,                       \
    ::strata::flags::RoundupPower2Divisions(),                                               \
    "PyTorch option: round allocation sizes up to one of N steps per power-of-two "          \
    "interval, so freed blocks fit later requests better. Either one N for all sizes or a "  \
    "list mapping size in MB (a power of two: that size up to twice it; the first key "      \
    "also covers smaller sizes) to N, with '>' for all sizes above the last key, e.g. "      \
    "[256:1,512:2,>:8]. N is 0 (no rounding) or a power of two. Default 0.")                 \
  X(double, garbage_collection_threshold, 0.0,                                               \
    "PyTorch option: when the pool's reserved memory exceeds this fraction of the memory "   \
    "it may use, free cached blocks not recently reused, before an allocation would fail. "  \
    "0 = off; otherwise strictly between 0 and 1.")
