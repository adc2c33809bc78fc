#include "reporting/snapshot_json.h"

#include "nlohmann/json.hpp"
#include "reporting/memory_summary.h"

namespace strata::reporting {

std::string SnapshotToJson(const allocation::MemorySnapshot& snapshot, const platform::Place& place,
                           const allocation::MemoryStats& stats) {
  nlohmann::ordered_json segments = nlohmann::ordered_json::array();
  for (const allocation::SnapshotSegment& s : snapshot.Segments()) {
    nlohmann::ordered_json blocks = nlohmann::ordered_json::array();
    for (const allocation::SnapshotBlock& b : s.blocks) {
      blocks.push_back({{"address", b.address},
                        {"size", b.size},
                        {"requested_size", b.requested_size},
                        {"state", allocation::BlockStateName(b.state)}});
    }
    segments.push_back({{"address", s.address},
                        {"size", s.size},
                        {"mapped_bytes", s.mapped_bytes},
                        {"pool", s.pool},
                        {"blocks", std::move(blocks)}});
  }
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["place"] = place.ToString();
  j["segments"] = std::move(segments);
  j["stats"] = nlohmann::ordered_json::parse(MemoryStatsToJson(stats));
  return j.dump();
}

}  // namespace strata::reporting
