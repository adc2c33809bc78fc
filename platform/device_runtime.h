// DeviceRuntime: exactly what allocators need from a device runtime — device memory, memory
// info, events, stream/device synchronization — plus a few stream operations tests use to
// put real work on streams (host tasks, memset, memcpy).
//
// Contract
// - Thread safety: every method may be called from any thread concurrently.
// - Devices: methods taking `device` address that ordinal; methods taking a Stream address the
//   stream's device, and the default Stream{} means the default stream of the calling thread's
//   current device (SetDevice), as in CUDA.
// - Malloc returns nullptr when the device is out of memory; every other failure throws
//   RuntimeError (for CUDA: with the CUDA error name and text).
// - SyncCount() counts stream, event and device synchronizations since construction, so tests
//   can assert that a path never synchronizes. Queries do not count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "platform/event.h"
#include "platform/stream.h"

namespace strata::platform {

class RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
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
  // Page-locked host memory. HostMalloc: nullptr on out-of-memory.
  virtual void* HostMalloc(std::size_t size) = 0;
  virtual void HostFree(void* ptr) = 0;

  // Streams.
  virtual Stream CreateStream(int device) = 0;
  // Work already enqueued still runs; events recorded on the stream stay queryable.
  virtual void DestroyStream(Stream stream) = 0;
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

  // Work on streams, in stream order.
  virtual void LaunchHostTask(Stream stream, std::function<void()> task) = 0;
  virtual void MemsetAsync(void* dst, int value, std::size_t bytes, Stream stream) = 0;
  virtual void MemcpyAsync(void* dst, const void* src, std::size_t bytes, Stream stream) = 0;

  virtual std::uint64_t SyncCount() const = 0;
};

}  // namespace strata::platform
