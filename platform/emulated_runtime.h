// EmulatedRuntime: a GPU-free DeviceRuntime, so every stream-safety and retry scenario runs on
// a machine without a GPU, with real concurrency.
//
// - Streams: each stream is a worker thread running enqueued host tasks in FIFO order (a
//   "kernel launch" is a host callable). Each device has a default stream.
// - Events: an event completes when its stream has run every task enqueued before it was
//   recorded. A never-recorded event is complete. Events stay queryable after their stream is
//   destroyed.
// - Device memory: host address space reserved lazily with mmap(MAP_NORESERVE) — untouched pages
//   cost nothing, so a replay of a 100 GiB workload needs no memory — with cudaMalloc's 2 MiB
//   granularity, up to `capacity_bytes` per device. Malloc returns nullptr past the capacity.
//   MemsetAsync/MemcpyAsync run on the stream's thread, so a stream-safety bug shows up as
//   corrupted data.
// - Virtual memory: ReserveAddress reserves host address space (mmap PROT_NONE, MAP_NORESERVE)
//   aligned to the granularity. A physical allocation is a range of one in-memory file (memfd)
//   per runtime (its pages exist only once touched); Map maps that range at the reserved address
//   (mmap MAP_SHARED | MAP_FIXED, so every mapping of a handle shows the same bytes), Unmap puts
//   an inaccessible reservation back. Only plain mmap calls, which tools that track mappings
//   (valgrind) follow. Physical bytes count against the device's capacity together with
//   Malloc'd bytes (CreatePhysical returns an empty handle past it) until the handle is released
//   and no range maps them (its pages are then punched out of the file). The VMM granularity is the
//   Malloc granularity. Every argument is checked (RuntimeError with the numbers); memory of one
//   device is mapped only for that device. Each mapping is a kernel memory map entry: a process
//   may hold about vm.max_map_count (65530 by default) of them.
// - StreamWaitEvent enqueues a task on the stream's worker thread that waits for the event's
//   recorded work; the caller never waits.
// - Device lag (Options::event_lag = N, default 0): on a GPU the host runs ahead of the device,
//   so work it enqueued completes later than the host records it, and memory waiting on that
//   work (a free recorded on another stream, a page released behind a fence) stays held a while.
//   A replay enqueues no real work, so without lag everything would look complete at once. With
//   N > 0, a host query (QueryEvent, QueryStream) sees the work captured by an event (the tasks
//   enqueued on its stream before the RecordEvent) as complete only once it has run AND N more
//   tasks have been enqueued on that same stream after it: the device is N tasks behind the
//   host. The model is deterministic (counts, no timing), so tests and replays repeat exactly.
//   Host waits catch the device up: SynchronizeEvent / SynchronizeStream / SynchronizeDevice
//   return once the work ran (never later: they cannot hang on the lag), and from then on
//   queries see the work they waited for as complete, as on a GPU. A Free waits, as cudaFree
//   does, until every stream of its device has run the work enqueued so far (work that may
//   still use the memory), and catches them up. StreamWaitEvent orders on the work having run,
//   ignoring the lag (the device itself is not behind itself). An event that captured no task
//   (recorded on a stream with none enqueued yet) is complete at once. N = 0 is the behaviour
//   without lag.
// - Synchronization (stream, event, device) and a Free (cudaFree synchronizes) are counted in
//   SyncCount(). Like CUDA API calls in a stream callback, calling them from a host task may
//   deadlock.
// - Stream capture as CUDA's global mode (device_runtime.h): work enqueued on a capturing stream
//   is dropped (recorded into a graph that is never run); while any capture is underway, Free and
//   every synchronize throw, as do queries of a capturing stream or of an event last recorded in
//   a capture, and waits across the capture's boundary. Destroying a capturing stream ends its
//   capture.
// - DestroyStream returns at once, like cudaStreamDestroy: queued work still runs afterwards.
//   StreamDestroyCount() counts the destructions (every one goes through this runtime).
// Thread-safe. Destroying the runtime drains and joins every stream (destroyed ones included)
// and releases all device and host memory.
// Unknown device ordinals, stream handles or pointers (device or host), and recording an event
// on a stream of another device, throw RuntimeError.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "platform/device_runtime.h"

namespace strata::platform {

class EmulatedRuntime : public DeviceRuntime {
 public:
  // Bounds of Options (the constructor throws std::invalid_argument outside them).
  static constexpr int kMaxDevices = 64;
  // 16 TiB per device: the virtual-memory pool reserves four times a device's memory of address
  // space, which the emulated device takes from the host's (128 TiB for a process on x86-64).
  static constexpr std::size_t kMaxCapacityBytes = std::size_t{1} << 44;

  struct Options {
    int device_count = 1;
    std::size_t capacity_bytes = std::size_t{80} << 30;
    std::size_t granularity = std::size_t{2} << 20;
    // Tasks a stream's work stays "running" for host queries (see the contract above); 0: none.
    std::uint64_t event_lag = 0;
    // With event_lag: a query that the lag model lets see work as complete waits for that work
    // to have run, and StreamWaitEvent enqueues its wait even on work that has run already, so
    // that answers depend on task counts alone and a run repeats exactly, with several streams
    // too (worker threads otherwise decide, now and then, that work past the lag has not run
    // yet, or that a wait is needed). Only for work that cannot block on the host (replays): a
    // blocked task would block the query.
    bool deterministic_lag = false;
  };

  EmulatedRuntime() : EmulatedRuntime(Options{}) {}
  explicit EmulatedRuntime(Options options);
  ~EmulatedRuntime() override;

  const char* Name() const override { return "emulated"; }
  int DeviceCount() override { return options_.device_count; }
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
  const std::atomic<std::uint64_t>* StreamDestroyCount() const override {
    return &streams_destroyed_;
  }
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

  // Introspection for tests.
  std::size_t used_bytes(int device);
  std::uint64_t malloc_count() const { return mallocs_.load(); }
  std::uint64_t free_count() const { return frees_.load(); }
  int live_streams();
  // Physical allocations not yet given back (released and unmapped), and mapped ranges.
  std::size_t live_physical();
  std::size_t mapped_ranges();

 private:
  // The worker thread behind a stream (emulated_stream_state.h), an event (emulated_streams.cc),
  // a device's capacity and default stream (emulated_runtime.cc).
  class StreamState;
  struct EventState;
  struct DeviceState;
  // Virtual memory (emulated_vmm.cc).
  struct Mapping {
    std::size_t size = 0;
    std::uint64_t physical = 0;
    std::size_t offset = 0;
  };
  struct Reservation {
    std::size_t size = 0;
    int device = 0;
    std::map<std::uintptr_t, Mapping> mappings;  // by start address; never overlapping
  };
  struct PhysicalState {
    int device = 0;
    std::size_t size = 0;
    std::uint64_t file_offset = 0;  // where its bytes are in memory_fd_
    std::size_t mappings = 0;
    bool released = false;
  };

  // Devices and their capacity (emulated_runtime.cc).
  void CheckDevice(int device) const;
  // Takes `bytes` of the device's capacity, which Malloc'd and physical bytes share, or returns
  // false when fewer are left. RefundCapacity gives bytes back.
  bool ChargeCapacity(int device, std::size_t bytes);
  void RefundCapacity(int device, std::size_t bytes);
  const std::shared_ptr<StreamState>& DefaultStream(int device) const;

  // Stream capture (emulated_capture.cc).
  bool Capturing(const StreamState* stream);
  // Throws what CUDA returns for `call` while a capture is underway.
  void RefuseDuringCapture(const char* call) const;

  // Streams and events (emulated_streams.cc).
  std::shared_ptr<StreamState> Resolve(Stream stream);
  // Whether a host query sees the first `seq` tasks of `stream` as complete (the lag applied).
  bool VisibleToHost(StreamState& stream, std::uint64_t seq) const;
  // Waits for the first `seq` tasks of `stream` to run, then lets queries see them complete.
  void WaitAndCatchUp(StreamState& stream, std::uint64_t seq) const;
  // Every stream of the device: its default stream, live streams and destroyed ones still
  // draining.
  std::vector<std::shared_ptr<StreamState>> DeviceStreams(int device);
  // Joins and drops destroyed streams whose queued work has finished.
  void ReapRetiredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(streams_mu_);
  static EventState* ToEvent(Event event);

  // Virtual memory (emulated_vmm.cc).
  // Checks that `value` (named `what`) is a multiple of the granularity, and non-zero if asked.
  void CheckGranular(const char* call, const char* what, std::size_t value, bool nonzero) const;
  // Gives the physical allocation's bytes back to its device once released and unmapped.
  void MaybeDropPhysicalLocked(std::uint64_t handle) ABSL_EXCLUSIVE_LOCKS_REQUIRED(vmm_mu_);

  const Options options_;
  std::vector<std::unique_ptr<DeviceState>> devices_;
  absl::Mutex streams_mu_;
  absl::flat_hash_map<void*, std::shared_ptr<StreamState>> streams_ ABSL_GUARDED_BY(streams_mu_);
  // Destroyed streams whose worker may still be draining queued work.
  std::vector<std::shared_ptr<StreamState>> retired_ ABSL_GUARDED_BY(streams_mu_);
  // Virtual memory: reservations by base address, physical allocations by handle.
  absl::Mutex vmm_mu_;
  std::map<std::uintptr_t, Reservation> reservations_ ABSL_GUARDED_BY(vmm_mu_);
  absl::flat_hash_map<std::uint64_t, PhysicalState> physical_ ABSL_GUARDED_BY(vmm_mu_);
  std::uint64_t next_physical_ ABSL_GUARDED_BY(vmm_mu_) = 1;
  // The file physical allocations live in (made at the first), and its length: each allocation
  // takes the next range; a dropped one's pages are punched out, its range never reused.
  int memory_fd_ ABSL_GUARDED_BY(vmm_mu_) = -1;
  std::uint64_t memory_fd_size_ ABSL_GUARDED_BY(vmm_mu_) = 0;
  // Streams capturing now (see the contract); captures_ counts them for a lock-free "none".
  absl::Mutex capture_mu_;
  absl::flat_hash_set<const StreamState*> capturing_ ABSL_GUARDED_BY(capture_mu_);
  std::atomic<int> captures_{0};
  absl::Mutex host_mu_;
  absl::flat_hash_set<void*> host_blocks_ ABSL_GUARDED_BY(host_mu_);
  std::atomic<std::uint64_t> syncs_{0}, mallocs_{0}, frees_{0};
  std::atomic<std::uint64_t> streams_destroyed_{0};  // bumped after the stream left streams_
};

}  // namespace strata::platform
