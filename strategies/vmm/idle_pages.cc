#include "strategies/vmm/idle_pages.h"

#include <algorithm>
#include <array>
#include <utility>

#include "glog/logging.h"

namespace strata::strategies::vmm {

using platform::Stream;

std::size_t IdlePages::Borrow(std::size_t count, Stream stream, std::vector<std::int32_t>* out) {
  StreamClock::Scan scan;
  // The longest idle first: in a repeating workload, the pages most recently freed are the
  // likeliest to be needed again where they are.
  std::size_t got = WalkIdle(count, [&](std::int32_t phys_id, PhysPage& phys_page) -> std::size_t {
    // Pages last freed on `stream` serve it at once (stream order); they keep their record,
    // so that another stream or an unmap still waits for that work.
    const bool same_stream =
        phys_page.use.epoch != 0 && !phys_page.use.mixed && phys_page.use.stream == stream;
    if (phys_page.extent() || !(same_stream || clock_->Done(phys_page.use, &scan))) return 0;
    if (!same_stream) phys_page.use.Clear();  // its work is complete: nothing to order after
    pages_->Move(phys_id, PhysState::kTaken);
    out->push_back(phys_id);
    return 1;
  });
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
  WalkIdle(count, [&](std::int32_t phys_id, PhysPage& phys_page) -> std::size_t {
    if (phys_page.extent()) return 0;  // extents are never borrowed
    std::size_t k = 0;
    if (!phys_page.use.mixed) {
      while (k < num_after && after[k].first != phys_page.use.stream) ++k;
      if (k == after.size()) return 0;  // more streams than one batch of waits: leave it
      if (k == num_after) after[num_after++] = {phys_page.use.stream, 0};
      after[k].second = std::max(after[k].second, phys_page.use.epoch);
    }
    all_streams = all_streams || phys_page.use.mixed;
    pages_->Move(phys_id, PhysState::kTaken);
    out->push_back(phys_id);
    return 1;
  });
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
  StreamClock::Scan scan;
  const std::size_t got =
      WalkIdle(count, [&](std::int32_t phys_id, PhysPage& phys_page) -> std::size_t {
        if (!clock_->Done(phys_page.use, &scan)) return 0;
        if (phys_page.extent()) {
          pages_->UnmapExtent(phys_id);
          pages_->Release(phys_id);
        } else {
          pages_->UnmapAll(phys_id);
          pages_->AddSpare(phys_id);
        }
        return 1;
      });
  if (got > 0) VLOG(2) << "vmm_pool on " << place_ << ": unmapped " << got << " idle page(s)";
  return got;
}

std::size_t IdlePages::DissolveExtents(std::size_t pages) {
  StreamClock::Scan scan;
  const std::size_t got =
      WalkIdle(pages, [&](std::int32_t phys_id, PhysPage& phys_page) -> std::size_t {
        if (!phys_page.extent() || !clock_->Done(phys_page.use, &scan)) return 0;
        const std::size_t n = phys_page.pages;
        pages_->UnmapExtent(phys_id);
        pages_->Release(phys_id);
        return n;
      });
  if (got > 0) VLOG(2) << "vmm_pool on " << place_ << ": gave back " << got << " extent page(s)";
  return got;
}

}  // namespace strata::strategies::vmm
