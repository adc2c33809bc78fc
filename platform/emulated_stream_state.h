// EmulatedRuntime::StreamState: the mechanism under every emulated stream, a worker thread that
// runs a FIFO of host tasks and counts them (enqueued, completed, and how far host waits caught
// up, for the device lag). It only counts: what the counts mean to the host (events, the lag
// option, capture) is decided by the runtime (emulated_streams.cc, emulated_capture.cc). A
// header of its own because the runtime's lifetime code (emulated_runtime.cc) and its stream and
// event code (emulated_streams.cc) both hold streams. Internal to the emulated runtime's files.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "glog/logging.h"
#include "platform/emulated_runtime.h"

namespace strata::platform {

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

}  // namespace strata::platform
