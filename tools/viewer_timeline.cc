// The viewer's active-memory timeline: bands of the largest allocations over the bucketed
// requested and reserved series of a trace, or a replay's series alone (tools/viewer_data.h).
#include <algorithm>
#include <limits>
#include <numeric>
#include <set>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "allocation/byte_format.h"
#include "tools/viewer_data.h"

namespace strata::tools::viewer {
namespace {

using allocation::FormatBytes;

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

}  // namespace

Buckets MakeBuckets(std::uint64_t num_events, std::size_t max_points) {
  Buckets b;
  max_points = std::max<std::size_t>(max_points, 2);
  b.width = std::max<std::uint64_t>(1, (num_events + max_points - 1) / max_points);
  b.count = static_cast<std::size_t>((num_events + b.width - 1) / b.width);
  return b;
}

Json TimelineData(const Trace& trace, const ViewerOptions& options, Figures* figures) {
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

}  // namespace strata::tools::viewer
