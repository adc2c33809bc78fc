#include "tools/memory_compare.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"

namespace strata::tools {

namespace {

std::int64_t Signed(std::uint64_t v) { return static_cast<std::int64_t>(v); }

std::string DescribeEvent(const Trace& trace, std::size_t i) {
  const TraceEvent& e = trace.events()[i];
  return absl::StrCat(e.is_alloc() ? "alloc" : "free", " of id ", trace.original_id(e.index), " (",
                      e.bytes, " bytes)");
}

}  // namespace

bool ReservedDelta(const OtherEvent& e, std::int64_t* delta) {
  using K = OtherEvent::Kind;
  const auto bytes = static_cast<std::int64_t>(e.bytes);
  switch (e.kind) {
    case K::kSegMalloc:
    case K::kSegCreate:
      *delta = bytes;
      return true;
    case K::kSegFree:
    case K::kSegRelease:
      *delta = -bytes;
      return true;
    default:
      return false;
  }
}

std::vector<std::uint64_t> ReservedFromSegLines(const Trace& trace) {
  std::vector<std::pair<std::uint64_t, std::int64_t>> changes;  // (position, delta)
  std::int64_t level = 0, lowest = 0;
  for (const OtherEvent& e : trace.other_events()) {
    std::int64_t delta = 0;
    if (!ReservedDelta(e, &delta)) continue;
    changes.emplace_back(e.position, delta);
    level += delta;
    lowest = std::min(lowest, level);
  }
  if (changes.empty()) return {};
  const std::size_t n = trace.num_events();
  std::vector<std::uint64_t> out(n);
  level = -lowest;
  std::size_t next = 0;
  for (std::size_t i = 0; i < n; ++i) {
    for (; next < changes.size() && changes[next].first <= i; ++next) level += changes[next].second;
    out[i] = static_cast<std::uint64_t>(level);
  }
  return out;
}

std::vector<std::uint64_t> RequestedAfterEachEvent(const Trace& trace) {
  std::vector<std::uint64_t> out;
  out.reserve(trace.num_events());
  std::uint64_t live = 0;
  for (const TraceEvent& e : trace.events()) {
    live = e.is_alloc() ? live + e.bytes : live - e.bytes;
    out.push_back(live);
  }
  return out;
}

Divergence FindDivergence(const MemoryCurve& a, const MemoryCurve& b, std::size_t top) {
  const std::size_t n = a.reserved.size();
  if (b.reserved.size() != n) {
    throw std::invalid_argument(absl::StrCat("cannot compare '", a.label, "' (", n,
                                             " events) with '", b.label, "' (", b.reserved.size(),
                                             " events)"));
  }
  for (const MemoryCurve* c : {&a, &b}) {
    if (!c->allocated.empty() && c->allocated.size() != n) {
      throw std::invalid_argument(absl::StrCat("'", c->label, "': ", c->allocated.size(),
                                               " allocated figures for ", n, " events"));
    }
  }
  Divergence d;
  d.gap.reserve(n);
  std::vector<DivergenceMoment> growing;
  std::int64_t gap_before = 0;
  std::uint64_t a_before = 0, b_before = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t ra = a.reserved[i], rb = b.reserved[i];
    if (ra > d.peak_a) {
      d.peak_a = ra;
      d.peak_a_event = i;
    }
    if (rb > d.peak_b) {
      d.peak_b = rb;
      d.peak_b_event = i;
    }
    const std::int64_t gap = Signed(rb) - Signed(ra);
    d.gap.push_back(gap);
    if (std::abs(gap) > std::abs(d.widest_gap)) {
      d.widest_gap = gap;
      d.widest_gap_event = i;
    }
    if (std::abs(gap) > std::abs(gap_before)) {
      growing.push_back(
          {i, gap_before, gap, Signed(ra) - Signed(a_before), Signed(rb) - Signed(b_before)});
    }
    gap_before = gap;
    a_before = ra;
    b_before = rb;
  }
  auto growth = [](const DivergenceMoment& m) {
    return std::abs(m.gap_after) - std::abs(m.gap_before);
  };
  const std::size_t kept = std::min(top, growing.size());
  std::partial_sort(growing.begin(), growing.begin() + static_cast<std::ptrdiff_t>(kept),
                    growing.end(), [&](const DivergenceMoment& x, const DivergenceMoment& y) {
                      return growth(x) != growth(y) ? growth(x) > growth(y) : x.event < y.event;
                    });
  growing.resize(kept);
  d.moments = std::move(growing);
  return d;
}

void CheckSameEvents(const Trace& base, const Trace& other) {
  if (base.num_events() != other.num_events()) {
    throw std::invalid_argument(absl::StrCat(
        other.name(), " has ", other.num_events(), " allocation/free events where ", base.name(),
        " has ", base.num_events(), ": a comparison needs two recordings of the same events"));
  }
  for (std::size_t i = 0; i < base.num_events(); ++i) {
    const TraceEvent& x = base.events()[i];
    const TraceEvent& y = other.events()[i];
    if (x.kind != y.kind || x.index != y.index || x.bytes != y.bytes) {
      throw std::invalid_argument(absl::StrCat(
          other.name(), " differs from ", base.name(), " at event ", i, ": ",
          DescribeEvent(other, i), " where ", base.name(), " has ", DescribeEvent(base, i)));
    }
  }
}

}  // namespace strata::tools
