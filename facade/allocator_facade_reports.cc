#include "facade/allocator_facade.h"

#include <string>
#include <vector>

#include "facade/named_cache.h"
#include "facade/place_state.h"
#include "reporting/memory_summary.h"
#include "reporting/snapshot_json.h"

namespace strata::facade {

using allocation::Allocation;
using platform::Place;

allocation::MemoryStats AllocatorFacade::GetMemoryStats(const Place& place) {
  return PlaceStats(StateOf(place));
}

allocation::MemoryStats AllocatorFacade::PlaceStats(PlaceState& state) {
  allocation::MemoryStats stats;
  // Chains reach the shared raw layer themselves when no pool stands between (system
  // allocator); pools report their own segments and do not forward to the raw layer, so a
  // segment is never counted twice.
  ForEachChain(state, [&](Chain& c) { c.Top().CollectStats(&stats); });
  if (state.graphs != nullptr) state.graphs->CollectStats(&stats);
  // A pool shared by the chains (virtual memory) reports once, through the raw layer.
  if (ChainBuilder::ReportsDeviceFigures(*state.raw)) {
    state.raw->CollectStats(&stats);
  } else {
    ChainBuilder::ExactReservedPeak(*state.raw, &stats);
  }
  stats.max_split_size = static_cast<std::int64_t>(builder_.flags().max_split_size_mb << 20);
  if (runtime() != nullptr)
    stats.num_host_waits = static_cast<std::int64_t>(runtime()->SyncCount());
  return stats;
}

std::string AllocatorFacade::MemorySummary(const Place& place, bool abbreviated) {
  return reporting::FormatMemorySummary(GetMemoryStats(place), place, abbreviated);
}

std::string AllocatorFacade::MemoryStatsJson(const Place& place) {
  return reporting::MemoryStatsToJson(GetMemoryStats(place));
}

std::string AllocatorFacade::Snapshot(const Place& place) {
  PlaceState& state = StateOf(place);
  allocation::MemorySnapshot snapshot;
  const bool shared = !place.is_cuda() || !builder_.per_stream();
  ForEachChain(state, [&](Chain& c) {
    snapshot.set_pool(place.is_cuda()
                          ? (shared ? std::string("device") : absl::StrCat("stream ", c.number))
                          : std::string("host"));
    c.Top().Snapshot(&snapshot);
  });
  if (ChainBuilder::ReportsDeviceFigures(*state.raw)) {  // the pool shared by every stream
    snapshot.set_pool("device");
    state.raw->Snapshot(&snapshot);
  }
  if (state.graphs != nullptr) state.graphs->Snapshot(&snapshot);
  {
    absl::ReaderMutexLock lock(&state.mu);
    for (const auto& [name, cache] : state.caches) cache->MarkBlocks(&snapshot);
  }
  return reporting::SnapshotToJson(snapshot, place, PlaceStats(state));
}

void AllocatorFacade::ResetPeakStats(const Place& place) {
  PlaceState& state = StateOf(place);
  ForEachChain(state, [&](Chain& c) { c.Top().ResetPeakStats(); });
  // Also the raw allocator's count, which the exact reserved peak comes from (ExactReservedPeak).
  state.raw->ResetPeakStats();
}

void AllocatorFacade::ResetAccumulatedStats(const Place& place) {
  PlaceState& state = StateOf(place);
  ForEachChain(state, [&](Chain& c) { c.Top().ResetAccumulatedStats(); });
  if (ChainBuilder::ReportsDeviceFigures(*state.raw)) state.raw->ResetAccumulatedStats();
}

void AllocatorFacade::RecordHistory(const Place& place, history::HistoryOptions options) {
  StateOf(place).history->Start(std::move(options));
}

std::string AllocatorFacade::StopHistory(const Place& place) {
  return StateOf(place).history->Stop();
}

void AllocatorFacade::StopHistory(const Place& place, const std::string& path) {
  StateOf(place).history->StopTo(path);
}

bool AllocatorFacade::IsRecordingHistory(const Place& place) {
  return StateOf(place).history->recording();
}

std::vector<std::string> AllocatorFacade::ChainOf(const Allocation& allocation) {
  std::vector<std::string> names;
  names.reserve(allocation.num_decorators());
  for (int i = 0; i < allocation.num_decorators(); ++i) {
    names.emplace_back(allocation.decorator(i)->Name());
  }
  return names;
}

}  // namespace strata::facade
