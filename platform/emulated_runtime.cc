// EmulatedRuntime: its lifetime (options, construction, teardown), devices, and the memory it
// hands out directly: Malloc'd device memory, host memory (HostMalloc), and the accounting of each
// device's capacity (ChargeCapacity, RefundCapacity) that Malloc and the virtual memory calls
// share. The rest lives with its own state: streams and events in emulated_streams.cc (over
// StreamState, emulated_stream_state.h), virtual memory in emulated_vmm.cc, stream capture in
// emulated_capture.cc.
#include "platform/emulated_runtime.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"
#include "platform/emulated_stream_state.h"

namespace strata::platform {

namespace {
thread_local int tls_current_device = 0;
}  // namespace

struct EmulatedRuntime::DeviceState {
  explicit DeviceState(int device) : default_stream(std::make_shared<StreamState>(device)) {}
  absl::Mutex mu;
  std::size_t used ABSL_GUARDED_BY(mu) = 0;
  absl::flat_hash_map<void*, std::size_t> blocks ABSL_GUARDED_BY(mu);
  std::shared_ptr<StreamState> default_stream;
};

EmulatedRuntime::EmulatedRuntime(Options options) : options_(options) {
  if (options_.device_count < 1 || options_.device_count > kMaxDevices) {
    throw std::invalid_argument(absl::StrCat("EmulatedRuntime: device_count must be in [1, ",
                                             kMaxDevices, "], got ", options_.device_count));
  }
  if (options_.capacity_bytes == 0 || options_.capacity_bytes > kMaxCapacityBytes) {
    throw std::invalid_argument(absl::StrCat("EmulatedRuntime: capacity_bytes must be in [1, ",
                                             kMaxCapacityBytes, "] (16 TiB), got ",
                                             options_.capacity_bytes));
  }
  if (options_.granularity == 0 || (options_.granularity & (options_.granularity - 1)) != 0) {
    throw std::invalid_argument(absl::StrCat(
        "EmulatedRuntime: granularity must be a power of two, got ", options_.granularity));
  }
  for (int d = 0; d < options_.device_count; ++d) {
    devices_.push_back(std::make_unique<DeviceState>(d));
  }
  VLOG(4) << "emulated runtime: " << options_.device_count << " device(s) of "
          << options_.capacity_bytes << " bytes";
}

EmulatedRuntime::~EmulatedRuntime() {
  // Join outside streams_mu_: a queued task may still call into the runtime.
  std::vector<std::shared_ptr<StreamState>> streams;
  {
    absl::MutexLock lock(&streams_mu_);
    for (auto& [handle, stream] : streams_) streams.push_back(std::move(stream));
    streams_.clear();
    for (auto& stream : retired_) streams.push_back(std::move(stream));
    retired_.clear();
  }
  for (auto& device : devices_) streams.push_back(device->default_stream);
  for (auto& stream : streams) stream->RequestStop();
  for (auto& stream : streams) stream->Join();
  for (auto& device : devices_) {
    absl::MutexLock lock(&device->mu);
    for (auto& [ptr, size] : device->blocks) munmap(ptr, size);
  }
  {
    absl::MutexLock lock(&vmm_mu_);
    // Unmapping a whole reservation also drops the mappings inside it.
    for (auto& [base, r] : reservations_) munmap(reinterpret_cast<void*>(base), r.size);
    if (memory_fd_ >= 0) close(memory_fd_);
  }
  absl::MutexLock lock(&host_mu_);
  for (void* ptr : host_blocks_) std::free(ptr);
}

const std::shared_ptr<EmulatedRuntime::StreamState>& EmulatedRuntime::DefaultStream(
    int device) const {
  return devices_[device]->default_stream;
}

void EmulatedRuntime::CheckDevice(int device) const {
  if (device < 0 || device >= options_.device_count) {
    throw RuntimeError(absl::StrCat("strata emulated runtime: invalid device ordinal ", device,
                                    " (", options_.device_count, " device(s))"));
  }
}

void EmulatedRuntime::SetDevice(int device) {
  CheckDevice(device);
  tls_current_device = device;
}

int EmulatedRuntime::GetDevice() {
  return tls_current_device < options_.device_count ? tls_current_device : 0;
}

bool EmulatedRuntime::ChargeCapacity(int device, std::size_t bytes) {
  DeviceState& d = *devices_[device];
  absl::MutexLock lock(&d.mu);
  if (bytes > options_.capacity_bytes - d.used) return false;
  d.used += bytes;
  return true;
}

void EmulatedRuntime::RefundCapacity(int device, std::size_t bytes) {
  DeviceState& d = *devices_[device];
  absl::MutexLock lock(&d.mu);
  d.used -= bytes;
}

void* EmulatedRuntime::Malloc(int device, std::size_t size) {
  CheckDevice(device);
  if (size == 0) return nullptr;
  if (size > options_.capacity_bytes) return nullptr;
  const std::size_t g = options_.granularity;
  const std::size_t rounded = (size + g - 1) / g * g;
  if (!ChargeCapacity(device, rounded)) return nullptr;
  DeviceState& d = *devices_[device];
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  absl::MutexLock lock(&d.mu);
  if (p == MAP_FAILED) {
    d.used -= rounded;
    return nullptr;
  }
  d.blocks.emplace(p, rounded);
  mallocs_.fetch_add(1, std::memory_order_relaxed);
  return p;
}

void EmulatedRuntime::Free(int device, void* ptr) {
  CheckDevice(device);
  if (ptr == nullptr) return;
  RefuseDuringCapture("Free (cudaFree)");
  DeviceState& d = *devices_[device];
  std::size_t size;
  {
    absl::MutexLock lock(&d.mu);
    auto it = d.blocks.find(ptr);
    if (it == d.blocks.end()) {
      throw RuntimeError(absl::StrFormat(
          "strata emulated runtime: Free of unknown pointer %p on device %d", ptr, device));
    }
    size = it->second;
  }
  // cudaFree synchronizes the device: the work enqueued so far (which may still use the memory)
  // runs first, and the wait is counted as the host wait it is on a GPU.
  syncs_.fetch_add(1, std::memory_order_relaxed);
  for (auto& s : DeviceStreams(device)) WaitAndCatchUp(*s, s->enqueued());
  {
    absl::MutexLock lock(&d.mu);
    auto it = d.blocks.find(ptr);
    if (it == d.blocks.end()) {  // freed by another thread meanwhile
      throw RuntimeError(absl::StrFormat(
          "strata emulated runtime: Free of unknown pointer %p on device %d", ptr, device));
    }
    d.blocks.erase(it);
    d.used -= size;
  }
  munmap(ptr, size);
  frees_.fetch_add(1, std::memory_order_relaxed);
}

void EmulatedRuntime::MemInfo(int device, std::size_t* free_bytes, std::size_t* total_bytes) {
  CheckDevice(device);
  DeviceState& d = *devices_[device];
  absl::MutexLock lock(&d.mu);
  if (free_bytes) *free_bytes = options_.capacity_bytes - d.used;
  if (total_bytes) *total_bytes = options_.capacity_bytes;
}

std::size_t EmulatedRuntime::used_bytes(int device) {
  CheckDevice(device);
  DeviceState& d = *devices_[device];
  absl::MutexLock lock(&d.mu);
  return d.used;
}

void* EmulatedRuntime::HostMalloc(std::size_t size) {
  if (size == 0) return nullptr;
  void* ptr = std::malloc(size);
  if (ptr == nullptr) return nullptr;
  absl::MutexLock lock(&host_mu_);
  host_blocks_.insert(ptr);
  return ptr;
}

void EmulatedRuntime::HostFree(void* ptr) {
  if (ptr == nullptr) return;
  {
    absl::MutexLock lock(&host_mu_);
    if (host_blocks_.erase(ptr) == 0) {
      throw RuntimeError(
          absl::StrFormat("strata emulated runtime: HostFree of unknown pointer %p", ptr));
    }
  }
  std::free(ptr);
}

}  // namespace strata::platform
