// C ABI calls in flight, so that a reconfiguration can refuse while another thread is inside a
// call: that call's allocation would land in the retired allocator. Not installed; for capi/
// only.
//
// Counted per thread in padded slots (no shared cache line on the hot path). Thread-safe;
// nothing here throws.
#pragma once

#include <atomic>
#include <cstdint>

namespace strata::capi {

// One slot of the count, a cache line of its own.
struct alignas(64) InFlightCounter {
  std::atomic<std::int64_t> count{0};
};

// Counts the calling thread in flight for its lifetime (calls nest).
class InFlight {
 public:
  InFlight() {
    Slot().fetch_add(1, std::memory_order_seq_cst);
    ++depth_;
  }
  ~InFlight() {
    --depth_;
    Slot().fetch_sub(1, std::memory_order_release);
  }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

  // Calls in flight on other threads than the caller.
  static std::int64_t OnOtherThreads();

 private:
  static constexpr int kSlots = 64;

  static std::atomic<std::int64_t>& Slot() {
    static std::atomic<int> next{0};
    thread_local const int index = next.fetch_add(1, std::memory_order_relaxed) % kSlots;
    return slots_[index].count;
  }

  inline static InFlightCounter slots_[kSlots];
  inline static thread_local std::int64_t depth_ = 0;
};

}  // namespace strata::capi
