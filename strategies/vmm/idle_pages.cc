#include "strategies/vmm/idle_pages.h"

#include <algorithm>
#include <array>
#include <utility>

#include "glog/logging.h"

namespace strata::strategies::vmm {

using platform::Stream;

std::size_t IdlePages::Borrow(std::size_t count, Stream stream, std::vector<std::int32_t>* out) {
  std::size_t got = 0;
  StreamClock::Scan scan;
  // The longest idle first: in a repeating workload, the pages most recently freed are the
  // likeliest to be needed again where they are.
  for (std::int32_t y = pages_->idle_head(); y >= 0 && got < count;) {
    PhysPage& x = pages_->phys(y);
    const std::int32_t next = x.idle_next;
    // Pages last freed on `stream` serve it at once (stream order); they keep their record,
    // so that another stream or an unmap still waits for that work.
    const bool same_stream = x.use.epoch != 0 && !x.use.mixed && x.use.stream == stream;
    if (!x.extent() && (same_stream || clock_->Done(x.use, &scan))) {
      if (!same_stream) x.use.Clear();  // its work is complete: nothing to order after
      pages_->Move(y, PhysState::kTaken);
      out->push_back(y);
      ++got;
    }
    y = next;
  }
  if (got < count) got += BorrowPending(count - got, stream, out);
  if (got > 0) VLOG(2) << "vmm_pool on " << place_ << ": stitching " << got << " idle page(s)";
  return got;
}

std::size_t IdlePages::BorrowPending(std::size_t count, Stream stream,
                                     std::vector<std::int32_t>* out) {
  // One device-side wait per stream, for its latest free among the pages taken; after every
  // other stream's frees so far when a page freed on several streams is taken.
  std::array<std::pair<Stream, std::uint64_t>, 8> after{};
  std::size_t num_after = 0;
  bool all_streams = false;
  const std::size_t first = out->size();
  for (std::int32_t y = pages_->idle_head(); y >= 0 && out->size() - first < count;) {
    PhysPage& x = pages_->phys(y);
    const std::int32_t next = x.idle_next;
    if (x.extent()) {  // extents are never borrowed
      y = next;
      continue;
    }
    std::size_t k = 0;
    if (!x.use.mixed) {
      while (k < num_after && after[k].first != x.use.stream) ++k;
      if (k == after.size()) {  // more streams than one batch of waits: leave it
        y = next;
        continue;
      }
      if (k == num_after) after[num_after++] = {x.use.stream, 0};
      after[k].second = std::max(after[k].second, x.use.epoch);
    }
    all_streams = all_streams || x.use.mixed;
    pages_->Move(y, PhysState::kTaken);
    out->push_back(y);
    y = next;
  }
  const std::size_t got = out->size() - first;
  if (got == 0) return 0;
  if (all_streams) {
    clock_->OrderAfterAllStreams(stream);
  } else {
    for (std::size_t k = 0; k < num_after; ++k) {
      clock_->OrderAfter(after[k].first, after[k].second, stream);
    }
  }
  // The pages' earlier work is now ordered before `stream`'s work from here on: a fence on
  // `stream` recorded after this point covers it. A new free number marks that point (a fence
  // recorded before it cannot cover it), so that the pages, whether mapped now or put back,
  // wait for no more than that.
  const std::uint64_t mark = clock_->Mark(stream);
  for (std::size_t i = first; i < out->size(); ++i) {
    LastUse& use = pages_->phys((*out)[i]).use;
    use.stream = stream;
    use.epoch = mark;
    use.mixed = false;
  }
  VLOG(6) << "vmm_pool: " << got << " idle page(s) of pending work taken for " << stream
          << " with device-side waits";
  return got;
}

std::size_t IdlePages::Reclaim(std::size_t count) {
  std::size_t got = 0;
  StreamClock::Scan scan;
  for (std::int32_t y = pages_->idle_head(); y >= 0 && got < count;) {
    PhysPage& x = pages_->phys(y);
    const std::int32_t next = x.idle_next;
    if (clock_->Done(x.use, &scan)) {
      if (x.extent()) {
        pages_->UnmapExtent(y);
        pages_->Release(y);
      } else {
        pages_->UnmapAll(y);
        pages_->AddSpare(y);
      }
      ++got;
    }
    y = next;
  }
  if (got > 0) VLOG(2) << "vmm_pool on " << place_ << ": unmapped " << got << " idle page(s)";
  return got;
}

std::size_t IdlePages::DissolveExtents(std::size_t pages) {
  std::size_t got = 0;
  StreamClock::Scan scan;
  for (std::int32_t y = pages_->idle_head(); y >= 0 && got < pages;) {
    PhysPage& x = pages_->phys(y);
    const std::int32_t next = x.idle_next;
    if (x.extent() && clock_->Done(x.use, &scan)) {
      got += x.pages;
      pages_->UnmapExtent(y);
      pages_->Release(y);
    }
    y = next;
  }
  if (got > 0) VLOG(2) << "vmm_pool on " << place_ << ": gave back " << got << " extent page(s)";
  return got;
}

}  // namespace strata::strategies::vmm
