#include "capi/in_flight.h"

#include <atomic>
#include <cstdint>

namespace strata::capi {

std::int64_t InFlight::OnOtherThreads() {
  std::int64_t n = 0;
  for (const InFlightCounter& s : slots_) n += s.count.load(std::memory_order_seq_cst);
  return n - depth_;
}

}  // namespace strata::capi
