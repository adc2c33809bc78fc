#include "tools/viewer_page.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocation/byte_format.h"
#include "tools/compare_sides.h"
#include "tools/viewer_page_assets.h"

namespace strata::tools {

namespace {

using Json = nlohmann::json;
using allocation::FormatBytes;

// Longest context text embedded: a Python stack is far shorter; this bounds a runaway one.
constexpr std::size_t kMaxContextChars = 4000;

std::string Hex(std::uint64_t v) { return absl::StrFormat("0x%x", v); }

// ---- the snapshot ------------------------------------------------------------------------------

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

Json SegmentsData(const Json& snapshot, std::vector<std::pair<std::string, std::string>>* figures) {
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

// ---- the timeline ------------------------------------------------------------------------------

// Buckets of consecutive events: bucket b covers events [b * width, (b + 1) * width).
struct Buckets {
  std::uint64_t width = 1;
  std::size_t count = 0;
};

Buckets MakeBuckets(std::uint64_t num_events, std::size_t max_points) {
  Buckets b;
  max_points = std::max<std::size_t>(max_points, 2);
  b.width = std::max<std::uint64_t>(1, (num_events + max_points - 1) / max_points);
  b.count = static_cast<std::size_t>((num_events + b.width - 1) / b.width);
  return b;
}

Json SeriesFromOptions(const std::vector<ViewerSample>& series, std::size_t max_points) {
  const std::size_t group =
      std::max<std::size_t>(1, (series.size() + std::max<std::size_t>(max_points, 2) - 1) /
                                   std::max<std::size_t>(max_points, 2));
  Json x = Json::array(), requested = Json::array(), allocated = Json::array(),
       reserved = Json::array();
  std::uint64_t last = 0;
  for (std::size_t i = 0; i < series.size(); i += group) {
    ViewerSample m = series[i];
    for (std::size_t j = i; j < std::min(series.size(), i + group); ++j) {
      const ViewerSample& s = series[j];
      if (s.first_event < last || s.last_event < s.first_event) {
        throw std::invalid_argument(absl::StrCat("viewer series: sample ", j, " (events ",
                                                 s.first_event, "..", s.last_event,
                                                 ") goes back in event order"));
      }
      last = s.last_event;
      m.requested = std::max(m.requested, s.requested);
      m.allocated = std::max(m.allocated, s.allocated);
      m.reserved = std::max(m.reserved, s.reserved);
    }
    x.push_back(m.first_event);
    requested.push_back(m.requested);
    allocated.push_back(m.allocated);
    reserved.push_back(m.reserved);
  }
  return Json{{"x", x}, {"requested", requested}, {"allocated", allocated}, {"reserved", reserved}};
}

Json TimelineData(const Trace& trace, const ViewerOptions& options,
                  std::vector<std::pair<std::string, std::string>>* figures) {
  const std::uint64_t n = trace.num_events();
  const std::size_t num_allocs = trace.num_allocations();
  const auto& events = trace.events();
  const bool timed = trace.has_attributes();
  const auto& attrs = trace.event_attributes();
  auto time_of = [&](std::uint64_t event) -> Json {
    if (!timed || event >= n || !attrs[event].has(EventAttributes::kTime)) return nullptr;
    return attrs[event].time_ns;
  };

  // Each allocation's events.
  std::vector<std::uint32_t> alloc_event(num_allocs, 0);
  std::vector<std::uint64_t> free_event(num_allocs, n);
  for (std::uint64_t i = 0; i < n; ++i) {
    const TraceEvent& e = events[i];
    if (e.is_alloc()) {
      alloc_event[e.index] = static_cast<std::uint32_t>(i);
    } else {
      free_event[e.index] = i;
    }
  }

  // The largest allocations become bands; ties go to the earlier one, for a stable page.
  std::vector<std::uint32_t> order(num_allocs);
  std::iota(order.begin(), order.end(), 0);
  const std::size_t kept = std::min(num_allocs, options.max_bands);
  auto bytes_of = [&](std::uint32_t index) { return events[alloc_event[index]].bytes; };
  std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(kept), order.end(),
                   [&](std::uint32_t a, std::uint32_t b) {
                     return bytes_of(a) != bytes_of(b) ? bytes_of(a) > bytes_of(b) : a < b;
                   });
  order.resize(kept);
  std::sort(order.begin(), order.end());  // allocation order = event order: the stacking order

  Json bands = Json::array();
  std::set<std::uint64_t> contexts_used;
  for (std::uint32_t index : order) {
    const std::uint32_t a = alloc_event[index];
    Json ctx = nullptr, addr = nullptr;
    if (timed && attrs[a].has(EventAttributes::kContext)) {
      ctx = attrs[a].context;
      contexts_used.insert(attrs[a].context);
    }
    if (timed && attrs[a].has(EventAttributes::kAddr)) addr = Hex(attrs[a].addr);
    bands.push_back(
        Json::array({a, free_event[index], bytes_of(index), events[a].stream,
                     trace.original_id(index), ctx, addr, time_of(a), time_of(free_event[index])}));
  }

  // Series, bucketed: maxima of requested (after each event) and reserved (as each event ran,
  // from the device calls: ReservedDelta). A recording that lost its oldest events may free a
  // segment it never saw allocated; the series is then lifted so it never goes below zero (those
  // segments existed before the window).
  const Buckets buckets = MakeBuckets(n, options.max_points);
  std::vector<const OtherEvent*> segs;
  for (const OtherEvent& e : trace.other_events()) {
    std::int64_t delta = 0;
    if (ReservedDelta(e, &delta)) segs.push_back(&e);
  }
  std::int64_t lowest = 0;
  {
    std::int64_t level = 0;
    for (const OtherEvent* e : segs) {
      std::int64_t delta = 0;
      ReservedDelta(*e, &delta);
      level += delta;
      lowest = std::min(lowest, level);
    }
  }
  const bool has_reserved = !segs.empty() && options.series.empty();
  Json x = Json::array(), requested = Json::array(), reserved = Json::array(),
       times = Json::array();
  std::uint64_t live = 0, peak_reserved = 0;
  std::int64_t level = -lowest;
  std::size_t next_seg = 0;
  auto apply_segs_up_to = [&](std::uint64_t position) {
    for (; next_seg < segs.size() && segs[next_seg]->position <= position; ++next_seg) {
      std::int64_t delta = 0;
      ReservedDelta(*segs[next_seg], &delta);
      level += delta;
    }
  };
  for (std::size_t b = 0; b < buckets.count; ++b) {
    const std::uint64_t first = b * buckets.width;
    const std::uint64_t end = std::min(n, first + buckets.width);
    std::uint64_t req_max = 0, res_max = 0;
    Json t = nullptr;
    for (std::uint64_t i = first; i < end; ++i) {
      apply_segs_up_to(i);
      res_max = std::max(res_max, static_cast<std::uint64_t>(level));
      const TraceEvent& e = events[i];
      live = e.is_alloc() ? live + e.bytes : live - e.bytes;
      req_max = std::max(req_max, live);
      if (t.is_null()) t = time_of(i);
    }
    if (b + 1 == buckets.count) {  // device calls after the last event
      apply_segs_up_to(std::numeric_limits<std::uint64_t>::max());
      res_max = std::max(res_max, static_cast<std::uint64_t>(level));
    }
    peak_reserved = std::max(peak_reserved, res_max);
    x.push_back(first);
    requested.push_back(req_max);
    if (has_reserved) reserved.push_back(res_max);
    times.push_back(std::move(t));
  }
  Json series = {{"x", x}, {"requested", requested}};
  if (has_reserved) series["reserved"] = reserved;
  if (timed) series["time"] = times;

  // Markers: out-of-memory errors and explicit empty-cache calls; counts of the other kinds.
  Json markers = Json::array();
  std::size_t ooms = 0, empty_caches = 0, pendings = 0;
  for (const OtherEvent& e : trace.other_events()) {
    const Json t = e.attributes.has(EventAttributes::kTime) ? Json(e.attributes.time_ns) : Json();
    if (e.kind == OtherEvent::Kind::kOom) {
      ++ooms;
      Json ctx = nullptr;
      if (e.attributes.has(EventAttributes::kContext)) {
        ctx = e.attributes.context;
        contexts_used.insert(e.attributes.context);
      }
      markers.push_back(Json::array({e.position, "oom", e.bytes, e.stream, ctx, t}));
    } else if (e.kind == OtherEvent::Kind::kEmptyCache) {
      ++empty_caches;
      markers.push_back(Json::array({e.position, "empty_cache", e.bytes, nullptr, nullptr, t}));
    } else if (e.kind == OtherEvent::Kind::kPending) {
      ++pendings;
    }
  }
  Json contexts = Json::object();
  for (std::uint64_t id : contexts_used) {
    auto it = trace.contexts().find(id);
    if (it == trace.contexts().end()) continue;
    std::string text = it->second;
    if (text.size() > kMaxContextChars) text = text.substr(0, kMaxContextChars) + "\n...";
    contexts[absl::StrCat(id)] = text;
  }
  Json references = Json::array();
  bool has_torch_reference = false;
  for (const ViewerReference& r : options.references) {
    references.push_back(Json::array({r.label, r.bytes}));
    has_torch_reference |= r.bytes == trace.header().torch_peak_reserved;
  }
  // A converted PyTorch trace knows what PyTorch reserved: worth a line unless the caller drew it.
  if (trace.header().torch_peak_reserved != 0 && !has_torch_reference) {
    references.push_back(
        Json::array({"PyTorch peak reserved", trace.header().torch_peak_reserved}));
  }

  // Header figures.
  const TraceHeader& h = trace.header();
  figures->emplace_back("workload", trace.workload());
  if (!h.place.empty()) figures->emplace_back("place", h.place);
  if (!h.gpu.empty()) figures->emplace_back("gpu", h.gpu);
  figures->emplace_back("events", absl::StrCat(n, " (", num_allocs, " allocations, ",
                                               trace.num_streams(), " stream(s))"));
  figures->emplace_back("peak requested", absl::StrCat(FormatBytes(trace.peak_requested_bytes()),
                                                       " at event ", trace.peak_event()));
  if (has_reserved) figures->emplace_back("peak reserved (seg lines)", FormatBytes(peak_reserved));
  if (h.torch_peak_reserved != 0) {
    figures->emplace_back("PyTorch peak allocated / reserved",
                          absl::StrCat(FormatBytes(h.torch_peak_allocated), " / ",
                                       FormatBytes(h.torch_peak_reserved)));
  }
  if (trace.live_at_end() != 0) {
    figures->emplace_back("live at end", absl::StrCat(trace.live_at_end(), " (",
                                                      FormatBytes(trace.live_bytes_at_end()), ")"));
  }
  if (!h.recorded_by.empty()) {
    figures->emplace_back(
        "recorded / dropped events",
        absl::StrCat(h.recorded, " / ", h.dropped,
                     h.max_entries != 0 ? absl::StrCat(" (max_entries ", h.max_entries, ")")
                                        : std::string()));
  }
  if (ooms != 0) figures->emplace_back("out-of-memory errors", absl::StrCat(ooms));
  if (empty_caches != 0) figures->emplace_back("empty_cache calls", absl::StrCat(empty_caches));
  if (pendings != 0) figures->emplace_back("deferred frees", absl::StrCat(pendings));
  if (kept < num_allocs) {
    figures->emplace_back("bands", absl::StrCat("the largest ", kept, " of ", num_allocs,
                                                " allocations; the rest in grey"));
  }

  Json out = {{"num_events", n},
              {"num_allocations", num_allocs},
              {"peak_requested", trace.peak_requested_bytes()},
              {"peak_event", trace.peak_event()},
              {"peak_reserved", has_reserved ? Json(peak_reserved) : Json()},
              {"small_count", num_allocs - kept},
              {"stream_table_size", n == 0 ? 0 : trace.stream_table_size()},
              {"bands", std::move(bands)},
              {"series", std::move(series)},
              {"markers", std::move(markers)},
              {"contexts", std::move(contexts)},
              {"references", std::move(references)}};
  if (!options.series.empty())
    out["external"] = SeriesFromOptions(options.series, options.max_points);
  return out;
}

// A timeline from a replay's series alone (no trace).
Json SeriesOnlyTimeline(const ViewerOptions& options) {
  Json references = Json::array();
  for (const ViewerReference& r : options.references) {
    references.push_back(Json::array({r.label, r.bytes}));
  }
  const std::uint64_t n = options.series.back().last_event + 1;
  return Json{{"num_events", n},
              {"num_allocations", 0},
              {"peak_requested", 0},
              {"peak_event", 0},
              {"peak_reserved", nullptr},
              {"small_count", 0},
              {"stream_table_size", 0},
              {"bands", Json::array()},
              {"series", Json{{"x", Json::array()}, {"requested", Json::array()}}},
              {"markers", Json::array()},
              {"contexts", Json::object()},
              {"references", references},
              {"external", SeriesFromOptions(options.series, options.max_points)}};
}

// "+1.50 MiB" / "-2.00 GiB": a difference of byte counts.
std::string SignedBytes(std::int64_t v) {
  const std::uint64_t magnitude =
      v < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
  return absl::StrCat(v < 0 ? "-" : "+", FormatBytes(magnitude));
}

std::string DescribeEvent(const Trace& trace, std::uint64_t event) {
  const TraceEvent& e = trace.events()[event];
  return absl::StrCat(e.is_alloc() ? "alloc of " : "free of ", FormatBytes(e.bytes), " on stream ",
                      e.stream);
}

// Two recordings of the trace's events: both curves bucketed as the timeline's series (maxima;
// for the gap, the value of largest magnitude, sign kept), the divergence, and header figures.
Json ComparisonData(const Trace& trace, const ViewerComparison& c, const ViewerOptions& options,
                    std::vector<std::pair<std::string, std::string>>* figures) {
  const std::uint64_t n = trace.num_events();
  for (const MemoryCurve* curve : {&c.a, &c.b}) {
    if (curve->reserved.size() != n) {
      throw std::invalid_argument(absl::StrCat("viewer comparison: '", curve->label, "' has ",
                                               curve->reserved.size(), " figures for ", n,
                                               " events of ", trace.name()));
    }
  }
  const Divergence d = FindDivergence(c.a, c.b, c.top);
  const std::vector<std::uint64_t> requested = RequestedAfterEachEvent(trace);
  const bool timed = trace.has_attributes();
  const auto& attrs = trace.event_attributes();
  auto time_of = [&](std::uint64_t event) -> Json {
    if (!timed || event >= n || !attrs[event].has(EventAttributes::kTime)) return nullptr;
    return attrs[event].time_ns;
  };

  const Buckets buckets = MakeBuckets(n, options.max_points);
  Json x = Json::array(), req = Json::array(), times = Json::array(), gap = Json::array();
  Json reserved[2] = {Json::array(), Json::array()};
  Json allocated[2] = {Json::array(), Json::array()};
  const MemoryCurve* sides[2] = {&c.a, &c.b};
  for (std::size_t b = 0; b < buckets.count; ++b) {
    const std::uint64_t first = b * buckets.width;
    const std::uint64_t end = std::min(n, first + buckets.width);
    std::uint64_t req_max = 0, res_max[2] = {0, 0}, alloc_max[2] = {0, 0};
    std::int64_t widest = 0;
    Json t = nullptr;
    for (std::uint64_t i = first; i < end; ++i) {
      req_max = std::max(req_max, requested[i]);
      for (int s = 0; s < 2; ++s) {
        res_max[s] = std::max(res_max[s], sides[s]->reserved[i]);
        if (!sides[s]->allocated.empty()) {
          alloc_max[s] = std::max(alloc_max[s], sides[s]->allocated[i]);
        }
      }
      if (std::abs(d.gap[i]) > std::abs(widest)) widest = d.gap[i];
      if (t.is_null()) t = time_of(i);
    }
    x.push_back(first);
    req.push_back(req_max);
    gap.push_back(widest);
    times.push_back(std::move(t));
    for (int s = 0; s < 2; ++s) {
      reserved[s].push_back(res_max[s]);
      allocated[s].push_back(alloc_max[s]);
    }
  }
  Json series = {{"x", x},
                 {"requested", req},
                 {"reserved", Json::array({reserved[0], reserved[1]})},
                 {"allocated", Json::array({c.a.allocated.empty() ? Json() : allocated[0],
                                            c.b.allocated.empty() ? Json() : allocated[1]})},
                 {"gap", gap}};
  if (timed) series["time"] = times;

  Json moments = Json::array();
  for (const DivergenceMoment& m : d.moments) {
    const TraceEvent& e = trace.events()[m.event];
    Json context = nullptr;
    if (timed && attrs[m.event].has(EventAttributes::kContext)) {
      if (auto it = trace.contexts().find(attrs[m.event].context); it != trace.contexts().end()) {
        context = it->second.substr(0, kMaxContextChars);
      }
    }
    moments.push_back(
        Json{{"event", m.event},
             {"kind", e.is_alloc() ? "alloc" : "free"},
             {"bytes", e.bytes},
             {"stream", e.stream},
             {"id", trace.original_id(e.index)},
             {"requested", requested[m.event]},
             {"reserved", Json::array({c.a.reserved[m.event], c.b.reserved[m.event]})},
             {"change", Json::array({m.change_a, m.change_b})},
             {"gap_before", m.gap_before},
             {"gap_after", m.gap_after},
             {"time", time_of(m.event)},
             {"context", context}});
  }
  Json references = Json::array();
  for (const ViewerReference& r : options.references) {
    references.push_back(Json::array({r.label, r.bytes}));
  }
  if (trace.header().torch_peak_reserved != 0) {
    references.push_back(
        Json::array({"PyTorch peak reserved", trace.header().torch_peak_reserved}));
  }

  figures->emplace_back("workload", trace.workload());
  figures->emplace_back("events", absl::StrCat(n, " (", trace.num_allocations(), " allocations, ",
                                               trace.num_streams(), " stream(s))"));
  figures->emplace_back("peak requested", absl::StrCat(FormatBytes(trace.peak_requested_bytes()),
                                                       " at event ", trace.peak_event()));
  const std::uint64_t peaks[2] = {d.peak_a, d.peak_b};
  const std::uint64_t peak_events[2] = {d.peak_a_event, d.peak_b_event};
  for (int s = 0; s < 2; ++s) {
    figures->emplace_back(
        absl::StrCat(s == 0 ? "A: " : "B: ", sides[s]->label),
        absl::StrCat("peak reserved ", FormatBytes(peaks[s]), " at event ", peak_events[s]));
  }
  if (d.peak_a != 0) {
    figures->emplace_back(
        "peak reserved B - A",
        absl::StrFormat(
            "%s (%+.1f%%)",
            SignedBytes(static_cast<std::int64_t>(d.peak_b) - static_cast<std::int64_t>(d.peak_a)),
            100.0 * (static_cast<double>(d.peak_b) / static_cast<double>(d.peak_a) - 1.0)));
  }
  figures->emplace_back("widest gap", d.widest_gap == 0
                                          ? std::string("none: the same reserved bytes throughout")
                                          : absl::StrCat(SignedBytes(d.widest_gap), " at event ",
                                                         d.widest_gap_event));
  if (!d.moments.empty()) {
    const DivergenceMoment& m = d.moments.front();
    figures->emplace_back(
        "the gap grows most at",
        absl::StrCat("event ", m.event, " (", DescribeEvent(trace, m.event), "): A ",
                     SignedBytes(m.change_a), ", B ", SignedBytes(m.change_b)));
  }
  if (trace.header().torch_peak_reserved != 0) {
    figures->emplace_back("PyTorch peak allocated / reserved",
                          absl::StrCat(FormatBytes(trace.header().torch_peak_allocated), " / ",
                                       FormatBytes(trace.header().torch_peak_reserved)));
  }

  return Json{{"labels", Json::array({c.a.label, c.b.label})},
              {"num_events", n},
              {"peak_requested", trace.peak_requested_bytes()},
              {"peaks", Json::array({Json::array({d.peak_a, d.peak_a_event}),
                                     Json::array({d.peak_b, d.peak_b_event})})},
              {"widest", Json::array({d.widest_gap, d.widest_gap_event})},
              {"series", std::move(series)},
              {"moments", std::move(moments)},
              {"references", std::move(references)}};
}

// The JSON as it sits in a <script> element: '<' only occurs inside strings, where \u003c is
// the same character, so "</script>" or "<!--" in a context text cannot end the element.
std::string ScriptSafeJson(const Json& data) {
  const std::string dumped = data.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::string out;
  out.reserve(dumped.size());
  for (char c : dumped) {
    if (c == '<') {
      out.append("\\u003c");
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out.append("&amp;");
        break;
      case '<':
        out.append("&lt;");
        break;
      case '>':
        out.append("&gt;");
        break;
      case '"':
        out.append("&quot;");
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

}  // namespace

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

Json ViewerData(const Trace* trace, const Json* snapshot, const ViewerOptions& options) {
  std::vector<std::pair<std::string, std::string>> figures;
  Json timeline = nullptr, segments = nullptr, comparison = nullptr;
  if (options.comparison && trace == nullptr) {
    throw std::invalid_argument("viewer comparison: the recordings' events need a trace");
  }
  if (options.comparison) {
    comparison = ComparisonData(*trace, *options.comparison, options, &figures);
  } else if (trace != nullptr) {
    timeline = TimelineData(*trace, options, &figures);
  } else if (!options.series.empty()) {
    timeline = SeriesOnlyTimeline(options);
  }
  if (snapshot != nullptr) segments = SegmentsData(*snapshot, &figures);
  for (const auto& f : options.figures) figures.push_back(f);
  std::string title = options.title;
  if (title.empty() && options.comparison) {
    title = absl::StrCat(trace->workload(), ": ", options.comparison->a.label, " vs ",
                         options.comparison->b.label);
  }
  if (title.empty() && trace != nullptr) title = trace->workload();
  if (title.empty() && snapshot != nullptr) title = snapshot->value("place", std::string());
  if (title.empty()) title = "memory";
  Json figure_list = Json::array();
  for (auto& [label, value] : figures) figure_list.push_back(Json::array({label, value}));
  return Json{{"title", title},
              {"subtitle", options.subtitle},
              {"figures", std::move(figure_list)},
              {"timeline", std::move(timeline)},
              {"segments", std::move(segments)},
              {"comparison", std::move(comparison)}};
}

std::string RenderViewerPage(const Trace* trace, const Json* snapshot,
                             const ViewerOptions& options) {
  const Json data = ViewerData(trace, snapshot, options);
  std::string page;
  // std::string_view pieces: Debian's Abseil has its own string_view, so no StrAppend here.
  const std::string json = ScriptSafeJson(data);
  const std::string title = HtmlEscape(data["title"].get<std::string>());
  for (std::string_view piece :
       {ViewerPageHead(), std::string_view("<title>"), std::string_view(title),
        std::string_view(" - strata memory viewer</title>\n<style>"), ViewerPageCss(),
        std::string_view("</style>\n</head>\n"), ViewerPageBody(),
        std::string_view("<script type=\"application/json\" id=\"data\">"), std::string_view(json),
        std::string_view("</script>\n<script>"), ViewerPageJs(),
        std::string_view("</script>\n</body>\n</html>\n")}) {
    page.append(piece);
  }
  return page;
}

void WriteViewerPage(const std::string& path, const Trace* trace, const Json* snapshot,
                     const ViewerOptions& options) {
  const std::string page = RenderViewerPage(trace, snapshot, options);
  const std::string tmp = path + ".tmp";
  auto fail = [&](const char* what, int err) {
    std::remove(tmp.c_str());
    throw std::runtime_error(absl::StrCat("viewer page: cannot ", what, " '", path,
                                          "': ", err != 0 ? std::strerror(err) : "I/O error"));
  };
  {
    errno = 0;
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail("write", errno);
    out.write(page.data(), static_cast<std::streamsize>(page.size()));
    out.close();
    if (!out) fail("write", errno);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("rename the temporary file onto", errno);
}

int RunViewerTool(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  constexpr const char* kUsage =
      "usage: strata-viz --trace=FILE[.gz] and/or --snapshot=FILE.json --out=FILE.html "
      "[--title=TEXT] [--max_bands=N]\n"
      "       strata-viz --trace=FILE[.gz] --compare=SIDE [--base=SIDE] --out=FILE.html "
      "[--title=TEXT]\n"
      "  SIDE: strata (a replay with the default flags, the base's default), strata:CONF (with "
      "STRATA_ALLOC_CONF entries, e.g. strata:expandable_segments:True), recorded (the trace's "
      "own seg lines) or trace:FILE (another recording of the same events)\n";
  std::string trace_path, snapshot_path, out_path, base_spec, compare_spec;
  bool has_base = false, has_compare = false;
  ViewerOptions options;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value_of = [&](std::string_view flag, std::string* value) {
      if (!arg.starts_with(flag)) return false;
      *value = arg.substr(flag.size());
      return true;
    };
    std::string max_bands;
    if (arg == "--help" || arg == "-h") {
      out << kUsage;
      return 0;
    }
    if (value_of("--trace=", &trace_path) || value_of("--snapshot=", &snapshot_path) ||
        value_of("--out=", &out_path) || value_of("--title=", &options.title)) {
      continue;
    }
    if (value_of("--base=", &base_spec)) {
      has_base = true;
      continue;
    }
    if (value_of("--compare=", &compare_spec)) {
      has_compare = true;
      continue;
    }
    if (value_of("--max_bands=", &max_bands)) {
      std::size_t parsed = 0;
      try {
        options.max_bands = std::stoul(max_bands, &parsed);
      } catch (const std::exception&) {
        parsed = 0;
      }
      if (parsed == 0 || parsed != max_bands.size() || options.max_bands == 0) {
        err << "strata-viz: --max_bands=" << max_bands << " is not a positive number\n";
        return 2;
      }
      continue;
    }
    err << "strata-viz: unexpected argument '" << arg << "'\n" << kUsage;
    return 2;
  }
  if (trace_path.empty() && snapshot_path.empty()) {
    err << "strata-viz: give --trace=FILE and/or --snapshot=FILE\n" << kUsage;
    return 2;
  }
  if (out_path.empty()) {
    err << "strata-viz: --out=FILE.html is required\n" << kUsage;
    return 2;
  }
  // A comparison: both sides are checked before anything is read or replayed.
  const std::pair<const char*, std::string> specs[2] = {
      {"--base=", has_base ? base_spec : std::string("strata")}, {"--compare=", compare_spec}};
  std::optional<CompareSide> sides[2];
  if (has_base && !has_compare) {
    err << "strata-viz: --base=SIDE needs --compare=SIDE\n" << kUsage;
    return 2;
  }
  if (has_compare) {
    if (trace_path.empty()) {
      err << "strata-viz: --compare needs --trace=FILE (the events both sides are measured on)\n"
          << kUsage;
      return 2;
    }
    if (!snapshot_path.empty()) {
      err << "strata-viz: --snapshot draws one allocator's segments; it cannot be combined "
             "with --compare\n";
      return 2;
    }
    for (int s = 0; s < 2; ++s) {
      try {
        sides[s] = ParseCompareSide(specs[s].second);
      } catch (const std::invalid_argument& e) {
        err << "strata-viz: " << specs[s].first << specs[s].second << ": " << e.what() << "\n";
        return 2;
      }
    }
  }
  std::optional<Trace> trace;
  std::optional<Json> snapshot;
  try {
    if (!trace_path.empty()) trace = Trace::Load(trace_path);
    if (!snapshot_path.empty()) snapshot = LoadSnapshot(snapshot_path);
  } catch (const std::exception& e) {  // TraceError and LoadSnapshot's errors name the file
    err << "strata-viz: " << e.what() << "\n";
    return 2;
  }
  if (has_compare) {
    ViewerComparison comparison;
    MemoryCurve* curves[2] = {&comparison.a, &comparison.b};
    for (int s = 0; s < 2; ++s) {
      try {
        *curves[s] = CurveOfSide(*sides[s], *trace);
      } catch (const TraceError& e) {  // names the file (and line)
        err << "strata-viz: " << e.what() << "\n";
        return 2;
      } catch (const std::invalid_argument& e) {
        err << "strata-viz: " << specs[s].first << specs[s].second << ": " << e.what() << "\n";
        return 2;
      } catch (const std::exception& e) {  // a replay out of memory
        err << "strata-viz: " << specs[s].first << specs[s].second << ": " << e.what() << "\n";
        return 1;
      }
    }
    options.comparison = std::move(comparison);
  }
  try {
    WriteViewerPage(out_path, trace ? &*trace : nullptr, snapshot ? &*snapshot : nullptr, options);
  } catch (const std::exception& e) {
    err << "strata-viz: " << e.what() << "\n";
    return 1;
  }
  out << "strata-viz: wrote " << out_path << "\n";
  return 0;
}

}  // namespace strata::tools
