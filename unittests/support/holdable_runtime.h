// HoldableRuntime: a DeviceRuntime that forwards to another one (usually EmulatedRuntime) but
// can make QueryEvent answer "not ready" — for all queries while held, or for the next n — so
// tests can keep pending frees pending deterministically. It also counts event creations,
// destructions and queries. Synchronization, stream waits and virtual memory calls forward
// unchanged (synchronization is counted by the inner runtime). Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>

#include "platform/device_runtime.h"

namespace strata::testing {

class HoldableRuntime : public platform::DeviceRuntime {
 public:
  explicit HoldableRuntime(platform::DeviceRuntime* inner) : inner_(inner) {}

  // While held, every QueryEvent returns false.
  void HoldEvents(bool hold) { hold_.store(hold); }
  // The next `n` QueryEvent calls return false.
  void HoldNextQueries(int n) { hold_next_.store(n); }

  std::uint64_t events_created() const { return created_.load(); }
  std::uint64_t events_destroyed() const { return destroyed_.load(); }
  std::uint64_t event_queries() const { return queries_.load(); }

  const char* Name() const override { return "holdable"; }
  int DeviceCount() override { return inner_->DeviceCount(); }
  void SetDevice(int device) override { inner_->SetDevice(device); }
  int GetDevice() override { return inner_->GetDevice(); }
  void* Malloc(int device, std::size_t size) override { return inner_->Malloc(device, size); }
  void Free(int device, void* ptr) override { inner_->Free(device, ptr); }
  void MemInfo(int device, std::size_t* free_bytes, std::size_t* total_bytes) override {
    inner_->MemInfo(device, free_bytes, total_bytes);
  }
  std::size_t VmmGranularity(int device) override { return inner_->VmmGranularity(device); }
  void* ReserveAddress(int device, std::size_t size) override {
    return inner_->ReserveAddress(device, size);
  }
  void FreeAddress(void* ptr, std::size_t size) override { inner_->FreeAddress(ptr, size); }
  platform::PhysicalMemory CreatePhysical(int device, std::size_t size) override {
    return inner_->CreatePhysical(device, size);
  }
  void ReleasePhysical(platform::PhysicalMemory mem) override { inner_->ReleasePhysical(mem); }
  void Map(void* ptr, std::size_t size, platform::PhysicalMemory mem, std::size_t offset,
           int device) override {
    inner_->Map(ptr, size, mem, offset, device);
  }
  void Unmap(void* ptr, std::size_t size) override { inner_->Unmap(ptr, size); }
  void* HostMalloc(std::size_t size) override { return inner_->HostMalloc(size); }
  void HostFree(void* ptr) override { inner_->HostFree(ptr); }
  platform::Stream CreateStream(int device) override { return inner_->CreateStream(device); }
  void DestroyStream(platform::Stream stream) override { inner_->DestroyStream(stream); }
  const std::atomic<std::uint64_t>* StreamDestroyCount() const override {
    return inner_->StreamDestroyCount();
  }
  void SynchronizeStream(platform::Stream stream) override { inner_->SynchronizeStream(stream); }
  void SynchronizeDevice(int device) override { inner_->SynchronizeDevice(device); }
  bool QueryStream(platform::Stream stream) override { return inner_->QueryStream(stream); }
  platform::Event CreateEvent(int device) override;
  void DestroyEvent(platform::Event event) override;
  void RecordEvent(platform::Event event, platform::Stream stream) override {
    inner_->RecordEvent(event, stream);
  }
  bool QueryEvent(platform::Event event) override;
  void SynchronizeEvent(platform::Event event) override { inner_->SynchronizeEvent(event); }
  void StreamWaitEvent(platform::Stream stream, platform::Event event) override {
    inner_->StreamWaitEvent(stream, event);
  }
  void BeginCapture(platform::Stream stream) override { inner_->BeginCapture(stream); }
  void EndCapture(platform::Stream stream) override { inner_->EndCapture(stream); }
  bool IsCapturing(platform::Stream stream) override { return inner_->IsCapturing(stream); }
  void LaunchHostTask(platform::Stream stream, std::function<void()> task) override {
    inner_->LaunchHostTask(stream, std::move(task));
  }
  void MemsetAsync(void* dst, int value, std::size_t bytes, platform::Stream stream) override {
    inner_->MemsetAsync(dst, value, bytes, stream);
  }
  void MemcpyAsync(void* dst, const void* src, std::size_t bytes,
                   platform::Stream stream) override {
    inner_->MemcpyAsync(dst, src, bytes, stream);
  }
  std::uint64_t SyncCount() const override { return inner_->SyncCount(); }

 private:
  platform::DeviceRuntime* inner_;
  std::atomic<bool> hold_{false};
  std::atomic<int> hold_next_{0};
  std::atomic<std::uint64_t> created_{0}, destroyed_{0}, queries_{0};
};

}  // namespace strata::testing
