// IdlePages: the rules by which the virtual-memory pool takes idle physical pages back, over its
// PageTable and StreamClock: borrowing them for another range (stitching), unmapping them into
// spares, and giving idle extents back. An idle page may go once the work through it is done
// (a query), or, for its own last stream, at once (stream order); borrowing may also take pages
// of pending work on other streams, with a device-side wait per such stream.
//
// Owns no state of its own.
//
// Contract: not thread-safe (the pool's lock). Never waits on the host. Throws
// platform::RuntimeError from the runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "platform/place.h"
#include "platform/stream.h"
#include "strategies/vmm/page_table.h"
#include "strategies/vmm/stream_clock.h"

namespace strata::strategies::vmm {

class IdlePages {
 public:
  IdlePages(const platform::Place& place, PageTable* pages, StreamClock* clock)
      : place_(place), pages_(pages), clock_(clock) {}

  // Takes up to `count` idle one-page physical pages off the idle list (kTaken), mappings kept,
  // into `out`: those whose work is done and those last freed on `stream`, the longest idle
  // first; then, if still short, those of pending work on other streams, `stream` made to wait
  // for that work on the device. Returns how many it took.
  std::size_t Borrow(std::size_t count, platform::Stream stream, std::vector<std::int32_t>* out);
  // Unmaps every mapping of up to `count` idle physical pages whose work is done, into the spare
  // stack (extents are given back to the device); fences the others. Returns how many went.
  std::size_t Reclaim(std::size_t count);
  // Unmaps and gives back idle extents whose work is done, up to `pages` pages or more (the
  // longest idle first); returns the pages given back.
  std::size_t DissolveExtents(std::size_t pages);

 private:
  // Walks the idle list, the longest idle first, until `take` got `want`: take(phys_id, page)
  // returns what it got from a page (0: passed over); the page may leave the list meanwhile.
  template <typename Take>
  std::size_t WalkIdle(std::size_t want, Take&& take) {
    std::size_t got = 0;
    for (std::int32_t phys_id = pages_->idle_head(); phys_id >= 0 && got < want;) {
      PhysPage& phys_page = pages_->phys(phys_id);
      const std::int32_t next = phys_page.idle_next;
      got += take(phys_id, phys_page);
      phys_id = next;
    }
    return got;
  }
  std::size_t BorrowPending(std::size_t count, platform::Stream stream,
                            std::vector<std::int32_t>* out);

  const platform::Place place_;
  PageTable* const pages_;
  StreamClock* const clock_;
};

}  // namespace strata::strategies::vmm
