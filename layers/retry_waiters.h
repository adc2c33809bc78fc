// RetryWaiters: the threads waiting for memory on one device, shared by every retry layer of
// that device (the facade builds one per device and hands it to each stream's chain), so that a
// free on any chain of the device wakes every waiter, and a waiter can tell when nobody is left
// to free what it needs.
//
// Contract
// - Users: a thread becomes a user of the device at its first allocation or free through one of
//   the device's retry layers (NoteAllocated / NoteFreed), and stays one until it exits. A user
//   is a thread that may hold memory of the device or free memory others hold.
// - Waiters: Enter/Leave bracket a thread's wait for memory (RetryAllocator::AllocateWithRetry).
// - NobodyCanFree(): every user that is still running is waiting, and nothing would come back
//   without a thread acting (`pending`, given at construction: frees waiting for stream work).
//   Then waiting cannot help. A thread that holds memory of the device without ever having
//   allocated or freed on it (a block handed over by a waiting thread, not yet freed) is not
//   seen: the rule assumes that the thread that frees a block has allocated or freed on the
//   device before.
// - Activity(): a count that moves on every free and every successful allocation on the device
//   while somebody waits (not counted when nobody waits: the hot paths stay lock- and RMW-free).
// - WaitForFree: blocks until a free on the device after `seen_epoch`, a user's exit, or `until`.
// - Hot paths (NoteAllocated, NoteFreed): a thread-local compare and one atomic load; a lock and
//   a notify only while somebody waits (and once per thread and device, to register the user).
// - Thread safety: every member may be called concurrently from any thread.
// - `pending` is called without any lock of this object held; it must not allocate through the
//   device's chains. Null means "memory could always come back on its own": NobodyCanFree() is
//   then never true.
// - Lifetime: made by Create() (shared ownership; threads keep weak references to deregister
//   when they exit). Nothing here throws but std::bad_alloc.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace strata::layers {

class RetryWaiters : public std::enable_shared_from_this<RetryWaiters> {
 public:
  static std::shared_ptr<RetryWaiters> Create(std::function<bool()> pending = nullptr);
  RetryWaiters(const RetryWaiters&) = delete;
  RetryWaiters& operator=(const RetryWaiters&) = delete;

  // Hot: after a successful allocation through a retry layer of the device.
  void NoteAllocated() {
    NoteUser();
    if (waiting_.load(std::memory_order_relaxed) != 0) [[unlikely]] {
      activity_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  // Hot: after a free through a retry layer of the device. Wakes the waiters.
  void NoteFreed() {
    NoteUser();
    // seq_cst pairs with Enter's increment: a free racing with a new waiter wakes it.
    if (waiting_.load(std::memory_order_seq_cst) != 0) [[unlikely]]
      NotifyFree();
  }

  // The waiter's side.
  void Enter();
  void Leave();
  // The free epoch now: pass it to WaitForFree after an attempt that failed.
  std::uint64_t free_epoch() const;
  // Blocks until a free after `seen_epoch`, a user's exit, or `until` (whichever first).
  void WaitForFree(std::uint64_t seen_epoch, absl::Time until);
  bool NobodyCanFree() const;
  // Whether memory could come back with no thread acting (`pending`; true when null).
  bool CouldComeBackAlone() const { return pending_ == nullptr || pending_(); }
  std::uint64_t Activity() const { return activity_.load(std::memory_order_relaxed); }

  // Introspection (tests, diagnostics).
  int num_waiters() const { return waiting_.load(std::memory_order_relaxed); }
  int num_users() const;
  // Frees that had to wake waiters (a free with no waiter never counts).
  std::uint64_t num_notifications() const { return notifications_.load(std::memory_order_relaxed); }

 private:
  explicit RetryWaiters(std::function<bool()> pending);
  void NoteUser() {
    if (tls_last_ != id_) [[unlikely]]
      RegisterUser();
  }
  [[gnu::noinline]] void RegisterUser();
  [[gnu::noinline, gnu::cold]] void NotifyFree();
  // A user thread exited (called from its thread-local list).
  void UserExited();
  friend struct RetryWaitersThreadUses;

  static thread_local std::uint64_t tls_last_;  // id_ of the last registry this thread used
  const std::uint64_t id_;
  const std::function<bool()> pending_;
  std::atomic<int> waiting_{0};
  std::atomic<std::uint64_t> activity_{0};
  std::atomic<std::uint64_t> notifications_{0};
  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  std::uint64_t free_epoch_ ABSL_GUARDED_BY(mu_) = 0;  // bumped by each notifying free or exit
  int users_ ABSL_GUARDED_BY(mu_) = 0;
  int waiting_locked_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace strata::layers
