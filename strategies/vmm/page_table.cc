#include "strategies/vmm/page_table.h"

#include <bit>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "allocation/byte_format.h"
#include "glog/logging.h"

namespace strata::strategies::vmm {

const char* ToString(PhysState state) {
  switch (state) {
    case PhysState::kUnused:
      return "unused";
    case PhysState::kTaken:
      return "taken";
    case PhysState::kSpare:
      return "spare";
    case PhysState::kIdle:
      return "idle";
    case PhysState::kInUse:
      return "in use";
  }
  return "?";
}

PageTable::PageTable(platform::DeviceRuntime* runtime, const platform::Place& place,
                     std::size_t page_size)
    : runtime_(runtime),
      place_(place),
      page_(page_size),
      page_shift_(page_size != 0 ? std::countr_zero(page_size) : 0) {}

char* PageTable::Reserve(std::size_t bytes) {
  base_ = static_cast<char*>(runtime_->ReserveAddress(place_.device(), bytes));
  reserved_address_ = bytes;
  pages_.assign(bytes / page_, AddressPage{});
  return base_;
}

void PageTable::Teardown() {
  for (std::size_t i = 0; i < pages_.size(); ++i) {
    if (pages_[i].phys < 0) continue;
    const PhysPage& phys_page = phys_[pages_[i].phys];
    if (!phys_page.extent()) {
      runtime_->Unmap(base_ + i * page_, page_);
    } else if (phys_page.first_map == static_cast<std::int32_t>(i)) {
      runtime_->Unmap(base_ + i * page_, phys_page.pages * page_);
    }
  }
  for (const PhysPage& phys_page : phys_) {
    if (phys_page.mem.valid()) runtime_->ReleasePhysical(phys_page.mem);
  }
  if (base_ != nullptr) runtime_->FreeAddress(base_, reserved_address_);
}

void PageTable::ThrowIllegalMove(std::int32_t phys_id, PhysState from, PhysState to) const {
  throw std::logic_error(absl::StrCat("vmm_pool on ", place_.ToString(), ": physical page ",
                                      phys_id, " cannot go from ", ToString(from), " to ",
                                      ToString(to)));
}

std::int32_t PageTable::Create(std::size_t pages) {
  const std::size_t bytes = pages * page_;
  if (PassesLimit(bytes)) return -1;
  const platform::PhysicalMemory m = runtime_->CreatePhysical(place_.device(), bytes);
  if (!m.valid()) return -1;
  std::int32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<std::int32_t>(phys_.size());
    phys_.emplace_back();
  }
  phys_[slot] = PhysPage{};
  phys_[slot].mem = m;
  phys_[slot].pages = static_cast<std::uint32_t>(pages);
  Move(slot, PhysState::kTaken);
  ++num_creates_;
  physical_ += bytes;
  segment_.Increase(1);
  reserved_stat_.Increase(static_cast<std::int64_t>(bytes));
  return slot;
}

void PageTable::Release(std::int32_t phys_id) {
  Move(phys_id, PhysState::kUnused);
  PhysPage& phys_page = phys_[phys_id];
  const std::size_t bytes = phys_page.pages * page_;
  runtime_->ReleasePhysical(phys_page.mem);
  phys_page = PhysPage{};
  free_slots_.push_back(phys_id);
  ++num_releases_;
  physical_ -= bytes;
  segment_.Decrease(1);
  reserved_stat_.Decrease(static_cast<std::int64_t>(bytes));
}

void PageTable::MapAt(std::size_t page, std::int32_t phys_id) {
  PhysPage& phys_page = phys_[phys_id];
  runtime_->Map(base_ + page * page_, page_, phys_page.mem, 0, place_.device());
  AddressPage& p = pages_[page];
  p.phys = phys_id;
  p.next_alias = phys_page.first_map;
  phys_page.first_map = static_cast<std::int32_t>(page);
  ++phys_page.maps;
  ++num_maps_;
  mapped_ += page_;
}

void PageTable::Unmap(std::size_t page) {
  AddressPage& p = pages_[page];
  PhysPage& phys_page = phys_[p.phys];
  runtime_->Unmap(base_ + page * page_, page_);
  std::int32_t* link = &phys_page.first_map;
  while (*link != static_cast<std::int32_t>(page)) link = &pages_[*link].next_alias;
  *link = p.next_alias;
  p.next_alias = -1;
  p.phys = -1;
  p.use.Clear();  // no work through this address any more
  --phys_page.maps;
  ++num_unmaps_;
  mapped_ -= page_;
}

void PageTable::UnmapAll(std::int32_t phys_id) {
  while (phys_[phys_id].first_map >= 0) Unmap(static_cast<std::size_t>(phys_[phys_id].first_map));
}

std::size_t PageTable::MapExtents(std::size_t first, std::size_t last, std::size_t max_pages) {
  std::size_t mapped = 0;
  for (std::size_t i = first; i <= last;) {
    if (pages_[i].phys >= 0) {
      ++i;
      continue;
    }
    std::size_t end = i;  // the run [i, end) of unmapped pages, at most max_pages
    while (end <= last && pages_[end].phys < 0 && end - i < max_pages) ++end;
    const std::size_t n = end - i;
    if (n < 2) {
      i = end;
      continue;
    }
    const std::int32_t phys_id = Create(n);
    if (phys_id < 0) return mapped;  // page by page from here: borrowing and failing live there
    PhysPage& phys_page = phys_[phys_id];
    try {
      runtime_->Map(base_ + i * page_, n * page_, phys_page.mem, 0, place_.device());
    } catch (...) {
      Release(phys_id);
      throw;
    }
    for (std::size_t j = i; j < end; ++j) pages_[j].phys = phys_id;
    phys_page.first_map = static_cast<std::int32_t>(i);
    phys_page.maps = 1;
    phys_page.live_pages =
        static_cast<std::uint32_t>(n);  // the caller counted a block on every page
    Move(phys_id, PhysState::kInUse);
    ++num_maps_;
    mapped_ += n * page_;
    mapped += n;
    i = end;
  }
  VLOG(2) << "vmm_pool on " << place_ << ": " << allocation::FormatBytes(physical_) << " physical; "
          << mapped << " page(s) mapped as extents";
  return mapped;
}

void PageTable::UnmapExtent(std::int32_t phys_id) {
  PhysPage& phys_page = phys_[phys_id];
  const auto start = static_cast<std::size_t>(phys_page.first_map);
  runtime_->Unmap(base_ + start * page_, phys_page.pages * page_);
  for (std::size_t j = start; j < start + phys_page.pages; ++j) {
    pages_[j].phys = -1;
    pages_[j].use.Clear();
  }
  phys_page.first_map = -1;
  phys_page.maps = 0;
  ++num_unmaps_;
  mapped_ -= phys_page.pages * page_;
}

bool PageTable::MappedBelow(const PhysPage& phys_page, std::size_t first, std::size_t i) const {
  for (std::int32_t j = phys_page.first_map; j >= 0; j = pages_[j].next_alias) {
    if (static_cast<std::size_t>(j) >= first && static_cast<std::size_t>(j) < i) return true;
  }
  return false;
}

void PageTable::AddSpare(std::int32_t phys_id) {
  Move(phys_id, PhysState::kSpare);
  spare_.push_back(phys_id);
}

std::int32_t PageTable::TakeSpare() {
  const std::int32_t phys_id = spare_.back();
  spare_.pop_back();
  Move(phys_id, PhysState::kTaken);
  return phys_id;
}

void PageTable::ReleaseSpares() {
  for (std::int32_t phys_id : spare_) Release(phys_id);
  spare_.clear();
}

void PageTable::CollectStats(allocation::MemoryStats* stats) const {
  for (int pool : {allocation::kAggregate, allocation::kLargePool}) {
    stats->segment[pool].Merge(segment_);
    stats->reserved_bytes[pool].Merge(reserved_stat_);
  }
  stats->num_device_alloc += num_creates_;
  stats->num_device_free += num_releases_;
  stats->num_device_map += num_maps_;
  stats->num_device_unmap += num_unmaps_;
}

void PageTable::ResetPeakStats() {
  segment_.ResetPeak();
  reserved_stat_.ResetPeak();
}

void PageTable::ResetAccumulatedStats() {
  segment_.ResetAccumulated();
  reserved_stat_.ResetAccumulated();
}

}  // namespace strata::strategies::vmm
