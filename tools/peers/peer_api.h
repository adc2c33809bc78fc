// The plain C interface of a benchmark peer: another project's allocator (PyTorch's caching
// allocator, ...) built as a tiny shared library that strata-bench dlopen()s (--torch_peer=PATH),
// so the peer's own dependencies (PyTorch headers, libc10_cuda) never meet strata's build.
//
// Contract
// - Required symbols: peer_init, peer_name, peer_alloc, peer_free. The others are optional: the
//   loader (tools/peer_library.h) checks for each one with dlsym and skips what needs a missing
//   one.
// - peer_init() is called once, first: 0 on success, else non-zero and peer_last_error() says why.
// - Nothing throws across this boundary: peer_alloc returns nullptr on any failure (out of memory
//   included) and peer_last_error() says why; the other calls swallow errors (peer_free never
//   fails visibly) or report them through their return value.
// - Streams are cudaStream_t passed as void*; nullptr is the legacy default stream of device 0.
// - Thread safety: peer_alloc / peer_free / peer_record_stream may be called from any thread
//   concurrently when the peer's allocator allows it (PyTorch's does); peer_last_error is
//   per thread.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Required.
int peer_init(void);
const char* peer_name(void);
void* peer_alloc(size_t bytes, void* stream);
void peer_free(void* ptr);

// Optional.
const char* peer_last_error(void);
// `ptr` will be used on `stream` too: its memory is reused only after the work enqueued there up
// to the free completes (PyTorch's record_stream). 0 on success.
int peer_record_stream(void* ptr, void* stream);
// Returns every cached, unused block to the device (torch.cuda.empty_cache()).
void peer_release(void);
void peer_reset_peak(void);
// Peak bytes held from the device since the last peer_reset_peak (0 when unknown).
uint64_t peer_peak_reserved(void);

#ifdef __cplusplus
}
#endif
