// strata as PyTorch's CUDA allocator without CUDAPluggableAllocator: a
// c10::cuda::CUDACachingAllocator::CUDAAllocator over strata's C ABI (strata/c_api.h).
//
// strata.torch.enable(native=True) compiles this file against the PyTorch it runs with (the ABI
// of CUDAAllocator changes between PyTorch versions, so it is never shipped compiled), links it
// to the libstrata_c.so the package already loaded, and calls strata_torch_install().
//
// Why it exists: CUDAPluggableAllocator keeps its own map of pointer -> (size, device, stream)
// under one process-wide mutex, so every allocation also takes that mutex and allocates a map
// node, and every free takes it again for a lookup and an erase. Here a tensor's DataPtr carries
// the pointer alone, and strata finds its block itself, as it does for strata_free.
// It also answers what the pluggable wrapper refuses: torch.cuda.memory_stats() (and
// memory_allocated, max_memory_reserved, ...), reset_peak_memory_stats(),
// reset_accumulated_memory_stats(), and out-of-memory observers; an out-of-memory failure raises
// torch.OutOfMemoryError with strata's message.
//
// Not supported (a clear error, as PyTorch's own wrapper gives): memory snapshots and history
// through torch.cuda.memory (use strata.snapshot / strata.record_history), IPC handles, MemPool
// objects, checkpointed pool states, and so torch.compile's CUDA graph trees.
//
// Thread safety: as strata's C ABI; every method may be called from any thread.
#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "strata/c_api.h"

namespace strata_torch {
namespace {

namespace cca = c10::cuda::CUDACachingAllocator;

constexpr int kMaxDevices = 64;

void Delete(void* ptr) {
  // strata finds the block by its address; size, device and stream are not needed.
  if (ptr != nullptr) strata_free(ptr, 0, 0, nullptr);
}

// strata_malloc's failure as PyTorch's exceptions: out of memory becomes torch.OutOfMemoryError.
[[noreturn]] void ThrowMallocFailure(std::size_t size, c10::DeviceIndex device) {
  const std::string why = strata_last_error();
  if (why.find("out of memory") != std::string::npos) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, why);
  }
  TORCH_CHECK(false, "strata could not allocate ", size,
              " bytes on cuda:", static_cast<int>(device), ": ", why);
}

void* Malloc(std::size_t size, c10::DeviceIndex device, cudaStream_t stream) {
  if (size == 0) return nullptr;
  TORCH_CHECK(size <= static_cast<std::size_t>(PTRDIFF_MAX), "strata: a request of ", size,
              " bytes is larger than any device");
  void* p = strata_malloc(static_cast<ssize_t>(size), device, stream);
  if (p == nullptr) ThrowMallocFailure(size, device);
  return p;
}

void Check(int rc, const char* what) {
  TORCH_CHECK(rc == STRATA_OK, "strata: ", what, " failed: ", strata_last_error());
}

// The figures of DeviceStats under strata's keys (the same names as torch.cuda.memory_stats()).
struct StatKeys {
  static constexpr const char* kArrays[] = {
      "allocation",      "segment",        "active",       "inactive_split",
      "allocated_bytes", "reserved_bytes", "active_bytes", "inactive_split_bytes",
      "requested_bytes"};
  static constexpr const char* kPools[] = {"all", "small_pool", "large_pool"};
  static constexpr const char* kFields[] = {"current", "peak", "allocated", "freed"};
  static constexpr const char* kStats[] = {"oversize_allocations", "oversize_segments"};
  static constexpr const char* kCounts[] = {"num_alloc_retries",    "num_ooms",
                                            "num_sync_all_streams", "num_device_alloc",
                                            "num_device_free",      "max_split_size"};

  std::vector<std::string> names;
  std::vector<const char*> keys;

  StatKeys() {
    for (const char* array : kArrays) {
      for (const char* pool : kPools) {
        for (const char* field : kFields) {
          names.push_back(std::string(array) + "." + pool + "." + field);
        }
      }
    }
    for (const char* stat : kStats) {
      for (const char* field : kFields) names.push_back(std::string(stat) + "." + field);
    }
    for (const char* count : kCounts) names.push_back(count);
    for (const std::string& n : names) keys.push_back(n.c_str());
  }
};

void Fill(c10::CachingAllocator::Stat& stat, const std::int64_t*& v) {
  stat.current = *v++;
  stat.peak = *v++;
  stat.allocated = *v++;
  stat.freed = *v++;
}

class StrataAllocator final : public cca::CUDAAllocator {
 public:
  StrataAllocator() {
    for (auto& f : fraction_) f.store(1.0, std::memory_order_relaxed);
  }

  c10::DataPtr allocate(std::size_t size) override {
    const c10::DeviceIndex device = c10::cuda::current_device();
    void* p = Malloc(size, device, c10::cuda::getCurrentCUDAStream(device).stream());
    return {p, p, &Delete, c10::Device(c10::DeviceType::CUDA, device)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
  }

  void* raw_alloc(std::size_t size) override {
    const c10::DeviceIndex device = c10::cuda::current_device();
    return Malloc(size, device, c10::cuda::getCurrentCUDAStream(device).stream());
  }
  void* raw_alloc_with_stream(std::size_t size, cudaStream_t stream) override {
    return Malloc(size, c10::cuda::current_device(), stream);
  }
  void raw_delete(void* ptr) override { Delete(ptr); }

  void init(int /*device_count*/) override { initialized_.store(true, std::memory_order_release); }
  bool initialized() override { return initialized_.load(std::memory_order_acquire); }

  double getMemoryFraction(c10::DeviceIndex device) override {
    return fraction_[CheckedDevice(device)].load(std::memory_order_relaxed);
  }
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override {
    Check(strata_set_memory_fraction(fraction, device), "set_per_process_memory_fraction");
    fraction_[CheckedDevice(device)].store(fraction, std::memory_order_relaxed);
  }
  std::vector<cca::StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex) override {
    return {};  // strata's segments are its own (strata.snapshot shows them)
  }
  void enable(bool value) override { enabled_.store(value, std::memory_order_relaxed); }
  bool isEnabled() const override { return enabled_.load(std::memory_order_relaxed); }

  // cuDNN sizes its workspace from this. strata maps free device memory into any range, so the
  // device's free memory is what a request may get (PyTorch's own guess with nothing cached).
  void cacheInfo(c10::DeviceIndex device, std::size_t* largest_block) override {
    c10::cuda::CUDAGuard guard(device);
    std::size_t free = 0;
    std::size_t total = 0;
    C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    *largest_block = std::max(*largest_block, free);
  }
  void* getBaseAllocation(void* ptr, std::size_t* /*size*/) override { return ptr; }

  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override {
    if (ptr.get() == nullptr) return;  // a zero-size tensor has no block
    // 1 recorded, 0 nothing to record (the block's own stream). A block of a CUDA graph's pool
    // has no stream-safe layer, and strata refuses: warned, not raised, as the pluggable path
    // ignores the result (autograd records streams on captured gradients).
    if (strata_record_stream(ptr.get(), stream.stream()) < 0) {
      TORCH_WARN_ONCE("strata: record_stream not honoured: ", strata_last_error());
    }
  }

  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    for (int d = 0; d < c10::cuda::device_count(); ++d) Check(strata_empty_cache(d), "empty_cache");
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    static const StatKeys keys;
    std::vector<std::int64_t> values(keys.keys.size());
    Check(strata_memory_stats_values(device, keys.keys.data(), values.data(), values.size()),
          "memory_stats");
    c10::CachingDeviceAllocator::DeviceStats stats;
    const std::int64_t* v = values.data();
    for (auto* array : {&stats.allocation, &stats.segment, &stats.active, &stats.inactive_split,
                        &stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes,
                        &stats.inactive_split_bytes, &stats.requested_bytes}) {
      for (auto& stat : *array) Fill(stat, v);
    }
    Fill(stats.oversize_allocations, v);
    Fill(stats.oversize_segments, v);
    stats.num_alloc_retries = *v++;
    stats.num_ooms = *v++;
    stats.num_sync_all_streams = *v++;
    stats.num_device_alloc = *v++;
    stats.num_device_free = *v++;
    stats.max_split_size = *v++;
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    Check(strata_reset_accumulated_stats(device), "reset_accumulated_memory_stats");
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    Check(strata_reset_peak_stats(device), "reset_peak_memory_stats");
  }

  cca::SnapshotInfo snapshot(c10::MempoolId_t /*mempool_id*/, bool /*include_traces*/) override {
    TORCH_CHECK(false, "strata does not fill torch.cuda.memory_snapshot(): use strata.snapshot()");
  }

  // CUDA graph capture: the graph's private pool (strata/c_api.h, facade/graph_pools.h).
  void beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                           std::function<bool(cudaStream_t)> filter) override {
    strata_begin_allocate_to_pool(device, mempool_id, std::move(filter));
  }
  void endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override {
    strata_end_allocate_to_pool(device, mempool_id);
  }
  void releasePool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override {
    strata_release_pool(device, mempool_id);
  }

  cca::ShareableHandle shareIpcHandle(void* /*ptr*/) override {
    TORCH_CHECK(false, "strata does not share CUDA IPC handles");
  }
  std::shared_ptr<void> getIpcDevPtr(std::string /*handle*/) override {
    TORCH_CHECK(false, "strata does not open CUDA IPC handles");
  }
  bool isHistoryEnabled() override { return false; }
  void recordHistory(bool enabled, cca::CreateContextFn /*context_recorder*/,
                     std::size_t /*alloc_trace_max_entries*/, cca::RecordContext /*when*/,
                     bool /*clear_history*/,
                     const std::vector<std::string>& /*skip_actions*/) override {
    TORCH_CHECK(!enabled, "strata records its own history: use strata.record_history()");
  }

  void attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) override {
    std::lock_guard<std::mutex> lock(observers_mu_);
    if (observer_id_ == 0) {
      const int id = strata_add_oom_observer(&OnOom, this, /*with_snapshot=*/0);
      Check(id > 0 ? STRATA_OK : id, "attachOutOfMemoryObserver");
      observer_id_ = id;
    }
    observers_.push_back(std::move(observer));
  }
  // PyTorch's trackers see its own allocator's segment events; strata has none to give them.
  void attachAllocatorTraceTracker(cca::AllocatorTraceTracker /*tracker*/) override {}

  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override {
    c10::cuda::CUDAGuard guard(dev);
    const cudaError_t err = cudaDeviceEnablePeerAccess(dev_to_access, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();
    } else {
      C10_CUDA_CHECK(err);
    }
  }
  // strata's memory is mapped with cuMemMap: without peer access, a copy between devices needs
  // the peer copy.
  cudaError_t memcpyAsync(void* dst, int dst_device, const void* src, int src_device,
                          std::size_t count, cudaStream_t stream, bool p2p_enabled) override {
    if (p2p_enabled || dst_device == src_device) {
      return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
    }
    return cudaMemcpyPeerAsync(dst, dst_device, src, src_device, count, stream);
  }

  std::shared_ptr<cca::AllocatorState> getCheckpointState(c10::DeviceIndex,
                                                          c10::MempoolId_t) override {
    TORCH_CHECK(false, "strata does not checkpoint pool states");
  }
  cca::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex,
                                              std::shared_ptr<cca::AllocatorState>) override {
    TORCH_CHECK(false, "strata does not checkpoint pool states");
  }
  std::string name() override { return "strata"; }

 private:
  std::size_t CheckedDevice(c10::DeviceIndex device) const {
    TORCH_CHECK(device >= 0 && device < kMaxDevices, "strata: no device ",
                static_cast<int>(device));
    return static_cast<std::size_t>(device);
  }

  // strata's observer (strata/c_api.h): PyTorch's observers get the device's allocated bytes
  // and its memory, as from PyTorch's own allocator.
  static void OnOom(int device, std::size_t /*requested*/, const char* /*stats_json*/,
                    const char* /*snapshot_json*/, void* user_data) {
    auto* self = static_cast<StrataAllocator*>(user_data);
    const char* key = "allocated_bytes.all.current";
    std::int64_t allocated = 0;
    (void)strata_memory_stats_values(device, &key, &allocated, 1);
    std::size_t free = 0;
    std::size_t total = 0;
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess && cudaSetDevice(device) == cudaSuccess) {
      if (cudaMemGetInfo(&free, &total) != cudaSuccess) (void)cudaGetLastError();
      (void)cudaSetDevice(current);
    }
    std::vector<cca::OutOfMemoryObserver> observers;
    {
      std::lock_guard<std::mutex> lock(self->observers_mu_);
      observers = self->observers_;
    }
    for (const auto& observer : observers) {
      observer(device, static_cast<std::size_t>(allocated), total, free);
    }
  }

  std::atomic<bool> initialized_{false};
  std::atomic<bool> enabled_{true};
  std::atomic<double> fraction_[kMaxDevices] = {};
  std::mutex observers_mu_;
  std::vector<cca::OutOfMemoryObserver> observers_;
  int observer_id_ = 0;
};

}  // namespace
}  // namespace strata_torch

// Makes strata PyTorch's CUDA allocator. Returns NULL, or why not (PyTorch's allocator already
// served the process). The allocator lives for the process: tensors may be freed at exit after
// every static destructor ran.
extern "C" __attribute__((visibility("default"))) const char* strata_torch_install() {
  namespace cca = c10::cuda::CUDACachingAllocator;
  static auto* instance = new strata_torch::StrataAllocator();  // never destroyed, see above
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  cca::CUDAAllocator* current = cca::allocator.load();
  if (current == instance) return nullptr;
  if (current != nullptr && current->initialized()) {
    return "PyTorch's CUDA allocator is already initialized (a CUDA tensor was created before)";
  }
  cca::allocator.store(instance);
  return nullptr;
}
