// A kernel that keeps the GPU busy for a while, for benchmarks that time host calls made while
// device work runs (tools/bench_device_calls.h). Built only with CUDA.
//
// LaunchBusyKernel enqueues on `cuda_stream` (a cudaStream_t; Stream::handle) one block that spins
// for `spin_ns` on the GPU's global timer. Throws std::runtime_error if the launch fails.
#pragma once

#if STRATA_WITH_CUDA

namespace strata::tools {

void LaunchBusyKernel(long long spin_ns, void* cuda_stream);

}  // namespace strata::tools

#endif  // STRATA_WITH_CUDA
