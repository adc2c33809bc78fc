#include "layers/retry_waiters.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "glog/logging.h"

namespace strata::layers {

namespace {
std::atomic<std::uint64_t> g_next_id{1};
}  // namespace

thread_local std::uint64_t RetryWaiters::tls_last_ = 0;

namespace {
// Set once the thread's list below is destroyed: frees made later in the thread's exit (other
// thread-local destructors) must not register it again.
thread_local bool t_exited = false;
}  // namespace

// The registries a thread is a user of; deregisters it from those still alive when it exits.
struct RetryWaitersThreadUses {
  std::vector<std::pair<std::uint64_t, std::weak_ptr<RetryWaiters>>> uses;
  ~RetryWaitersThreadUses() {
    t_exited = true;
    for (auto& [id, weak] : uses) {
      if (auto w = weak.lock()) w->UserExited();
    }
  }
};

namespace {
thread_local RetryWaitersThreadUses t_uses;
}  // namespace

std::shared_ptr<RetryWaiters> RetryWaiters::Create(std::function<bool()> pending) {
  return std::shared_ptr<RetryWaiters>(new RetryWaiters(std::move(pending)));
}

RetryWaiters::RetryWaiters(std::function<bool()> pending)
    : id_(g_next_id.fetch_add(1, std::memory_order_relaxed)), pending_(std::move(pending)) {}

void RetryWaiters::RegisterUser() {
  if (t_exited) return;
  auto& uses = t_uses.uses;
  const bool known =
      std::any_of(uses.begin(), uses.end(), [this](const auto& u) { return u.first == id_; });
  if (!known) {
    // Registries that are gone need no deregistration: drop them before adding one.
    std::erase_if(uses, [](const auto& u) { return u.second.expired(); });
    uses.emplace_back(id_, weak_from_this());
    absl::MutexLock lock(&mu_);
    ++users_;
    VLOG(8) << "retry: a new thread uses the device, " << users_ << " in all";
  }
  tls_last_ = id_;
}

void RetryWaiters::UserExited() {
  absl::MutexLock lock(&mu_);
  --users_;
  // The waiters check again whether anybody is left to free.
  ++free_epoch_;
  changed_.SignalAll();
  VLOG(8) << "retry: a thread using the device exited, " << users_ << " left, " << waiting_locked_
          << " waiting";
}

void RetryWaiters::NotifyFree() {
  absl::MutexLock lock(&mu_);
  ++free_epoch_;
  activity_.fetch_add(1, std::memory_order_relaxed);
  changed_.SignalAll();
  notifications_.fetch_add(1, std::memory_order_relaxed);
}

void RetryWaiters::Enter() {
  NoteUser();
  // Before the waiter's next attempt, so that a free racing with it notifies (no lost wakeup).
  waiting_.fetch_add(1, std::memory_order_seq_cst);
  absl::MutexLock lock(&mu_);
  ++waiting_locked_;
}

void RetryWaiters::Leave() {
  {
    absl::MutexLock lock(&mu_);
    --waiting_locked_;
  }
  waiting_.fetch_sub(1, std::memory_order_seq_cst);
}

std::uint64_t RetryWaiters::free_epoch() const {
  absl::MutexLock lock(&mu_);
  return free_epoch_;
}

void RetryWaiters::WaitForFree(std::uint64_t seen_epoch, absl::Time until) {
  absl::MutexLock lock(&mu_);
  while (free_epoch_ == seen_epoch && !changed_.WaitWithDeadline(&mu_, until)) {
  }
}

bool RetryWaiters::NobodyCanFree() const {
  {
    absl::MutexLock lock(&mu_);
    if (waiting_locked_ < users_) return false;
  }
  // Every user waits: only memory coming back without a thread (stream work) could help.
  return !CouldComeBackAlone();
}

int RetryWaiters::num_users() const {
  absl::MutexLock lock(&mu_);
  return users_;
}

}  // namespace strata::layers
