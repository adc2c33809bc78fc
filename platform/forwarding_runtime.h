// ForwardingRuntime: a DeviceRuntime that forwards every call to a base runtime; decorators of
// the runtime (recording, fault injection) derive from it and override only what they change.
//
// Contract: as thread-safe as the base; throws what the base throws. Non-owning: the base must
// outlive this object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

#include "platform/device_runtime.h"

namespace strata::platform {

class ForwardingRuntime : public DeviceRuntime {
 public:
  // `who` names the decorator in the error for a null `base` (std::invalid_argument).
  ForwardingRuntime(DeviceRuntime* base, const char* who) : base_(base) {
    if (base == nullptr) throw std::invalid_argument(std::string(who) + ": base runtime is null");
  }

  DeviceRuntime* base() const { return base_; }

  const char* Name() const override { return base_->Name(); }
  int DeviceCount() override { return base_->DeviceCount(); }
  void SetDevice(int device) override { base_->SetDevice(device); }
  int GetDevice() override { return base_->GetDevice(); }
  void* Malloc(int device, std::size_t size) override { return base_->Malloc(device, size); }
  void Free(int device, void* ptr) override { base_->Free(device, ptr); }
  void MemInfo(int device, std::size_t* free_bytes, std::size_t* total_bytes) override {
    base_->MemInfo(device, free_bytes, total_bytes);
  }
  std::size_t VmmGranularity(int device) override { return base_->VmmGranularity(device); }
  void* ReserveAddress(int device, std::size_t size) override {
    return base_->ReserveAddress(device, size);
  }
  void FreeAddress(void* ptr, std::size_t size) override { base_->FreeAddress(ptr, size); }
  PhysicalMemory CreatePhysical(int device, std::size_t size) override {
    return base_->CreatePhysical(device, size);
  }
  void ReleasePhysical(PhysicalMemory mem) override { base_->ReleasePhysical(mem); }
  void Map(void* ptr, std::size_t size, PhysicalMemory mem, std::size_t offset,
           int device) override {
    base_->Map(ptr, size, mem, offset, device);
  }
  void Unmap(void* ptr, std::size_t size) override { base_->Unmap(ptr, size); }
  void* HostMalloc(std::size_t size) override { return base_->HostMalloc(size); }
  void HostFree(void* ptr) override { base_->HostFree(ptr); }
  Stream CreateStream(int device) override { return base_->CreateStream(device); }
  void DestroyStream(Stream stream) override { base_->DestroyStream(stream); }
  const std::atomic<std::uint64_t>* StreamDestroyCount() const override {
    return base_->StreamDestroyCount();
  }
  void SynchronizeStream(Stream stream) override { base_->SynchronizeStream(stream); }
  void SynchronizeDevice(int device) override { base_->SynchronizeDevice(device); }
  bool QueryStream(Stream stream) override { return base_->QueryStream(stream); }
  Event CreateEvent(int device) override { return base_->CreateEvent(device); }
  void DestroyEvent(Event event) override { base_->DestroyEvent(event); }
  void RecordEvent(Event event, Stream stream) override { base_->RecordEvent(event, stream); }
  bool QueryEvent(Event event) override { return base_->QueryEvent(event); }
  void SynchronizeEvent(Event event) override { base_->SynchronizeEvent(event); }
  void StreamWaitEvent(Stream stream, Event event) override {
    base_->StreamWaitEvent(stream, event);
  }
  void BeginCapture(Stream stream) override { base_->BeginCapture(stream); }
  void EndCapture(Stream stream) override { base_->EndCapture(stream); }
  bool IsCapturing(Stream stream) override { return base_->IsCapturing(stream); }
  int StreamDevice(Stream stream) override { return base_->StreamDevice(stream); }
  void LaunchHostTask(Stream stream, std::function<void()> task) override {
    base_->LaunchHostTask(stream, std::move(task));
  }
  void MemsetAsync(void* dst, int value, std::size_t bytes, Stream stream) override {
    base_->MemsetAsync(dst, value, bytes, stream);
  }
  void MemcpyAsync(void* dst, const void* src, std::size_t bytes, Stream stream) override {
    base_->MemcpyAsync(dst, src, bytes, stream);
  }
  std::uint64_t SyncCount() const override { return base_->SyncCount(); }

 private:
  DeviceRuntime* const base_;
};

}  // namespace strata::platform
