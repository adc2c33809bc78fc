// CUDAMallocAsyncPeer: CUDA's stream-ordered allocator (cudaMallocAsync / cudaFreeAsync on the
// default memory pool of one device), the in-process peer strata-bench compares against.
//
// Contract
// - The constructor sets the pool's cudaMemPoolAttrReleaseThreshold to UINT64_MAX, so the pool
//   keeps freed memory cached (otherwise every stream synchronization would return it to the
//   device and the comparison would measure cudaMalloc). The destructor trims the pool to 0.
// - Available() is false (with the reason) when strata was built without CUDA or the device has
//   no memory pools; the constructor then throws std::runtime_error.
// - Alloc throws std::runtime_error with the CUDA error (out of memory included); Free and
//   FreeUsedOn report failures by throwing as well (a failed free is a bug in the benchmark).
// - Thread safety: Alloc / Free from any thread (the CUDA runtime is thread-safe). FreeUsedOn
//   reuses one event and must not run concurrently with itself. Release / ResetPeak /
//   PeakReserved must not run concurrently with allocations.
// Streams are cudaStream_t handles passed as void* (nullptr: the legacy default stream).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace strata::tools {

class CUDAMallocAsyncPeer {
 public:
  static bool Available(std::string* why = nullptr);

  explicit CUDAMallocAsyncPeer(int device = 0);
  ~CUDAMallocAsyncPeer();
  CUDAMallocAsyncPeer(const CUDAMallocAsyncPeer&) = delete;
  CUDAMallocAsyncPeer& operator=(const CUDAMallocAsyncPeer&) = delete;

  void* Alloc(std::size_t bytes, void* stream);
  void Free(void* ptr, void* stream);
  // Frees `ptr`, owned by `owner`, after the work enqueued on `used_on` so far (one event
  // recorded on used_on, waited for by owner, then cudaFreeAsync on owner): what a
  // stream-ordered program does in place of record_stream.
  void FreeUsedOn(void* ptr, void* owner, void* used_on);
  // Synchronizes the device, then returns all the pool's unused memory to the device.
  void Release();
  void ResetPeak();
  // cudaMemPoolAttrReservedMemHigh: the pool's peak reservation since ResetPeak.
  std::uint64_t PeakReserved();

 private:
  int device_;
  void* pool_ = nullptr;   // cudaMemPool_t
  void* event_ = nullptr;  // cudaEvent_t
};

}  // namespace strata::tools
