// The viewer's snapshot: its schema check, loading, and the segment map's data
// (tools/viewer_data.h).
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "allocation/byte_format.h"
#include "tools/viewer_data.h"
#include "tools/viewer_page.h"

namespace strata::tools {
namespace {

using allocation::FormatBytes;
using Json = nlohmann::json;

constexpr const char* kStates[] = {"allocated", "free", "pending_events", "named_cache",
                                   "graph_pool"};
constexpr std::size_t kNumStates = std::size(kStates);

[[noreturn]] void SchemaError(const std::string& pointer, const std::string& what) {
  throw std::invalid_argument(
      absl::StrCat("snapshot: ", pointer.empty() ? "the top level" : pointer, " ", what));
}

std::uint64_t GetUint(const Json& object, const std::string& pointer, const char* key,
                      bool required) {
  auto it = object.find(key);
  if (it == object.end()) {
    if (required) SchemaError(pointer, absl::StrCat("has no \"", key, "\""));
    return 0;
  }
  if (!it->is_number_unsigned()) {
    SchemaError(absl::StrCat(pointer, "/", key), "must be a non-negative integer");
  }
  return it->get<std::uint64_t>();
}

std::string GetString(const Json& object, const std::string& pointer, const char* key) {
  auto it = object.find(key);
  if (it == object.end()) return "";
  if (!it->is_string()) SchemaError(absl::StrCat(pointer, "/", key), "must be a string");
  return it->get<std::string>();
}

// The state's index in kStates; kNumStates for a state this viewer does not know (drawn as
// "other", so that a newer writer's state does not make the page unusable).
std::size_t StateIndex(const std::string& state) {
  for (std::size_t i = 0; i < kNumStates; ++i) {
    if (state == kStates[i]) return i;
  }
  return kNumStates;
}

}  // namespace

namespace viewer {

Json SegmentsData(const Json& snapshot, Figures* figures) {
  CheckSnapshot(snapshot);
  Json list = Json::array();
  std::uint64_t total = 0, max_size = 0;
  std::uint64_t by_state[kNumStates + 1] = {};
  std::size_t num_blocks = 0;
  const Json& segments = snapshot.at("segments");
  for (const Json& s : segments) {
    const std::uint64_t address = s.at("address").get<std::uint64_t>();
    const std::uint64_t size = s.at("size").get<std::uint64_t>();
    total += size;
    max_size = std::max(max_size, size);
    Json blocks = Json::array();
    if (auto it = s.find("blocks"); it != s.end()) {
      for (const Json& b : *it) {
        const std::uint64_t baddr = b.at("address").get<std::uint64_t>();
        const std::uint64_t bsize = b.at("size").get<std::uint64_t>();
        const std::size_t state = StateIndex(b.at("state").get<std::string>());
        by_state[state] += bsize;
        ++num_blocks;
        auto stream = b.find("stream");
        blocks.push_back(Json::array({baddr >= address ? baddr - address : 0, bsize,
                                      b.value("requested_size", 0ULL), state,
                                      stream == b.end() ? Json(nullptr) : *stream}));
      }
    }
    auto mapped = s.find("mapped_bytes");
    list.push_back(Json::array({Hex(address), size, s.value("pool", std::string()),
                                mapped == s.end() ? Json(nullptr) : *mapped, std::move(blocks)}));
  }
  Json states = Json::array();
  for (const char* name : kStates) states.push_back(name);
  states.push_back("other");
  Json state_bytes = Json::array();
  for (std::uint64_t b : by_state) state_bytes.push_back(b);

  const std::string place = snapshot.value("place", std::string());
  if (!place.empty()) figures->emplace_back("snapshot of", place);
  figures->emplace_back("segments", absl::StrCat(segments.size(), " (", num_blocks, " blocks)"));
  figures->emplace_back("reserved (snapshot)", FormatBytes(total));
  figures->emplace_back("allocated (snapshot)", FormatBytes(by_state[0]));
  if (auto stats = snapshot.find("stats"); stats != snapshot.end() && stats->is_object()) {
    for (const char* key : {"allocated_bytes.all.peak", "reserved_bytes.all.peak"}) {
      if (auto it = stats->find(key); it != stats->end() && it->is_number_unsigned()) {
        figures->emplace_back(key, FormatBytes(it->get<std::uint64_t>()));
      }
    }
    for (const char* key : {"num_alloc_retries", "num_ooms"}) {
      if (auto it = stats->find(key); it != stats->end() && it->is_number_unsigned()) {
        figures->emplace_back(key, absl::StrCat(it->get<std::uint64_t>()));
      }
    }
  }
  return Json{{"place", place},
              {"total", total},
              {"max_size", max_size},
              {"states", states},
              {"state_bytes", state_bytes},
              {"list", std::move(list)}};
}

}  // namespace viewer

void CheckSnapshot(const Json& snapshot) {
  if (!snapshot.is_object()) SchemaError("", "must be a JSON object");
  GetString(snapshot, "", "place");
  auto segments = snapshot.find("segments");
  if (segments == snapshot.end()) SchemaError("", "has no \"segments\"");
  if (!segments->is_array()) SchemaError("/segments", "must be an array");
  for (std::size_t i = 0; i < segments->size(); ++i) {
    const Json& s = (*segments)[i];
    const std::string sp = absl::StrCat("/segments/", i);
    if (!s.is_object()) SchemaError(sp, "must be an object");
    GetUint(s, sp, "address", true);
    GetUint(s, sp, "size", true);
    GetUint(s, sp, "mapped_bytes", false);
    GetString(s, sp, "pool");
    auto blocks = s.find("blocks");
    if (blocks == s.end()) continue;
    if (!blocks->is_array()) SchemaError(sp + "/blocks", "must be an array");
    for (std::size_t j = 0; j < blocks->size(); ++j) {
      const Json& b = (*blocks)[j];
      const std::string bp = absl::StrCat(sp, "/blocks/", j);
      if (!b.is_object()) SchemaError(bp, "must be an object");
      GetUint(b, bp, "address", true);
      GetUint(b, bp, "size", true);
      GetUint(b, bp, "requested_size", false);
      GetUint(b, bp, "stream", false);
      if (!b.contains("state")) SchemaError(bp, "has no \"state\"");
      GetString(b, bp, "state");
    }
  }
}

Json LoadSnapshot(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  Json snapshot;
  try {
    snapshot = Json::parse(text.str());
  } catch (const Json::parse_error& e) {
    // e.what(): "[json.exception.parse_error.101] parse error at line L, column C: ..."
    const std::string_view what = e.what();
    const std::size_t at = what.find("at line");
    throw std::runtime_error(
        absl::StrCat(path, ": malformed JSON ",
                     std::string(at == std::string_view::npos ? what : what.substr(at))));
  }
  try {
    CheckSnapshot(snapshot);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(absl::StrCat(path, ": ", e.what()));
  }
  return snapshot;
}

}  // namespace strata::tools
