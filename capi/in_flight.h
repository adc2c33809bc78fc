// C ABI calls in flight, so that a reconfiguration can refuse while another thread is inside a
// call: that call's allocation would land in the retired allocator. Not installed; for capi/
// only.
//
// Each calling thread counts its calls in a counter of its own (a cache line, written by that
// thread only; handed to another thread after it exits). The count and the reconfiguration's
// read of it form a Dekker handshake with the allocator pointer (LibraryState::Reconfigure):
//   call:             count + 1; fence; read the allocator pointer
//   reconfiguration:  take the pointer away; fence; read every count (OnOtherThreads)
// Where the asymmetric fence is available (platform/asymmetric_fence.h), the call's fence is a
// compiler barrier and its count a plain store: no read-modify-write on the hot path (the two
// that each call made were about a fifth of a C ABI malloc/free pair). OnOtherThreads then pays
// the process-wide fence. Elsewhere the count is a sequentially consistent read-modify-write.
//
// A thread that calls again during its exit, after its counter went back (a thread_local's
// destructor freeing memory), counts in one shared counter with read-modify-writes; those calls
// count as other threads' for every caller.
//
// Thread-safe; nothing here throws but std::bad_alloc (a thread's first call).
#pragma once

#include <atomic>
#include <cstdint>

#include "platform/asymmetric_fence.h"

namespace strata::capi {

// One thread's count, a cache line of its own.
struct alignas(64) InFlightCounter {
  std::atomic<std::int64_t> count{0};
  bool plain = false;  // counts with plain stores (asymmetric fence); set by the taking thread
  bool owned = false;  // a thread has it (guarded by the list's mutex)
  InFlightCounter* next = nullptr;  // the list of every counter, never shortened
};

// Counts the calling thread in flight for its lifetime (calls nest).
class InFlight {
 public:
  InFlight() : counter_(Mine()) {
    if (counter_.plain) [[likely]] {
      counter_.count.store(counter_.count.load(std::memory_order_relaxed) + 1,
                           std::memory_order_relaxed);
      platform::LightFence();
    } else {
      counter_.count.fetch_add(1, std::memory_order_seq_cst);
    }
  }
  ~InFlight() {
    if (counter_.plain) [[likely]] {
      counter_.count.store(counter_.count.load(std::memory_order_relaxed) - 1,
                           std::memory_order_release);
    } else {
      counter_.count.fetch_sub(1, std::memory_order_release);
    }
  }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

  // Calls in flight on other threads than the caller. Call it after taking the allocator pointer
  // away (see above). When the process-wide fence fails, every other thread that has a counter
  // counts as in flight: the reconfiguration is refused rather than risked.
  static std::int64_t OnOtherThreads();

 private:
  [[gnu::always_inline]] static InFlightCounter& Mine() {
    if (InFlightCounter* c = mine_) [[likely]]
      return *c;
    return Register();
  }
  // The thread's first call: a counter for it (or the shared one, during its exit).
  [[gnu::noinline]] static InFlightCounter& Register();
  // At the thread's exit: its counter goes back.
  struct Releaser;
  static void Unregister();

  InFlightCounter& counter_;

  static constinit inline thread_local InFlightCounter* mine_ = nullptr;
  static constinit inline thread_local bool exited_ = false;
};

}  // namespace strata::capi
