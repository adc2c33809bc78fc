#include "capi/in_flight.h"

#include <atomic>
#include <cstdint>

#include "absl/base/attributes.h"
#include "absl/base/const_init.h"
#include "absl/synchronization/mutex.h"
#include "platform/asymmetric_fence.h"

namespace strata::capi {
namespace {

ABSL_CONST_INIT absl::Mutex list_mu(absl::kConstInit);
// Every counter ever handed out; counters are reused, never freed.
ABSL_CONST_INIT InFlightCounter* list_head ABSL_GUARDED_BY(list_mu) = nullptr;
// For calls made during a thread's exit, after its counter went back.
ABSL_CONST_INIT InFlightCounter exit_counter;

}  // namespace

// Hands the thread's counter back when it exits.
struct InFlight::Releaser {
  ~Releaser() { InFlight::Unregister(); }
};

InFlightCounter& InFlight::Register() {
  if (exited_) return exit_counter;
  // Asked before the list's mutex (the first answer registers the process with the kernel).
  const bool plain = platform::AsymmetricFenceAvailable();
  InFlightCounter* c = nullptr;
  {
    absl::MutexLock lock(&list_mu);
    for (InFlightCounter* x = list_head; x != nullptr; x = x->next) {
      if (!x->owned) {
        c = x;
        break;
      }
    }
    if (c == nullptr) {
      c = new InFlightCounter();  // NOLINT(cppcoreguidelines-owning-memory): listed for good
      c->next = list_head;
      list_head = c;
    }
    c->owned = true;
    c->plain = plain;
  }
  thread_local Releaser releaser;  // constructed once per thread: Register runs once per thread
  (void)releaser;
  mine_ = c;
  return *c;
}

void InFlight::Unregister() {
  InFlightCounter* c = mine_;
  mine_ = nullptr;
  exited_ = true;
  if (c == nullptr) return;
  absl::MutexLock lock(&list_mu);
  c->owned = false;  // its count is 0: no call of this thread is in flight at its exit
}

std::int64_t InFlight::OnOtherThreads() {
  // The other side of the handshake: every thread's count write before its read of the allocator
  // pointer is seen here, or that read sees the pointer taken away.
  const bool fenced = !platform::AsymmetricFenceAvailable() || platform::HeavyFence();
  const InFlightCounter* mine = mine_;
  std::int64_t n = exit_counter.count.load(std::memory_order_seq_cst);
  absl::MutexLock lock(&list_mu);
  for (const InFlightCounter* c = list_head; c != nullptr; c = c->next) {
    if (c == mine) continue;
    const std::int64_t count = c->count.load(std::memory_order_seq_cst);
    n += fenced ? count : (c->owned || count != 0 ? 1 : 0);
  }
  return n;
}

}  // namespace strata::capi
