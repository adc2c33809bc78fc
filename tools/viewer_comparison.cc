// The viewer's comparison of two recordings of a trace's events: both curves bucketed on one
// event axis, their gap, the events where it grows most, and header figures
// (tools/viewer_data.h).
#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "allocation/byte_format.h"
#include "tools/memory_compare.h"
#include "tools/viewer_data.h"

namespace strata::tools::viewer {
namespace {

using allocation::FormatBytes;

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

}  // namespace

// Two recordings of the trace's events: both curves bucketed as the timeline's series (maxima;
// for the gap, the value of largest magnitude, sign kept), the divergence, and header figures.
Json ComparisonData(const Trace& trace, const ViewerComparison& c, const ViewerOptions& options,
                    Figures* figures) {
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

}  // namespace strata::tools::viewer
