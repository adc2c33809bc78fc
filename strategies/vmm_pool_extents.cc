// VirtualMemoryPool, extents: physical allocations of several pages, made at growth before the
// first free and mapped in one call at one address; given back whole when idle and done.
#include <cstddef>
#include <cstdint>

#include "glog/logging.h"
#include "reporting/byte_format.h"
#include "strategies/vmm_pool.h"
#include "strategies/vmm_pool_internal.h"

namespace strata::strategies {

using allocation::FormatBytes;
using platform::Stream;

std::size_t VirtualMemoryPool::MapExtents(std::size_t first, std::size_t last) {
  std::size_t mapped = 0;
  for (std::size_t i = first; i <= last;) {
    if (pages_[i].phys >= 0) {
      ++i;
      continue;
    }
    std::size_t end = i;  // the run [i, end) of unmapped pages, at most max_extent_pages
    while (end <= last && pages_[end].phys < 0 && end - i < options_.max_extent_pages) ++end;
    const std::size_t n = end - i;
    if (n < 2) {
      i = end;
      continue;
    }
    const std::int32_t y = CreatePhys(n);
    if (y < 0) return mapped;  // page by page from here: borrowing and failing live there
    PhysPage& x = phys_[y];
    try {
      runtime_->Map(base_ + i * page_, n * page_, x.mem, 0, place_.device());
    } catch (...) {
      ReleasePhys(y);
      throw;
    }
    for (std::size_t j = i; j < end; ++j) pages_[j].phys = y;
    x.first_map = static_cast<std::int32_t>(i);
    x.maps = 1;
    x.live_pages = static_cast<std::uint32_t>(n);  // AddLive counted the block on every page
    ++num_maps_;
    mapped_ += n * page_;
    mapped += n;
    i = end;
  }
  VLOG(2) << "vmm_pool on " << place_ << ": " << FormatBytes(physical_) << " physical; " << mapped
          << " page(s) mapped as extents";
  return mapped;
}

void VirtualMemoryPool::UnmapExtent(std::int32_t y) {
  PhysPage& x = phys_[y];
  const auto start = static_cast<std::size_t>(x.first_map);
  runtime_->Unmap(base_ + start * page_, x.pages * page_);
  for (std::size_t j = start; j < start + x.pages; ++j) {
    Page& p = pages_[j];
    p.phys = -1;
    p.stream = Stream{};
    p.epoch = 0;
    p.mixed = false;
  }
  x.first_map = -1;
  x.maps = 0;
  ++num_unmaps_;
  mapped_ -= x.pages * page_;
}

std::size_t VirtualMemoryPool::DissolveExtents(std::size_t pages) {
  std::size_t got = 0;
  ReclaimScan scan;
  for (std::int32_t y = idle_head_; y >= 0 && got < pages;) {
    PhysPage& x = phys_[y];
    const std::int32_t next = x.idle_next;
    if (x.pages > 1 && PhysDone(x, &scan)) {
      got += x.pages;
      UnlinkIdle(y);
      UnmapExtent(y);
      ReleasePhys(y);
    }
    y = next;
  }
  if (got > 0) VLOG(2) << "vmm_pool on " << place_ << ": gave back " << got << " extent page(s)";
  return got;
}

}  // namespace strata::strategies
