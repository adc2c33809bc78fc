#include "history/recording_runtime.h"

namespace strata::history {

using platform::PhysicalMemory;
using platform::Stream;

void RecordingRuntime::Attach(int device, HistoryRecorder* recorder) {
  if (static_cast<unsigned>(device) >= static_cast<unsigned>(kMaxDevices)) return;
  devices_[device].store(recorder, std::memory_order_release);
}

void RecordingRuntime::Remember(const void* p, int device, std::size_t size) {
  absl::MutexLock lock(&mu_);
  blocks_[reinterpret_cast<std::uintptr_t>(p)] = Extent{device, size};
}

std::size_t RecordingRuntime::Forget(const void* p) {
  absl::MutexLock lock(&mu_);
  auto it = blocks_.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == blocks_.end()) return 0;
  const std::size_t bytes = it->second.bytes;
  blocks_.erase(it);
  return bytes;
}

void* RecordingRuntime::Malloc(int device, std::size_t size) {
  void* p = ForwardingRuntime::Malloc(device, size);
  if (p == nullptr) return p;
  Remember(p, device, size);
  if (HistoryRecorder* r = For(device)) r->Record(EventKind::kSegMalloc, p, size, Stream{});
  return p;
}

void RecordingRuntime::Free(int device, void* ptr) {
  const std::size_t bytes = ptr != nullptr ? Forget(ptr) : 0;
  ForwardingRuntime::Free(device, ptr);
  if (ptr == nullptr) return;
  if (HistoryRecorder* r = For(device)) r->Record(EventKind::kSegFree, ptr, bytes, Stream{});
}

void* RecordingRuntime::ReserveAddress(int device, std::size_t size) {
  void* p = ForwardingRuntime::ReserveAddress(device, size);
  absl::MutexLock lock(&mu_);
  reservations_[reinterpret_cast<std::uintptr_t>(p)] = Extent{device, size};
  return p;
}

void RecordingRuntime::FreeAddress(void* ptr, std::size_t size) {
  ForwardingRuntime::FreeAddress(ptr, size);
  absl::MutexLock lock(&mu_);
  reservations_.erase(reinterpret_cast<std::uintptr_t>(ptr));
}

int RecordingRuntime::DeviceOfAddress(const void* ptr) {
  const auto a = reinterpret_cast<std::uintptr_t>(ptr);
  absl::MutexLock lock(&mu_);
  for (const auto& [base, extent] : reservations_) {  // one reservation per device, or a few
    if (a >= base && a - base < extent.bytes) return extent.device;
  }
  return -1;
}

PhysicalMemory RecordingRuntime::CreatePhysical(int device, std::size_t size) {
  const PhysicalMemory m = ForwardingRuntime::CreatePhysical(device, size);
  if (!m.valid()) return m;
  {
    absl::MutexLock lock(&mu_);
    handles_[m.handle] = Extent{device, size};
  }
  if (HistoryRecorder* r = For(device)) r->Record(EventKind::kSegCreate, m.handle, size, Stream{});
  return m;
}

void RecordingRuntime::ReleasePhysical(PhysicalMemory mem) {
  Extent e{-1, 0};
  {
    absl::MutexLock lock(&mu_);
    if (auto it = handles_.find(mem.handle); it != handles_.end()) {
      e = it->second;
      handles_.erase(it);
    }
  }
  ForwardingRuntime::ReleasePhysical(mem);
  if (HistoryRecorder* r = For(e.device)) {
    r->Record(EventKind::kSegRelease, mem.handle, e.bytes, Stream{});
  }
}

void RecordingRuntime::Map(void* ptr, std::size_t size, PhysicalMemory mem, std::size_t offset,
                           int device) {
  ForwardingRuntime::Map(ptr, size, mem, offset, device);
  if (HistoryRecorder* r = For(device)) r->Record(EventKind::kSegMap, ptr, size, Stream{});
}

void RecordingRuntime::Unmap(void* ptr, std::size_t size) {
  ForwardingRuntime::Unmap(ptr, size);
  // The reservation says whose it is only when someone records: no lookup otherwise.
  bool any = host_.load(std::memory_order_relaxed) != nullptr;
  for (const auto& d : devices_) any = any || d.load(std::memory_order_relaxed) != nullptr;
  if (!any) return;
  if (HistoryRecorder* r = For(DeviceOfAddress(ptr))) {
    r->Record(EventKind::kSegUnmap, ptr, size, Stream{});
  }
}

void* RecordingRuntime::HostMalloc(std::size_t size) {
  void* p = ForwardingRuntime::HostMalloc(size);
  if (p == nullptr) return p;
  Remember(p, -1, size);
  if (HistoryRecorder* r = Host()) r->Record(EventKind::kSegMalloc, p, size, Stream{});
  return p;
}

void RecordingRuntime::HostFree(void* ptr) {
  const std::size_t bytes = ptr != nullptr ? Forget(ptr) : 0;
  ForwardingRuntime::HostFree(ptr);
  if (ptr == nullptr) return;
  if (HistoryRecorder* r = Host()) r->Record(EventKind::kSegFree, ptr, bytes, Stream{});
}

}  // namespace strata::history
