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
  for (std::int32_t phys_id = pages_->idle_head(); phys_id >= 0 && got < count;) {
    PhysPage& phys_page = pages_->phys(phys_id);
    const std::int32_t next = phys_page.idle_next;
    // Pages last freed on `stream` serve it at once (stream order); they keep their record,
    // so that another stream or an unmap still waits for that work.
    const bool same_stream =
        phys_page.use.epoch != 0 && !phys_page.use.mixed && phys_page.use.stream == stream;
    if (!phys_page.extent() && (same_stream || clock_->Done(phys_page.use, &scan))) {
      if (!same_stream) phys_page.use.Clear();  // its work is complete: nothing to order after
      pages_->Move(phys_id, PhysState::kTaken);
      out->push_back(phys_id);
      ++got;
    }
    phys_id = next;
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
  for (std::int32_t phys_id = pages_->idle_head(); phys_id >= 0 && out->size() - first < count;) {
    PhysPage& phys_page = pages_->phys(phys_id);
    const std::int32_t next = phys_page.idle_next;
    if (phys_page.extent()) {  // extents are never borrowed
      phys_id = next;
      continue;
    }
    std::size_t k = 0;
    if (!phys_page.use.mixed) {
      while (k < num_after && after[k].first != phys_page.use.stream) ++k;
      if (k == after.size()) {  // more streams than one batch of waits: leave it
        phys_id = next;
        continue;
      }
      if (k == num_after) after[num_after++] = {phys_page.use.stream, 0};
      after[k].second = std::max(after[k].second, phys_page.use.epoch);
    }
    all_streams = all_streams || phys_page.use.mixed;
    pages_->Move(phys_id, PhysState::kTaken);
    out->push_back(phys_id);
    phys_id = next;
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
  for (std::int32_t phys_id = pages_->idle_head(); phys_id >= 0 && got < count;) {
    PhysPage& phys_page = pages_->phys(phys_id);
    const std::int32_t next = phys_page.idle_next;
    if (clock_->Done(phys_page.use, &scan)) {
      if (phys_page.extent()) {
        pages_->UnmapExtent(phys_id);
        pages_->Release(phys_id);
      } else {
        pages_->UnmapAll(phys_id);
        pages_->AddSpare(phys_id);
      }
      ++got;
    }
    phys_id = next;
  }
  if (got > 0) VLOG(2) << "vmm_pool on " << place_ << ": unmapped " << got << " idle page(s)";
  return got;
}

std::size_t IdlePages::DissolveExtents(std::size_t pages) {
  std::size_t got = 0;
  StreamClock::Scan scan;
  for (std::int32_t phys_id = pages_->idle_head(); phys_id >= 0 && got < pages;) {
    PhysPage& phys_page = pages_->phys(phys_id);
    const std::int32_t next = phys_page.idle_next;
    if (phys_page.extent() && clock_->Done(phys_page.use, &scan)) {
      got += phys_page.pages;
      pages_->UnmapExtent(phys_id);
      pages_->Release(phys_id);
    }
    phys_id = next;
  }
  if (got > 0) VLOG(2) << "vmm_pool on " << place_ << ": gave back " << got << " extent page(s)";
  return got;
}

}  // namespace strata::strategies::vmm
