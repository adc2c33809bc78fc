// A real GPU kernel for tests that need slow device work on a stream (not a host callback):
// LaunchSpinWriteKernel enqueues on `cuda_stream` (a cudaStream_t, e.g. Stream::handle; null is
// the default stream of the current device) a kernel that spins for at least `spin_ns` on the
// GPU's global timer, then writes `value` into every byte of dst[0, bytes). Throws
// std::runtime_error if the launch fails. Only built when strata is built with CUDA.
#pragma once

#include <cstddef>

#if STRATA_WITH_CUDA

namespace strata::testing {

void LaunchSpinWriteKernel(void* dst, std::size_t bytes, unsigned char value, long long spin_ns,
                           void* cuda_stream);

}  // namespace strata::testing

#endif  // STRATA_WITH_CUDA
