#include "platform/emulated_runtime.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <deque>
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
  void WaitAll() { WaitFor(enqueued()); }
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
};

struct EmulatedRuntime::DeviceState {
  explicit DeviceState(int device) : default_stream(std::make_shared<StreamState>(device)) {}
  absl::Mutex mu;
  std::size_t used ABSL_GUARDED_BY(mu) = 0;
  absl::flat_hash_map<void*, std::size_t> blocks ABSL_GUARDED_BY(mu);
  std::shared_ptr<StreamState> default_stream;
};

EmulatedRuntime::EmulatedRuntime(Options options) : options_(options) {
  if (options_.device_count < 1) {
    throw std::invalid_argument(
        absl::StrCat("EmulatedRuntime: device_count must be >= 1, got ", options_.device_count));
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

void EmulatedRuntime::SynchronizeStream(Stream stream) {
  syncs_.fetch_add(1, std::memory_order_relaxed);
  Resolve(stream)->WaitAll();
}

void EmulatedRuntime::SynchronizeDevice(int device) {
  CheckDevice(device);
  syncs_.fetch_add(1, std::memory_order_relaxed);
  std::vector<std::shared_ptr<StreamState>> streams{devices_[device]->default_stream};
  {
    absl::ReaderMutexLock lock(&streams_mu_);
    for (auto& [handle, s] : streams_) {
      if (s->device() == device) streams.push_back(s);
    }
    // Like cudaDeviceSynchronize, also wait for work left on destroyed streams.
    for (auto& s : retired_) {
      if (s->device() == device) streams.push_back(s);
    }
  }
  for (auto& s : streams) s->WaitAll();
}

bool EmulatedRuntime::QueryStream(Stream stream) {
  auto s = Resolve(stream);
  return s->completed() >= s->enqueued();
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
  const std::uint64_t seq = s->enqueued();
  absl::MutexLock lock(&e->mu);
  e->stream = std::move(s);
  e->seq = seq;
}

bool EmulatedRuntime::QueryEvent(Event event) {
  EventState* e = ToEvent(event);
  absl::MutexLock lock(&e->mu);
  return e->stream == nullptr || e->stream->completed() >= e->seq;
}

void EmulatedRuntime::SynchronizeEvent(Event event) {
  syncs_.fetch_add(1, std::memory_order_relaxed);
  EventState* e = ToEvent(event);
  std::shared_ptr<StreamState> s;
  std::uint64_t seq;
  {
    absl::MutexLock lock(&e->mu);
    s = e->stream;
    seq = e->seq;
  }
  if (s) s->WaitFor(seq);
}

void EmulatedRuntime::LaunchHostTask(Stream stream, std::function<void()> task) {
  Resolve(stream)->Enqueue(std::move(task));
}

void EmulatedRuntime::MemsetAsync(void* dst, int value, std::size_t bytes, Stream stream) {
  Resolve(stream)->Enqueue([dst, value, bytes] { std::memset(dst, value, bytes); });
}

void EmulatedRuntime::MemcpyAsync(void* dst, const void* src, std::size_t bytes, Stream stream) {
  Resolve(stream)->Enqueue([dst, src, bytes] { std::memcpy(dst, src, bytes); });
}

}  // namespace strata::platform
