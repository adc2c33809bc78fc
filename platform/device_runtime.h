// DeviceRuntime: exactly what allocators need from a device runtime — device memory, virtual
// memory (reserved address ranges backed by physical pages on demand), memory info, events,
// stream/device synchronization and cross-stream waits — plus a few stream operations tests use
// to put real work on streams (host tasks, memset, memcpy).
//
// Contract
// - Thread safety: every method may be called from any thread concurrently.
// - Devices: methods taking `device` address that ordinal; methods taking a Stream address the
//   stream's device, and the default Stream{} means the default stream of the calling thread's
//   current device (SetDevice), as in CUDA.
// - Malloc returns nullptr when the device is out of memory; every other failure throws
//   RuntimeError (for CUDA: with the CUDA error name and text).
// - SyncCount() counts every call that waits for the device: any synchronize (stream, event,
//   device), and a device Free of a non-null pointer, which implies one (cudaFree synchronizes
//   the device), so tests can assert that a path never makes the host wait. Queries,
//   StreamWaitEvent and the virtual memory calls do not count.
// - Virtual memory (VMM), in units of VmmGranularity(device) = g, the physical page size:
//   * g == 0 means the device (or driver) has no virtual memory management; every other VMM call
//     for that device then throws RuntimeError.
//   * ReserveAddress(device, size): a g-aligned range of `size` bytes (a non-zero multiple of g)
//     of device address space with no memory behind it; FreeAddress(ptr, size) gives back exactly
//     such a range (same ptr and size) once nothing in it is mapped.
//   * CreatePhysical(device, size): `size` bytes (a non-zero multiple of g) of device memory,
//     counted in MemInfo, not yet addressable; an empty handle when the device is out of memory.
//     ReleasePhysical(mem) drops the handle; the memory returns to the device once no range maps
//     it any more (so releasing a mapped handle is allowed and keeps the mapping usable).
//   * Map(ptr, size, mem, offset, device): makes [ptr, ptr + size), inside one reservation and
//     not mapped, address bytes [offset, offset + size) of `mem`, readable and writable by
//     `device` (mem's device). Every number is a multiple of g, `offset` must be 0 and `size`
//     the whole physical allocation: CUDA maps physical allocations only whole
//     (cuMemMap: CUDA_ERROR_NOT_SUPPORTED otherwise, measured on an H100), so both runtimes
//     refuse anything else. One physical allocation may be mapped at
//     several addresses: all of them show the same bytes. Unmapping a range that is not mapped
//     is a caller error that CUDA does not always report; the emulated runtime throws.
//   * Unmap(ptr, size) undoes exactly one earlier Map (same ptr and size): the range becomes
//     reserved-only again.
//   * Neither Unmap nor ReleasePhysical waits for the device. The caller must ensure that no
//     pending or running device work still uses the range or the pages: for example by unmapping
//     only after the events recorded on every stream that last used them have completed.
//   * Bad arguments (misaligned or zero sizes and offsets, ranges outside a reservation or past
//     the physical size, mapping over a mapped range, unmapping what is not mapped, unknown
//     handles) throw RuntimeError.
// - Stream capture (CUDA graphs), CUDA's global mode: BeginCapture(stream) starts capturing a
//   stream that is not the default stream; work enqueued on it afterwards is recorded into a
//   graph instead of running; EndCapture(stream) ends the capture and discards the graph (tools
//   and tests; a framework captures through its own CUDA calls). IsCapturing(stream) says whether
//   `stream` is capturing now, whoever began it. While a capture is underway CUDA refuses what
//   could synchronize or cross the capture: Free, every synchronize, a query of the capturing
//   stream or of an event recorded in the capture, and a wait of the capturing stream on an
//   event recorded outside it (or of another stream on one recorded inside); such a call throws
//   RuntimeError and invalidates the capture. Malloc and the virtual memory calls stay allowed
//   (the CUDA runtime makes them in relaxed capture mode, as PyTorch does).
// - StreamDestroyCount(): where the runtime sees every stream destruction, a counter that each
//   DestroyStream bumps once the stream is gone, so that a caller keeping state per stream can
//   tell with one load whether any stream was destroyed since it last looked (then it asks about
//   its own). Null where the runtime cannot tell: CUDA's, whose streams frameworks destroy with
//   their own cudaStreamDestroy. Decorators forward it.
// - StreamWaitEvent(stream, event): work enqueued on `stream` afterwards does not start before
//   the work captured by the event's latest RecordEvent (at the time of the call) has completed;
//   the host never waits. A never-recorded event imposes no wait.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "platform/event.h"
#include "platform/physical_memory.h"
#include "platform/stream.h"

namespace strata::platform {

class RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A call CUDA refuses while a stream capture is underway (cudaErrorStreamCapture*): it may
// succeed once the capture ends. Thrown by both runtimes, so a caller can defer instead of fail.
class CaptureRefusedError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  virtual const char* Name() const = 0;
  virtual int DeviceCount() = 0;
  virtual void SetDevice(int device) = 0;
  virtual int GetDevice() = 0;

  // Device memory. Malloc: nullptr on out-of-memory.
  virtual void* Malloc(int device, std::size_t size) = 0;
  virtual void Free(int device, void* ptr) = 0;
  virtual void MemInfo(int device, std::size_t* free_bytes, std::size_t* total_bytes) = 0;

  // Virtual memory (see the contract above). VmmGranularity: 0 without VMM support.
  virtual std::size_t VmmGranularity(int device) = 0;
  virtual void* ReserveAddress(int device, std::size_t size) = 0;
  virtual void FreeAddress(void* ptr, std::size_t size) = 0;
  // Empty handle on out-of-memory.
  virtual PhysicalMemory CreatePhysical(int device, std::size_t size) = 0;
  virtual void ReleasePhysical(PhysicalMemory mem) = 0;
  virtual void Map(void* ptr, std::size_t size, PhysicalMemory mem, std::size_t offset,
                   int device) = 0;
  virtual void Unmap(void* ptr, std::size_t size) = 0;

  // Page-locked host memory. HostMalloc: nullptr on out-of-memory.
  virtual void* HostMalloc(std::size_t size) = 0;
  virtual void HostFree(void* ptr) = 0;

  // Streams.
  virtual Stream CreateStream(int device) = 0;
  // Work already enqueued still runs; events recorded on the stream stay queryable.
  virtual void DestroyStream(Stream stream) = 0;
  // Streams destroyed so far (see the contract); null when the runtime cannot tell.
  virtual const std::atomic<std::uint64_t>* StreamDestroyCount() const { return nullptr; }
  virtual void SynchronizeStream(Stream stream) = 0;
  virtual void SynchronizeDevice(int device) = 0;
  virtual bool QueryStream(Stream stream) = 0;

  // Events.
  virtual Event CreateEvent(int device) = 0;
  virtual void DestroyEvent(Event event) = 0;
  virtual void RecordEvent(Event event, Stream stream) = 0;
  // True when all work captured by the last RecordEvent has completed (or never recorded).
  virtual bool QueryEvent(Event event) = 0;
  virtual void SynchronizeEvent(Event event) = 0;
  // Later work on `stream` waits on the device for `event`; the host does not wait.
  virtual void StreamWaitEvent(Stream stream, Event event) = 0;

  // Stream capture (see above).
  virtual void BeginCapture(Stream stream) = 0;
  virtual void EndCapture(Stream stream) = 0;
  virtual bool IsCapturing(Stream stream) = 0;

  // The device a stream belongs to; -1 when the runtime cannot tell (the default stream, which
  // every device has, or a CUDA runtime older than 12.8). Throws RuntimeError for a handle it
  // does not know. Legal during a capture.
  virtual int StreamDevice(Stream stream) {
    (void)stream;
    return -1;
  }

  // Work on streams, in stream order.
  virtual void LaunchHostTask(Stream stream, std::function<void()> task) = 0;
  virtual void MemsetAsync(void* dst, int value, std::size_t bytes, Stream stream) = 0;
  virtual void MemcpyAsync(void* dst, const void* src, std::size_t bytes, Stream stream) = 0;

  virtual std::uint64_t SyncCount() const = 0;
};

}  // namespace strata::platform
