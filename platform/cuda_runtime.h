// CUDARuntime: the DeviceRuntime of a real GPU, a thin wrapper of the CUDA runtime API.
//
// Contract
// - Thread safety: every method may be called from any thread concurrently (the CUDA runtime
//   is thread-safe; the only state kept here is the atomic sync counter).
// - Devices: methods taking `device` make it current for the call only when it is not current
//   already, and restore the caller's device afterwards, so callers never see their current
//   device change. Stream and event operations run in the context of the stream/event handle;
//   the default Stream{} is the legacy default stream of the calling thread's current device.
// - Streams are created with cudaStreamNonBlocking: like the emulated runtime, they never
//   synchronize implicitly with the default stream, so a missing event wait is a real bug in
//   tests, not something the legacy default stream hides. Events use cudaEventDisableTiming.
// - Malloc/HostMalloc return nullptr on cudaErrorMemoryAllocation (the error is cleared) and for
//   size 0. Every other CUDA error throws RuntimeError naming the call that failed plus the CUDA
//   error name and text, e.g. "strata cuda runtime: cudaFree(0x1234) on device 0 failed:
//   cudaErrorInvalidValue: invalid argument".
// - QueryEvent/QueryStream map cudaErrorNotReady to false (and clear it).
// - LaunchHostTask runs the task on a CUDA runtime thread in stream order; the task must not call
//   CUDA. An exception escaping the task is logged (it cannot propagate) and swallowed.
// - SyncCount counts every call made through this object that makes the host wait for the
//   device: SynchronizeStream/Event/Device, and Free of a non-null pointer (cudaFree synchronizes
//   the device implicitly).
// - Virtual memory uses the CUDA driver API (cuMemAddressReserve, cuMemCreate, cuMemMap,
//   cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree) on pinned device memory, with
//   VmmGranularity = cuMemGetAllocationGranularity(CU_MEM_ALLOC_GRANULARITY_MINIMUM) (2 MiB on
//   H100), or 0 without CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED. The driver's
//   entry points are looked up at first use through the runtime
//   (cudaGetDriverEntryPointByVersion), so strata does not link libcuda and still loads on a
//   machine without a driver. Driver calls run in the device's primary context (the one the
//   runtime API uses), pushed for the call and popped after it; calls without a device argument
//   (FreeAddress, ReleasePhysical, Unmap) use the calling thread's current device's. Sizes,
//   offsets and addresses that are not multiples of the granularity are rejected before the
//   driver is called; the driver reports the rest. Driver errors throw RuntimeError naming the
//   call plus the CUresult name and text; cuMemCreate's CUDA_ERROR_OUT_OF_MEMORY returns an
//   empty handle instead. Map gives read/write access to `device` only; if cuMemSetAccess fails
//   the range is unmapped again before the error is thrown.
// - Without a usable GPU, constructing the object and Instance() are safe; Available() returns
//   false with the reason and every CUDA method throws RuntimeError. When strata is built without
//   CUDA (STRATA_WITH_CUDA undefined), every method throws "strata was built without CUDA".
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "platform/device_runtime.h"

namespace strata::platform {

class CUDARuntime : public DeviceRuntime {
 public:
  CUDARuntime() = default;
  CUDARuntime(const CUDARuntime&) = delete;
  CUDARuntime& operator=(const CUDARuntime&) = delete;

  // True when strata was built with CUDA and at least one device can be initialized. Otherwise
  // false, and `why` (if given) says why: "built without CUDA" or "no CUDA device: <text>".
  // Cheap after the first call (the answer is cached for the process).
  static bool Available(std::string* why = nullptr);
  // The process-wide instance; never destroyed (so it stays usable from other static
  // destructors and at exit, when the CUDA runtime may already be shutting down).
  static CUDARuntime& Instance();

  const char* Name() const override { return "cuda"; }
  int DeviceCount() override;
  void SetDevice(int device) override;
  int GetDevice() override;

  void* Malloc(int device, std::size_t size) override;
  void Free(int device, void* ptr) override;
  void MemInfo(int device, std::size_t* free_bytes, std::size_t* total_bytes) override;

  std::size_t VmmGranularity(int device) override;
  void* ReserveAddress(int device, std::size_t size) override;
  void FreeAddress(void* ptr, std::size_t size) override;
  PhysicalMemory CreatePhysical(int device, std::size_t size) override;
  void ReleasePhysical(PhysicalMemory mem) override;
  void Map(void* ptr, std::size_t size, PhysicalMemory mem, std::size_t offset,
           int device) override;
  void Unmap(void* ptr, std::size_t size) override;
  void* HostMalloc(std::size_t size) override;
  void HostFree(void* ptr) override;

  Stream CreateStream(int device) override;
  void DestroyStream(Stream stream) override;
  void SynchronizeStream(Stream stream) override;
  void SynchronizeDevice(int device) override;
  bool QueryStream(Stream stream) override;

  Event CreateEvent(int device) override;
  void DestroyEvent(Event event) override;
  void RecordEvent(Event event, Stream stream) override;
  bool QueryEvent(Event event) override;
  void SynchronizeEvent(Event event) override;
  void StreamWaitEvent(Stream stream, Event event) override;

  void BeginCapture(Stream stream) override;
  void EndCapture(Stream stream) override;
  bool IsCapturing(Stream stream) override;
  int StreamDevice(Stream stream) override;
  void LaunchHostTask(Stream stream, std::function<void()> task) override;
  void MemsetAsync(void* dst, int value, std::size_t bytes, Stream stream) override;
  void MemcpyAsync(void* dst, const void* src, std::size_t bytes, Stream stream) override;

  std::uint64_t SyncCount() const override { return syncs_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> syncs_{0};
};

}  // namespace strata::platform
