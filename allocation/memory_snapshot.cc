#include "allocation/memory_snapshot.h"

#include <algorithm>
#include <utility>

namespace strata::allocation {

const char* BlockStateName(BlockState state) {
  switch (state) {
    case BlockState::kAllocated:
      return "allocated";
    case BlockState::kFree:
      return "free";
    case BlockState::kPendingEvents:
      return "pending_events";
    case BlockState::kNamedCache:
      return "named_cache";
    case BlockState::kThreadCache:
      return "thread_cache";
  }
  return "unknown";
}

void MemorySnapshot::AddSegment(SnapshotSegment segment) {
  if (segment.pool.empty()) segment.pool = pool_;
  segments_.push_back(std::move(segment));
}

void MemorySnapshot::Mark(const void* address, BlockState state) {
  marks_[reinterpret_cast<std::uintptr_t>(address)] = state;
}

std::vector<SnapshotSegment> MemorySnapshot::Segments() const {
  std::vector<SnapshotSegment> out = segments_;
  std::sort(out.begin(), out.end(), [](const SnapshotSegment& a, const SnapshotSegment& b) {
    return a.address < b.address;
  });
  for (SnapshotSegment& s : out) {
    for (SnapshotBlock& b : s.blocks) {
      if (b.state != BlockState::kAllocated) continue;
      if (auto it = marks_.find(b.address); it != marks_.end()) b.state = it->second;
    }
  }
  return out;
}

}  // namespace strata::allocation
