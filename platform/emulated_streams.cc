// EmulatedRuntime, streams and events: what CUDA's stream order means on the emulated device.
// Creating, destroying and resolving streams; events as positions in a stream's order; the
// device lag (what a host query sees as complete, and how host waits catch the device up);
// synchronization; and the work enqueued on a stream. Built on StreamState
// (emulated_stream_state.h), the worker thread that runs a stream's tasks. Separate from the
// memory the runtime hands out (emulated_runtime.cc, emulated_vmm.cc): they share no state, and
// Free reaches the streams only through DeviceStreams and WaitAndCatchUp.
#include "platform/emulated_runtime.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "platform/emulated_stream_state.h"

namespace strata::platform {

namespace {
constexpr std::uint32_t kEventMagic = 0x45564e54;  // "EVNT": rejects foreign handles
}  // namespace

struct EmulatedRuntime::EventState {
  std::uint32_t magic = kEventMagic;
  int device = 0;
  absl::Mutex mu;
  std::shared_ptr<StreamState> stream ABSL_GUARDED_BY(mu);
  std::uint64_t seq ABSL_GUARDED_BY(mu) = 0;
  bool captured ABSL_GUARDED_BY(mu) = false;  // last recorded on a capturing stream
};

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
  if (stream.is_default()) return DefaultStream(GetDevice());
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
  std::vector<std::shared_ptr<StreamState>> streams{DefaultStream(device)};
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

int EmulatedRuntime::StreamDevice(Stream stream) {
  return stream.is_default() ? -1 : Resolve(stream)->device();
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
  if (captured) return;  // an edge of the graph
  // Nothing left to wait for. Not asked under a deterministic lag: whether the work has run yet
  // is timing, and a task more or less on `stream` moves what its lag lets queries see.
  const bool count_every_wait = options_.deterministic_lag && options_.event_lag != 0;
  if (waited == nullptr || (!count_every_wait && waited->completed() >= seq)) return;
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
