/* strata C ABI: libstrata_c.so, for frameworks that load an allocator by symbol name (PyTorch's
 * CUDAPluggableAllocator, CuPy through ctypes, any C program).
 *
 *   import torch
 *   alloc = torch.cuda.memory.CUDAPluggableAllocator("libstrata_c.so", "strata_malloc",
 *                                                    "strata_free")
 *   torch.cuda.memory.change_current_allocator(alloc)   # before any CUDA allocation
 *
 * Contract
 * - Plain C (C99 and C++), no C++ type crosses the ABI and no C++ exception ever escapes: every
 *   failure returns an error code (< 0) or NULL and sets the calling thread's message, read with
 *   strata_last_error(). Successful calls leave that message alone.
 * - Thread-safe: every function may be called from any thread concurrently. A pointer may be
 *   freed on another thread than the one that allocated it.
 * - The library owns one allocator instance (an AllocatorFacade, see facade/allocator_facade.h)
 *   over the CUDA runtime, or over the emulated runtime when STRATA_C_DEVICE=emulated or
 *   strata_use_emulated_device() was called (CPU-only tests). It is built at first use from the
 *   flags: defaults < FLAGS_<name> environment variables < STRATA_ALLOC_CONF < strata_set_flags.
 * - Streams: a `stream` argument is a cudaStream_t (NULL = the legacy default stream of the
 *   current device; the caller must then have `device` current, as PyTorch does). Memory
 *   allocated on stream s comes from s's pool and returns to s's pool when freed, whatever
 *   stream strata_free is given; use it on another stream only after strata_record_stream
 *   (docs/INTEGRATION.md).
 * - Global state is never destroyed: frees arriving during process exit (after static
 *   destructors ran) stay safe.
 * - Do not load libstrata_c.so into a process that also links the static strata library: both
 *   would register the same Abseil flags.
 */
#ifndef STRATA_C_API_H_
#define STRATA_C_API_H_

#include <stddef.h>    /* NOLINT(modernize-deprecated-headers): a C header */
#include <stdint.h>    /* NOLINT(modernize-deprecated-headers) */
#include <sys/types.h> /* ssize_t */

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define STRATA_C_EXPORT __attribute__((visibility("default")))
#else
#define STRATA_C_EXPORT
#endif

/* Error codes (every failure also sets strata_last_error()). */
#define STRATA_OK 0
#define STRATA_ERROR_INVALID_ARGUMENT (-1) /* bad size, device, flag, buffer, ... */
#define STRATA_ERROR_OUT_OF_MEMORY (-2)    /* the device (or gpu_memory_limit_mb) is exhausted */
#define STRATA_ERROR_UNKNOWN_POINTER (-3)  /* not from strata_malloc, or already freed */
#define STRATA_ERROR_BUSY (-4)     /* reconfiguration while allocations are live (see below) */
#define STRATA_ERROR_RUNTIME (-5)  /* the device runtime (CUDA) failed */
#define STRATA_ERROR_INTERNAL (-6) /* anything else; the message says what */

/* ---- allocation: PyTorch CUDAPluggableAllocator signatures -------------------------------- */

/* `size` bytes on CUDA device `device`, from the pool of `stream` (a cudaStream_t). Returns NULL
 * for size 0 (not an error: there is nothing to free) and on failure (out of memory, bad device:
 * strata_last_error() says which; the message is also logged at ERROR, since PyTorch's
 * pluggable path does not check for NULL). */
STRATA_C_EXPORT void* strata_malloc(ssize_t size, int device, void* stream);

/* Frees `ptr` from strata_malloc. `size`, `device` and `stream` are informational (strata knows
 * the allocation's own stream and device and returns the block to that stream's pool); NULL is
 * a no-op. An unknown pointer (never allocated here, or freed twice) is reported (logged at
 * ERROR and in strata_last_error()) and otherwise ignored: it never crashes. */
STRATA_C_EXPORT void strata_free(void* ptr, ssize_t size, int device, void* stream);

/* For C++ hosts only (PyTorch's CUDAPluggableAllocator): strata_malloc, but a failure other than
 * size 0 throws std::runtime_error carrying strata_last_error() instead of returning NULL.
 * PyTorch does not check the pointer its allocate function returns: a NULL would become a
 * tensor without memory, while the exception surfaces in Python as a RuntimeError with
 * strata's out-of-memory message. strata.torch.enable() installs this one. */
STRATA_C_EXPORT void* strata_malloc_or_throw(ssize_t size, int device, void* stream);

/* strata_free with a result: STRATA_OK, or STRATA_ERROR_UNKNOWN_POINTER. */
STRATA_C_EXPORT int strata_free_checked(void* ptr);

/* ---- streams -------------------------------------------------------------------------------- */

/* Marks `ptr` (exactly as returned by strata_malloc) as used on `stream`: when freed, its memory
 * is reused only after the work enqueued on `stream` up to the free has completed (an event,
 * never a device synchronization). Returns 1 when recorded (recording a stream twice is
 * harmless), 0 when there is nothing to record (`stream` is the allocation's own stream, or
 * use_system_allocator, whose cudaFree waits), or an error code: STRATA_ERROR_UNKNOWN_POINTER,
 * or STRATA_ERROR_INVALID_ARGUMENT when the chain has no stream-safe layer to honour it
 * (use_stream_safe_cuda_allocator off, or a strategy other than auto_growth): the block could
 * otherwise be reused while `stream` still uses it. `stream` must outlive the free. */
STRATA_C_EXPORT int strata_record_stream(void* ptr, void* stream);

/* Call before destroying `stream` (cudaStreamDestroy) on GPU `device`, if strata allocated on it.
 * strata keeps freed memory per stream handle, and CUDA may give the handle to a stream created
 * later: without this call, that stream could reuse memory the destroyed stream's pending work
 * still uses, and strata could enqueue on the dead handle. Records an event on `stream`; the
 * handle's next allocation makes its stream wait for that event on the device (no host wait).
 * Memory cached for the handle stays (strata_empty_cache gives it back). Returns STRATA_OK (also
 * for a stream strata never allocated on) or STRATA_ERROR_INVALID_ARGUMENT: the NULL stream, a
 * bad device, a stream under graph capture, or a stream strata allocated on that is already
 * destroyed. */
STRATA_C_EXPORT int strata_end_stream(int device, void* stream);

/* ---- cache and statistics ------------------------------------------------------------------- */

/* Returns the device's cached, unused memory to the device (every stream's pool, after
 * reclaiming completed cross-stream frees): torch.cuda.empty_cache(). STRATA_OK or an error. */
STRATA_C_EXPORT int strata_empty_cache(int device);

/* Caps what strata may hold on `device` at `fraction` (0 to 1) of the device's memory, or at
 * gpu_memory_limit_mb where that is lower: torch.cuda.set_per_process_memory_fraction (the
 * argument order of PyTorch's set_memory_fraction_fn, so its address can be passed there).
 * Memory above a lowered cap stays until freed; requests past it fail as out of memory after
 * the cache is released. STRATA_OK, or STRATA_ERROR_INVALID_ARGUMENT (a fraction outside
 * [0, 1], a bad device; logged at ERROR too, since PyTorch ignores the result). */
STRATA_C_EXPORT int strata_set_memory_fraction(double fraction, int device);

/* Writes the device's statistics as one JSON object with torch.cuda.memory_stats() keys
 * ("allocated_bytes.all.current", "reserved_bytes.all.peak", ...), NUL-terminated, truncated to
 * len - 1 characters. Returns the full length (without the NUL) as snprintf does: a result >=
 * len means the buffer was too small. buf may be NULL when len is 0. < 0 on error. */
STRATA_C_EXPORT int strata_memory_stats_json(int device, char* buf, size_t len);

/* The figures named by keys[0..count) (the keys of strata_memory_stats_json) into
 * values[0..count), from one reading of the device's statistics: no JSON to parse, for callers in
 * C or C++. All or nothing: an unknown or NULL key is STRATA_ERROR_INVALID_ARGUMENT naming it,
 * and no value is written. count 0 does nothing (keys and values may then be NULL). */
STRATA_C_EXPORT int strata_memory_stats_values(int device, const char* const* keys, int64_t* values,
                                               size_t count);

/* The torch.cuda.memory_summary() table of the device; same buffer rules. */
STRATA_C_EXPORT int strata_memory_summary(int device, char* buf, size_t len);

/* Resets the "peak" figures of the device's statistics to their current values. */
STRATA_C_EXPORT int strata_reset_peak_stats(int device);

/* Resets the accumulated figures ("allocated" and "freed" counts, num_alloc_retries, num_ooms,
 * ...) of the device's statistics to 0: torch.cuda.reset_accumulated_memory_stats. */
STRATA_C_EXPORT int strata_reset_accumulated_stats(int device);

/* Allocations made by strata_malloc and not yet freed (all devices). */
STRATA_C_EXPORT int64_t strata_live_allocations(void);

/* ---- memory history, snapshots, out-of-memory observers (docs/HISTORY.md) ------------------- */
/* They belong to the current allocator: a reconfiguration (strata_set_flags,
 * strata_use_emulated_device) ends a recording and drops the observers. */

/* A context for each allocation while recording (a stack, a layer name): writes up to len - 1
 * characters and a NUL into buf and returns the full length, as snprintf does (strata calls
 * again with a larger buffer when the result is >= len; contexts are cut at 1 MiB). Runs on the
 * allocating thread; it must not allocate from strata. */
typedef size_t (*strata_context_fn)(char* buf, size_t len, void* user_data);

/* Starts recording the device's memory history: allocations, frees, deferred frees, device
 * calls, OOMs, empty-caches, the newest `max_entries` of them (0: 131,072), each with its
 * size, stream, time and thread, and with `context`'s text when it is not NULL. Restarts a
 * recording underway. STRATA_OK or an error. A thread inside an allocation when the recording
 * is restarted or stopped may still call the earlier `context`: keep its `user_data` valid until
 * such threads have returned from strata (or for the process's life). */
STRATA_C_EXPORT int strata_record_history(int device, size_t max_entries, strata_context_fn context,
                                          void* user_data);

/* Stops the recording and writes it to `path` (a trace that strata-replay and strata-viz read;
 * gzip-compressed when the name ends in ".gz"), through a new temporary file beside it renamed
 * over it (a symbolic link's target gets it; a device, FIFO or directory is refused).
 * STRATA_ERROR_INVALID_ARGUMENT when the device is not recording or `path` is NULL;
 * STRATA_ERROR_INTERNAL, the message naming the path, when the file cannot be written: the
 * recording goes on when the file could not even be created, and is lost when writing failed
 * after it stopped. */
STRATA_C_EXPORT int strata_stop_history(int device, const char* path);

/* Every segment and block of the device with its statistics, as one JSON object (same buffer
 * rules as strata_memory_stats_json). */
STRATA_C_EXPORT int strata_snapshot(int device, char* buf, size_t len);

/* Called once for each out-of-memory failure about to be returned by strata_malloc (after
 * strata's own recovery and retries), on the allocating thread: the device, the request, the
 * statistics JSON and, when asked for, the snapshot JSON (else NULL); both strings are valid
 * during the call only. It must not allocate from strata on that device. */
typedef void (*strata_oom_fn)(int device, size_t requested, const char* stats_json,
                              const char* snapshot_json, void* user_data);

/* Registers an observer; returns its id (> 0) for strata_remove_oom_observer, or an error. */
STRATA_C_EXPORT int strata_add_oom_observer(strata_oom_fn observer, void* user_data,
                                            int with_snapshot);
/* STRATA_OK, or STRATA_ERROR_INVALID_ARGUMENT for an unknown id. It does not wait for calls
 * under way: a thread whose out-of-memory failure began before it returned may still call the
 * observer, so keep `user_data` valid until such threads have returned from strata (or for the
 * process's life). Ids are never reused. */
STRATA_C_EXPORT int strata_remove_oom_observer(int id);

/* ---- configuration -------------------------------------------------------------------------- */

/* Applies "key:value,key:value" (STRATA_ALLOC_CONF syntax, keys are the flag names, see
 * docs/INTEGRATION.md), over the environment's values. All or nothing: on error no flag changes
 * and the message names the key and what is allowed (STRATA_ERROR_INVALID_ARGUMENT).
 * Takes effect at once: before the first allocation, the allocator is then built with these
 * flags; afterwards the allocator is rebuilt with them, which is allowed only while no
 * allocation is live (otherwise STRATA_ERROR_BUSY, and no flag changes). A rebuild returns the
 * old instance's cached memory to the device and starts fresh statistics. */
STRATA_C_EXPORT int strata_set_flags(const char* config);

/* The message of the last failure on the calling thread ("" if none). Valid until the next
 * failing call on this thread. */
STRATA_C_EXPORT const char* strata_last_error(void);

/* ---- emulated device (tests without a GPU) -------------------------------------------------- */

/* Serves CUDA places from strata's emulated runtime (platform/emulated_runtime.h: device memory
 * is host memory, streams are worker threads) with `device_count` devices of `capacity_bytes`
 * each; device_count 0 goes back to the CUDA runtime. Same rules as strata_set_flags: allowed
 * while no allocation is live (STRATA_ERROR_BUSY otherwise); the allocator is rebuilt. The
 * environment variable STRATA_C_DEVICE=emulated does the same at first use
 * (STRATA_C_EMULATED_DEVICES, default 1; STRATA_C_EMULATED_CAPACITY_MB, default 16384). */
STRATA_C_EXPORT int strata_use_emulated_device(int device_count, size_t capacity_bytes);

/* Emulated streams, for tests of strata_record_stream (STRATA_ERROR_INVALID_ARGUMENT when the
 * emulated device is not in use). pause enqueues a task that blocks the stream until resume;
 * resume unblocks it and waits until the stream is idle. */
STRATA_C_EXPORT int strata_emulated_stream_create(int device, void** stream);
STRATA_C_EXPORT int strata_emulated_stream_destroy(void* stream);
STRATA_C_EXPORT int strata_emulated_stream_pause(void* stream);
STRATA_C_EXPORT int strata_emulated_stream_resume(void* stream);

#ifdef __cplusplus
} /* extern "C" */

/* ---- CUDA graph pools: PyTorch's CUDAPluggableAllocator hooks (C++ only) ---------------------
 * These have exactly the C++ types of the hooks PyTorch 2.3+ calls (set_begin_allocate_to_pool,
 * set_end_allocate_to_pool_fn, set_release_pool take their addresses): a pool id is
 * c10::cuda::MempoolId_t (a pair of unsigned long long), the filter a std::function over
 * cudaStream_t. From begin until end, allocations on `device` whose stream passes `filter` (the
 * capturing stream) come from the private pool `pool`, which stays the graph's until release
 * drops its last user (facade/graph_pools.h). Failures (a bad device, an end or release without a
 * begin) are logged at ERROR and left in strata_last_error(); PyTorch ignores the result. */
#include <functional>
#include <utility>

struct CUstream_st;
using strata_pool_id =
    std::pair<unsigned long long, unsigned long long>;  // NOLINT(google-runtime-int)

extern "C" {
STRATA_C_EXPORT void strata_begin_allocate_to_pool(int device, strata_pool_id pool,
                                                   std::function<bool(CUstream_st*)> filter);
STRATA_C_EXPORT void strata_end_allocate_to_pool(int device, strata_pool_id pool);
STRATA_C_EXPORT void strata_release_pool(int device, strata_pool_id pool);
}
#endif

#endif /* STRATA_C_API_H_ */
