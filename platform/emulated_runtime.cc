#include "platform/emulated_runtime.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"

namespace strata::platform {

namespace {
thread_local int tls_current_device = 0;
constexpr std::uint32_t kEventMagic = 0x45564e54;  // "EVNT": rejects foreign handles
}  // namespace

// One emulated stream: a worker thread draining a FIFO of tasks.
class EmulatedRuntime::StreamState {
 public:
  explicit StreamState(int device) : device_(device), worker_([this] { Run(); }) {}
  ~StreamState() {
    RequestStop();
    Join();
  }

  int device() const { return device_; }

  // Returns the sequence number of the task (1-based).
  std::uint64_t Enqueue(std::function<void()> task) {
    absl::MutexLock lock(&mu_);
    if (stopping_) throw RuntimeError("strata emulated runtime: stream used after destroy");
    queue_.push_back(std::move(task));
    return ++enqueued_;
  }
  std::uint64_t enqueued() {
    absl::MutexLock lock(&mu_);
    return enqueued_;
  }
  std::uint64_t completed() const { return completed_.load(std::memory_order_acquire); }
  void WaitFor(std::uint64_t seq) {
    if (completed() >= seq) return;
    absl::MutexLock lock(&mu_);
    auto done = [this, seq] { return completed() >= seq; };
    mu_.Await(absl::Condition(&done));
  }
  // Host queries see the first `seq` tasks complete (once run) when a host wait caught up to
  // them or `lag` tasks were enqueued after them. Requires seq <= enqueued().
  bool LaggedVisible(std::uint64_t seq, std::uint64_t lag) {
    absl::MutexLock lock(&mu_);
    return seq <= caught_up_ || enqueued_ - seq >= lag;
  }
  void CatchUp(std::uint64_t seq) {
    absl::MutexLock lock(&mu_);
    if (seq > caught_up_) caught_up_ = seq;
  }
  // No more tasks are accepted; the worker exits once the queued ones ran. Does not wait, as
  // cudaStreamDestroy does not: the caller may be the one that unblocks the queued work.
  void RequestStop() {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  // True once the worker has run its last task after RequestStop (Join is then immediate).
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  // Waits for the worker to drain and exit. Requires RequestStop.
  void Join() {
    absl::MutexLock lock(&join_mu_);
    if (worker_.joinable() && worker_.get_id() != std::this_thread::get_id()) worker_.join();
  }

 private:
  void Run() {
    for (;;) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this] { return !queue_.empty() || stopping_; };
        mu_.Await(absl::Condition(&ready));
        if (queue_.empty()) {
          finished_.store(true, std::memory_order_release);
          return;
        }
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        task();
      } catch (const std::exception& e) {
        LOG(ERROR) << "strata emulated runtime: a stream task threw: " << e.what();
      }
      // Release the task's captures before the task counts as complete, as CUDA does for a
      // host function: whoever synchronizes then sees them gone.
      task = nullptr;
      absl::MutexLock lock(&mu_);
      completed_.fetch_add(1, std::memory_order_release);
    }
  }

  const int device_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::uint64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t caught_up_ ABSL_GUARDED_BY(mu_) = 0;  // device lag: see LaggedVisible
  std::atomic<std::uint64_t> completed_{0};
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> finished_{false};
  absl::Mutex join_mu_;
  std::thread worker_;  // last: starts after the fields it uses exist
};

struct EmulatedRuntime::EventState {
  std::uint32_t magic = kEventMagic;
  int device = 0;
  absl::Mutex mu;
  std::shared_ptr<StreamState> stream ABSL_GUARDED_BY(mu);
  std::uint64_t seq ABSL_GUARDED_BY(mu) = 0;
  bool captured ABSL_GUARDED_BY(mu) = false;  // last recorded on a capturing stream
};

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
                                             kMaxCapacityBytes, "] (1 PiB), got ",
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
    for (auto& [handle, p] : physical_) {
      if (p.home != nullptr) munmap(p.home, p.size);
    }
  }
  absl::MutexLock lock(&host_mu_);
  for (void* ptr : host_blocks_) std::free(ptr);
}

void EmulatedRuntime::ReapRetiredLocked() {
  for (std::size_t i = 0; i < retired_.size();) {
    if (retired_[i]->finished()) {
      retired_[i]->Join();  // the worker has returned from Run: immediate
      retired_[i] = std::move(retired_.back());
      retired_.pop_back();
    } else {
      ++i;
    }
  }
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

void* EmulatedRuntime::Malloc(int device, std::size_t size) {
  CheckDevice(device);
  if (size == 0) return nullptr;
  if (size > options_.capacity_bytes) return nullptr;
  const std::size_t g = options_.granularity;
  const std::size_t rounded = (size + g - 1) / g * g;
  DeviceState& d = *devices_[device];
  {
    absl::MutexLock lock(&d.mu);
    if (rounded > options_.capacity_bytes - d.used) return nullptr;
    d.used += rounded;
  }
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

void EmulatedRuntime::CheckGranular(const char* call, const char* what, std::size_t value,
                                    bool nonzero) const {
  if ((nonzero && value == 0) || value % options_.granularity != 0) {
    throw RuntimeError(absl::StrCat("strata emulated runtime: ", call, ": ", what, " ", value,
                                    " is not a ", nonzero ? "non-zero " : "",
                                    "multiple of the granularity ", options_.granularity));
  }
}

std::size_t EmulatedRuntime::VmmGranularity(int device) {
  CheckDevice(device);
  return options_.granularity;
}

void* EmulatedRuntime::ReserveAddress(int device, std::size_t size) {
  CheckDevice(device);
  CheckGranular("ReserveAddress", "size", size, /*nonzero=*/true);
  const std::size_t g = options_.granularity;
  if (size > SIZE_MAX - g) {
    throw RuntimeError(absl::StrCat("strata emulated runtime: ReserveAddress(", size,
                                    ") on device ", device, ": size too large"));
  }
  // One granule more than asked, trimmed to a g-aligned range of `size` bytes.
  void* raw =
      mmap(nullptr, size + g, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {
    const int err = errno;
    throw RuntimeError(absl::StrCat("strata emulated runtime: ReserveAddress(", size,
                                    ") on device ", device, ": mmap failed: ", std::strerror(err)));
  }
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t base = (start + g - 1) & ~(std::uintptr_t{g} - 1);
  if (base > start) munmap(raw, base - start);
  const std::uintptr_t end = start + size + g;
  if (end > base + size) munmap(reinterpret_cast<void*>(base + size), end - (base + size));
  absl::MutexLock lock(&vmm_mu_);
  reservations_.emplace(base, Reservation{.size = size, .device = device, .mappings = {}});
  return reinterpret_cast<void*>(base);
}

void EmulatedRuntime::FreeAddress(void* ptr, std::size_t size) {
  {
    absl::MutexLock lock(&vmm_mu_);
    auto it = reservations_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == reservations_.end() || it->second.size != size) {
      throw RuntimeError(absl::StrFormat(
          "strata emulated runtime: FreeAddress(%p, %d): not a reserved range (a reservation is "
          "freed whole, with the pointer and size ReserveAddress gave)",
          ptr, size));
    }
    if (!it->second.mappings.empty()) {
      throw RuntimeError(
          absl::StrFormat("strata emulated runtime: FreeAddress(%p, %d): %d range(s) still mapped",
                          ptr, size, it->second.mappings.size()));
    }
    reservations_.erase(it);
  }
  // The range stays mapped (inaccessible) until here, so no other reservation can get it first.
  munmap(ptr, size);
}

PhysicalMemory EmulatedRuntime::CreatePhysical(int device, std::size_t size) {
  CheckDevice(device);
  CheckGranular("CreatePhysical", "size", size, /*nonzero=*/true);
  DeviceState& d = *devices_[device];
  {
    absl::MutexLock lock(&d.mu);
    if (size > options_.capacity_bytes - d.used) return PhysicalMemory{};
    d.used += size;
  }
  // Shared, so that mremap can place the same pages at several addresses; pages exist once
  // touched.
  void* home = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (home == MAP_FAILED) {
    absl::MutexLock lock(&d.mu);
    d.used -= size;
    return PhysicalMemory{};
  }
  absl::MutexLock lock(&vmm_mu_);
  const std::uint64_t handle = next_physical_++;
  physical_.emplace(handle, PhysicalState{.device = device, .size = size, .home = home});
  return PhysicalMemory{handle};
}

void EmulatedRuntime::MaybeDropPhysicalLocked(std::uint64_t handle) {
  auto it = physical_.find(handle);
  if (it == physical_.end() || !it->second.released || it->second.mappings > 0) return;
  DeviceState& d = *devices_[it->second.device];
  {
    absl::MutexLock lock(&d.mu);
    d.used -= it->second.size;
  }
  physical_.erase(it);
}

void EmulatedRuntime::ReleasePhysical(PhysicalMemory mem) {
  void* home = nullptr;
  std::size_t size = 0;
  {
    absl::MutexLock lock(&vmm_mu_);
    auto it = physical_.find(mem.handle);
    if (it == physical_.end() || it->second.released) {
      throw RuntimeError(absl::StrCat("strata emulated runtime: ReleasePhysical(handle ",
                                      mem.handle, "): unknown physical handle"));
    }
    home = std::exchange(it->second.home, nullptr);
    size = it->second.size;
    it->second.released = true;
    MaybeDropPhysicalLocked(mem.handle);
  }
  // Pages still mapped elsewhere stay alive until their last mapping is gone.
  munmap(home, size);
}

void EmulatedRuntime::Map(void* ptr, std::size_t size, PhysicalMemory mem, std::size_t offset,
                          int device) {
  CheckDevice(device);
  CheckGranular("Map", "size", size, /*nonzero=*/true);
  CheckGranular("Map", "offset", offset, /*nonzero=*/false);
  if (offset != 0) {
    throw RuntimeError(absl::StrFormat(
        "strata emulated runtime: Map(%p, %d, handle %d, offset %d): the offset must be 0, as on "
        "CUDA",
        ptr, size, mem.handle, offset));
  }
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  auto fail = [&](const std::string& why) {
    return RuntimeError(
        absl::StrFormat("strata emulated runtime: Map(%p, %d, handle %d, offset %d, device %d): %s",
                        ptr, size, mem.handle, offset, device, why));
  };
  if (addr % options_.granularity != 0) {
    throw fail(
        absl::StrCat("the address is not a multiple of the granularity ", options_.granularity));
  }
  absl::MutexLock lock(&vmm_mu_);
  auto pit = physical_.find(mem.handle);
  if (pit == physical_.end() || pit->second.released) throw fail("unknown physical handle");
  PhysicalState& p = pit->second;
  if (p.device != device) {
    throw fail(absl::StrCat("the memory belongs to device ", p.device,
                            " (peer mappings are not emulated)"));
  }
  if (size != p.size) {
    throw fail(absl::StrCat("the physical allocation has ", p.size,
                            " bytes: a map covers a whole physical allocation, as on CUDA"));
  }
  auto rit = reservations_.upper_bound(addr);
  if (rit == reservations_.begin()) throw fail("not inside a reserved range");
  --rit;
  Reservation& r = rit->second;
  if (addr - rit->first > r.size || size > r.size - (addr - rit->first)) {
    throw fail("not inside a reserved range");
  }
  auto next = r.mappings.upper_bound(addr);
  if (next != r.mappings.end() && next->first < addr + size) {
    throw fail(absl::StrFormat("overlaps the mapped range [%#x, %#x)", next->first,
                               next->first + next->second.size));
  }
  if (next != r.mappings.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > addr) {
      throw fail(absl::StrFormat("overlaps the mapped range [%#x, %#x)", prev->first,
                                 prev->first + prev->second.size));
    }
  }
  // A second mapping of the same shared pages, replacing the inaccessible reservation there.
  void* got =
      mremap(static_cast<char*>(p.home) + offset, 0, size, MREMAP_MAYMOVE | MREMAP_FIXED, ptr);
  if (got == MAP_FAILED) {
    const int err = errno;
    throw fail(absl::StrCat("mremap failed: ", std::strerror(err)));
  }
  r.mappings.emplace(addr, Mapping{.size = size, .physical = mem.handle, .offset = offset});
  ++p.mappings;
}

void EmulatedRuntime::Unmap(void* ptr, std::size_t size) {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  absl::MutexLock lock(&vmm_mu_);
  auto not_mapped = [&] {
    return RuntimeError(absl::StrFormat(
        "strata emulated runtime: Unmap(%p, %d): not a mapped range (Unmap takes the pointer "
        "and size of one Map)",
        ptr, size));
  };
  auto rit = reservations_.upper_bound(addr);
  if (rit == reservations_.begin()) throw not_mapped();
  std::map<std::uintptr_t, Mapping>& mappings = std::prev(rit)->second.mappings;
  auto mit = mappings.find(addr);
  if (mit == mappings.end() || mit->second.size != size) throw not_mapped();
  void* got =
      mmap(ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (got == MAP_FAILED) {
    const int err = errno;
    throw RuntimeError(absl::StrFormat("strata emulated runtime: Unmap(%p, %d): mmap failed: %s",
                                       ptr, size, std::strerror(err)));
  }
  const std::uint64_t handle = mit->second.physical;
  mappings.erase(mit);
  --physical_[handle].mappings;
  MaybeDropPhysicalLocked(handle);
}

std::size_t EmulatedRuntime::live_physical() {
  absl::MutexLock lock(&vmm_mu_);
  return physical_.size();
}

std::size_t EmulatedRuntime::mapped_ranges() {
  absl::MutexLock lock(&vmm_mu_);
  std::size_t n = 0;
  for (const auto& [base, r] : reservations_) n += r.mappings.size();
  return n;
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

Stream EmulatedRuntime::CreateStream(int device) {
  CheckDevice(device);
  auto state = std::make_shared<StreamState>(device);
  Stream s{state.get()};
  absl::MutexLock lock(&streams_mu_);
  ReapRetiredLocked();
  streams_.emplace(s.handle, std::move(state));
  return s;
}

void EmulatedRuntime::DestroyStream(Stream stream) {
  if (stream.is_default())
    throw RuntimeError("strata emulated runtime: cannot destroy the default stream");
  absl::MutexLock lock(&streams_mu_);
  auto it = streams_.find(stream.handle);
  if (it == streams_.end()) throw RuntimeError("strata emulated runtime: unknown stream handle");
  std::shared_ptr<StreamState> state = std::move(it->second);
  streams_.erase(it);
  // After the erase (a reader who sees the new count finds the handle unknown).
  streams_destroyed_.fetch_add(1, std::memory_order_release);
  {  // a capture of a destroyed stream is over (CUDA invalidates it)
    absl::MutexLock capture_lock(&capture_mu_);
    if (capturing_.erase(state.get()) != 0) captures_.fetch_sub(1, std::memory_order_acq_rel);
  }
  // Queued work still runs; the stream is joined once drained (ReapRetiredLocked) or at
  // destruction. Events keep `state` alive for queries. An idle stream's worker exits at once:
  // it is joined now, so that no finished thread outlives its stream unjoined.
  state->RequestStop();
  if (state->enqueued() == state->completed()) {
    state->Join();
  } else {
    retired_.push_back(std::move(state));
  }
  ReapRetiredLocked();
}

std::shared_ptr<EmulatedRuntime::StreamState> EmulatedRuntime::Resolve(Stream stream) {
  if (stream.is_default()) return devices_[GetDevice()]->default_stream;
  absl::ReaderMutexLock lock(&streams_mu_);
  auto it = streams_.find(stream.handle);
  if (it == streams_.end()) throw RuntimeError("strata emulated runtime: unknown stream handle");
  return it->second;
}

int EmulatedRuntime::live_streams() {
  absl::ReaderMutexLock lock(&streams_mu_);
  return static_cast<int>(streams_.size());
}

bool EmulatedRuntime::VisibleToHost(StreamState& stream, std::uint64_t seq) const {
  if (options_.deterministic_lag && options_.event_lag != 0 && seq != 0) {
    if (!stream.LaggedVisible(seq, options_.event_lag)) return false;
    stream.WaitFor(seq);  // enqueued `event_lag` tasks ago: it runs, and none of them blocks
    return true;
  }
  if (stream.completed() < seq) return false;
  if (options_.event_lag == 0 || seq == 0) return true;
  return stream.LaggedVisible(seq, options_.event_lag);
}

void EmulatedRuntime::WaitAndCatchUp(StreamState& stream, std::uint64_t seq) const {
  stream.WaitFor(seq);
  if (options_.event_lag != 0) stream.CatchUp(seq);
}

std::vector<std::shared_ptr<EmulatedRuntime::StreamState>> EmulatedRuntime::DeviceStreams(
    int device) {
  std::vector<std::shared_ptr<StreamState>> streams{devices_[device]->default_stream};
  absl::ReaderMutexLock lock(&streams_mu_);
  for (auto& [handle, s] : streams_) {
    if (s->device() == device) streams.push_back(s);
  }
  // Like cudaDeviceSynchronize, also work left on destroyed streams.
  for (auto& s : retired_) {
    if (s->device() == device) streams.push_back(s);
  }
  return streams;
}

void EmulatedRuntime::SynchronizeStream(Stream stream) {
  RefuseDuringCapture("SynchronizeStream");
  syncs_.fetch_add(1, std::memory_order_relaxed);
  auto s = Resolve(stream);
  WaitAndCatchUp(*s, s->enqueued());
}

void EmulatedRuntime::SynchronizeDevice(int device) {
  CheckDevice(device);
  RefuseDuringCapture("SynchronizeDevice");
  syncs_.fetch_add(1, std::memory_order_relaxed);
  for (auto& s : DeviceStreams(device)) WaitAndCatchUp(*s, s->enqueued());
}

bool EmulatedRuntime::QueryStream(Stream stream) {
  auto s = Resolve(stream);
  if (Capturing(s.get())) {
    throw RuntimeError(
        "strata emulated runtime: QueryStream of a capturing stream "
        "(cudaErrorStreamCaptureUnsupported)");
  }
  return VisibleToHost(*s, s->enqueued());
}

EmulatedRuntime::EventState* EmulatedRuntime::ToEvent(Event event) {
  auto* e = static_cast<EventState*>(event.handle);
  if (e == nullptr || e->magic != kEventMagic) {
    throw RuntimeError("strata emulated runtime: invalid event handle");
  }
  return e;
}

Event EmulatedRuntime::CreateEvent(int device) {
  CheckDevice(device);
  auto* e = new EventState;
  e->device = device;
  return Event{e};
}

void EmulatedRuntime::DestroyEvent(Event event) {
  EventState* e = ToEvent(event);
  e->magic = 0;
  delete e;
}

void EmulatedRuntime::RecordEvent(Event event, Stream stream) {
  EventState* e = ToEvent(event);
  auto s = Resolve(stream);
  if (s->device() != e->device) {
    throw RuntimeError(absl::StrCat("strata emulated runtime: event of device ", e->device,
                                    " recorded on a stream of device ", s->device()));
  }
  if (Capturing(s.get())) {  // a node of the graph: the event itself does not change
    absl::MutexLock lock(&e->mu);
    e->captured = true;
    return;
  }
  const std::uint64_t seq = s->enqueued();
  absl::MutexLock lock(&e->mu);
  e->stream = std::move(s);
  e->seq = seq;
  e->captured = false;
}

bool EmulatedRuntime::QueryEvent(Event event) {
  EventState* e = ToEvent(event);
  absl::MutexLock lock(&e->mu);
  if (e->captured) {
    throw RuntimeError(
        "strata emulated runtime: QueryEvent of an event recorded in a stream "
        "capture (cudaErrorCapturedEvent)");
  }
  return e->stream == nullptr || VisibleToHost(*e->stream, e->seq);
}

void EmulatedRuntime::SynchronizeEvent(Event event) {
  RefuseDuringCapture("SynchronizeEvent");
  syncs_.fetch_add(1, std::memory_order_relaxed);
  EventState* e = ToEvent(event);
  std::shared_ptr<StreamState> s;
  std::uint64_t seq;
  {
    absl::MutexLock lock(&e->mu);
    s = e->stream;
    seq = e->seq;
  }
  if (s) WaitAndCatchUp(*s, seq);
}

void EmulatedRuntime::StreamWaitEvent(Stream stream, Event event) {
  EventState* e = ToEvent(event);
  std::shared_ptr<StreamState> s = Resolve(stream);
  std::shared_ptr<StreamState> waited;
  std::uint64_t seq;
  bool captured;
  {
    absl::MutexLock lock(&e->mu);
    waited = e->stream;
    seq = e->seq;
    captured = e->captured;
  }
  if (Capturing(s.get()) != captured) {
    throw RuntimeError(
        "strata emulated runtime: StreamWaitEvent across a stream capture's boundary (a "
        "capturing stream on an event recorded outside the capture, or the reverse: "
        "cudaErrorStreamCaptureIsolation)");
  }
  if (captured) return;                                         // an edge of the graph
  if (waited == nullptr || waited->completed() >= seq) return;  // nothing left to wait for
  // The snapshot (stream, seq) is taken now, as CUDA does: re-recording the event later does
  // not change what this wait waits for. A wait on its own stream is already satisfied when it
  // runs (the recorded work is ahead of it in the queue).
  s->Enqueue([waited = std::move(waited), seq] { waited->WaitFor(seq); });
}

// Work enqueued on a capturing stream is recorded into the graph, not run.
void EmulatedRuntime::LaunchHostTask(Stream stream, std::function<void()> task) {
  auto s = Resolve(stream);
  if (!Capturing(s.get())) s->Enqueue(std::move(task));
}

void EmulatedRuntime::MemsetAsync(void* dst, int value, std::size_t bytes, Stream stream) {
  auto s = Resolve(stream);
  if (!Capturing(s.get())) s->Enqueue([dst, value, bytes] { std::memset(dst, value, bytes); });
}

void EmulatedRuntime::MemcpyAsync(void* dst, const void* src, std::size_t bytes, Stream stream) {
  auto s = Resolve(stream);
  if (!Capturing(s.get())) s->Enqueue([dst, src, bytes] { std::memcpy(dst, src, bytes); });
}

}  // namespace strata::platform
