#include "tools/cuda_malloc_async_peer.h"

#include <limits>
#include <stdexcept>

#include "absl/strings/str_cat.h"

#ifdef STRATA_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace strata::tools {

#ifdef STRATA_WITH_CUDA

namespace {

void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) [[unlikely]] {
    cudaGetLastError();  // clear it, so later calls do not see a sticky error
    throw std::runtime_error(absl::StrCat("cuda_malloc_async peer: ", what, " failed: ",
                                          cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
  }
}

cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }

}  // namespace

bool CUDAMallocAsyncPeer::Available(std::string* why) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    if (why != nullptr) *why = "no CUDA device";
    return false;
  }
  int pools = 0;
  if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, 0) != cudaSuccess ||
      pools == 0) {
    cudaGetLastError();
    if (why != nullptr) *why = "device 0 does not support memory pools";
    return false;
  }
  return true;
}

CUDAMallocAsyncPeer::CUDAMallocAsyncPeer(int device) : device_(device) {
  std::string why;
  if (!Available(&why)) throw std::runtime_error("cuda_malloc_async peer: " + why);
  Check(cudaSetDevice(device_), "cudaSetDevice");
  cudaMemPool_t pool = nullptr;
  Check(cudaDeviceGetDefaultMemPool(&pool, device_), "cudaDeviceGetDefaultMemPool");
  std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
  Check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
        "cudaMemPoolSetAttribute(ReleaseThreshold)");
  pool_ = pool;
  cudaEvent_t event = nullptr;
  Check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  event_ = event;
}

CUDAMallocAsyncPeer::~CUDAMallocAsyncPeer() {
  try {
    Release();
  } catch (const std::exception&) {
    // Teardown of a benchmark peer: nothing useful to do with the error.
  }
  cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

void* CUDAMallocAsyncPeer::Alloc(std::size_t bytes, void* stream) {
  void* p = nullptr;
  Check(cudaMallocAsync(&p, bytes, S(stream)), "cudaMallocAsync");
  return p;
}

void CUDAMallocAsyncPeer::Free(void* ptr, void* stream) {
  Check(cudaFreeAsync(ptr, S(stream)), "cudaFreeAsync");
}

void CUDAMallocAsyncPeer::FreeUsedOn(void* ptr, void* owner, void* used_on) {
  auto event = static_cast<cudaEvent_t>(event_);
  Check(cudaEventRecord(event, S(used_on)), "cudaEventRecord");
  Check(cudaStreamWaitEvent(S(owner), event, 0), "cudaStreamWaitEvent");
  Check(cudaFreeAsync(ptr, S(owner)), "cudaFreeAsync");
}

void CUDAMallocAsyncPeer::Release() {
  Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  Check(cudaMemPoolTrimTo(static_cast<cudaMemPool_t>(pool_), 0), "cudaMemPoolTrimTo");
}

void CUDAMallocAsyncPeer::ResetPeak() {
  std::uint64_t zero = 0;
  Check(cudaMemPoolSetAttribute(static_cast<cudaMemPool_t>(pool_), cudaMemPoolAttrReservedMemHigh,
                                &zero),
        "cudaMemPoolSetAttribute(ReservedMemHigh)");
}

std::uint64_t CUDAMallocAsyncPeer::PeakReserved() {
  std::uint64_t v = 0;
  Check(cudaMemPoolGetAttribute(static_cast<cudaMemPool_t>(pool_), cudaMemPoolAttrReservedMemHigh,
                                &v),
        "cudaMemPoolGetAttribute(ReservedMemHigh)");
  return v;
}

#else  // !STRATA_WITH_CUDA

namespace {
[[noreturn]] void NoCuda() {
  throw std::runtime_error("cuda_malloc_async peer: strata was built without CUDA");
}
}  // namespace

bool CUDAMallocAsyncPeer::Available(std::string* why) {
  if (why != nullptr) *why = "strata was built without CUDA";
  return false;
}
CUDAMallocAsyncPeer::CUDAMallocAsyncPeer(int device) : device_(device) { NoCuda(); }
CUDAMallocAsyncPeer::~CUDAMallocAsyncPeer() = default;
void* CUDAMallocAsyncPeer::Alloc(std::size_t, void*) { NoCuda(); }
void CUDAMallocAsyncPeer::Free(void*, void*) { NoCuda(); }
void CUDAMallocAsyncPeer::FreeUsedOn(void*, void*, void*) { NoCuda(); }
void CUDAMallocAsyncPeer::Release() { NoCuda(); }
void CUDAMallocAsyncPeer::ResetPeak() { NoCuda(); }
std::uint64_t CUDAMallocAsyncPeer::PeakReserved() { NoCuda(); }

#endif  // STRATA_WITH_CUDA

}  // namespace strata::tools
