#include "tools/timeline_svg.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "reporting/byte_format.h"

namespace strata::tools {

namespace {

constexpr double kWidth = 1000, kHeight = 540;
constexpr double kLeft = 90, kRight = 970, kTop = 80, kBottom = 470;

struct Series {
  const char* name;
  const char* color;
  std::uint64_t TimelineSvg::Sample::*field;
};
constexpr Series kSeries[] = {
    {"requested", "#1f77b4", &TimelineSvg::Sample::requested},
    {"allocated", "#ff7f0e", &TimelineSvg::Sample::allocated},
    {"reserved", "#2ca02c", &TimelineSvg::Sample::reserved},
};

std::string XmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
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
      case '\'':
        out.append("&apos;");
        break;
      default:
        // Control characters other than tab/newline are not allowed in XML 1.0.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') {
          out.push_back(' ');
        } else {
          out.push_back(c);
        }
    }
  }
  return out;
}

// A 1-2-5 step giving about `target` intervals over [0, span].
double NiceStep(double span, int target) {
  if (span <= 0) return 1;
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double nice = norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10;
  return nice * mag;
}

std::string FormatTick(double value, double step) {
  const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  return absl::StrFormat("%.*f", decimals, value);
}

}  // namespace

TimelineSvg::TimelineSvg(std::string title, std::size_t max_points)
    : title_(std::move(title)), max_points_(std::max<std::size_t>(max_points, 2)) {
  buckets_.reserve(max_points_ + 1);
}

void TimelineSvg::Add(std::uint64_t event_index, std::uint64_t requested, std::uint64_t allocated,
                      std::uint64_t reserved) {
  if (!buckets_.empty() && event_index < buckets_.back().last_event) {
    throw std::invalid_argument(absl::StrCat("TimelineSvg::Add: event index ", event_index,
                                             " after ", buckets_.back().last_event,
                                             " (indices must not decrease)"));
  }
  ++num_added_;
  peak_requested_ = std::max(peak_requested_, requested);
  peak_allocated_ = std::max(peak_allocated_, allocated);
  peak_reserved_ = std::max(peak_reserved_, reserved);
  if (!buckets_.empty() && buckets_.back().count < bucket_width_) {
    Sample& b = buckets_.back();
    b.last_event = event_index;
    b.requested = std::max(b.requested, requested);
    b.allocated = std::max(b.allocated, allocated);
    b.reserved = std::max(b.reserved, reserved);
    ++b.count;
    return;
  }
  buckets_.push_back(Sample{event_index, event_index, requested, allocated, reserved, 1});
  if (buckets_.size() <= max_points_) return;
  // Out of buckets: merge neighbours pairwise and double the width of a full bucket.
  std::size_t out = 0;
  for (std::size_t i = 0; i < buckets_.size(); i += 2, ++out) {
    Sample merged = buckets_[i];
    if (i + 1 < buckets_.size()) {
      const Sample& n = buckets_[i + 1];
      merged.last_event = n.last_event;
      merged.requested = std::max(merged.requested, n.requested);
      merged.allocated = std::max(merged.allocated, n.allocated);
      merged.reserved = std::max(merged.reserved, n.reserved);
      merged.count += n.count;
    }
    buckets_[out] = merged;
  }
  buckets_.resize(out);
  bucket_width_ *= 2;
}

void TimelineSvg::AddReferenceLine(std::string label, std::uint64_t bytes) {
  references_.push_back(Reference{std::move(label), bytes});
}

std::string TimelineSvg::Render() const {
  std::string svg;
  absl::StrAppendFormat(&svg,
                        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                        "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
                        kWidth, kHeight, kWidth, kHeight);
  absl::StrAppendFormat(&svg, "<title>%s</title>\n", XmlEscape(title_));
  absl::StrAppendFormat(&svg, "<rect width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", kWidth,
                        kHeight);
  absl::StrAppendFormat(&svg,
                        "<text x=\"%.0f\" y=\"30\" font-size=\"18\" text-anchor=\"middle\" "
                        "font-weight=\"bold\">%s</text>\n",
                        kWidth / 2, XmlEscape(title_));
  if (!subtitle_.empty()) {
    absl::StrAppendFormat(&svg,
                          "<text x=\"%.0f\" y=\"52\" font-size=\"12\" text-anchor=\"middle\" "
                          "fill=\"#444\">%s</text>\n",
                          kWidth / 2, XmlEscape(subtitle_));
  }

  // Scales. y: bytes from 0, in the largest binary unit the maximum reaches.
  std::uint64_t y_max_bytes = std::max({peak_requested_, peak_allocated_, peak_reserved_});
  for (const Reference& r : references_) y_max_bytes = std::max(y_max_bytes, r.bytes);
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (unit < 4 && static_cast<double>(y_max_bytes) >= std::pow(1024.0, unit + 1)) ++unit;
  const double unit_bytes = std::pow(1024.0, unit);
  const double y_max_units = std::max(static_cast<double>(y_max_bytes) / unit_bytes, 1.0);
  const double y_step = NiceStep(y_max_units * 1.05, 6);
  const double y_top = std::ceil(y_max_units * 1.05 / y_step) * y_step;
  auto ymap = [&](std::uint64_t bytes) {
    return kBottom - (static_cast<double>(bytes) / unit_bytes) / y_top * (kBottom - kTop);
  };
  const double x_min = buckets_.empty() ? 0 : static_cast<double>(buckets_.front().first_event);
  double x_max = buckets_.empty() ? 1 : static_cast<double>(buckets_.back().last_event);
  if (x_max <= x_min) x_max = x_min + 1;
  auto xmap = [&](double event) {
    return kLeft + (event - x_min) / (x_max - x_min) * (kRight - kLeft);
  };

  // Grid, ticks and labels.
  svg.append("<g stroke=\"#ddd\" stroke-width=\"1\">\n");
  for (double v = 0; v <= y_top + y_step / 2; v += y_step) {
    const double y = kBottom - v / y_top * (kBottom - kTop);
    absl::StrAppendFormat(&svg, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", kLeft,
                          y, kRight, y);
  }
  svg.append("</g>\n<g text-anchor=\"end\">\n");
  for (double v = 0; v <= y_top + y_step / 2; v += y_step) {
    const double y = kBottom - v / y_top * (kBottom - kTop);
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\">%s %s</text>\n", kLeft - 6, y + 4,
                          FormatTick(v, y_step), kUnits[unit]);
  }
  svg.append("</g>\n<g text-anchor=\"middle\">\n");
  const double x_step = NiceStep(x_max - x_min, 8);
  for (double v = std::ceil(x_min / x_step) * x_step; v <= x_max + x_step * 1e-9; v += x_step) {
    const double x = xmap(v);
    absl::StrAppendFormat(
        &svg, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/>\n", x,
        kBottom, x, kBottom + 5);
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", x, kBottom + 18,
                          FormatTick(v, x_step));
  }
  svg.append("</g>\n");
  // Axes.
  absl::StrAppendFormat(&svg,
                        "<path d=\"M%.1f %.1f V%.1f H%.1f\" fill=\"none\" stroke=\"#333\" "
                        "stroke-width=\"1.5\"/>\n",
                        kLeft, kTop, kBottom, kRight);
  absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">event</text>\n",
                        (kLeft + kRight) / 2, kBottom + 40);
  absl::StrAppendFormat(&svg,
                        "<text transform=\"translate(18 %.1f) rotate(-90)\" "
                        "text-anchor=\"middle\">bytes</text>\n",
                        (kTop + kBottom) / 2);

  // Reference lines.
  for (const Reference& r : references_) {
    const double y = ymap(r.bytes);
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\" "
                          "stroke-dasharray=\"6 4\"/>\n",
                          kLeft, y, kRight, y);
    absl::StrAppendFormat(&svg,
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#666\">%s "
                          "(%s)</text>\n",
                          kRight - 4, y - 4, XmlEscape(r.label), allocation::FormatBytes(r.bytes));
  }

  // The series. Each bucket is drawn at its first event; the line is carried to the last event.
  // Drawn reserved first so that the smaller series stay visible on top.
  for (int k = 2; k >= 0; --k) {
    const Series& s = kSeries[k];
    absl::StrAppendFormat(&svg,
                          "<polyline class=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
                          "stroke-linejoin=\"round\" points=\"",
                          s.name, s.color);
    for (std::size_t i = 0; i < buckets_.size(); ++i) {
      const Sample& b = buckets_[i];
      absl::StrAppendFormat(&svg, "%s%.1f,%.1f", i == 0 ? "" : " ",
                            xmap(static_cast<double>(b.first_event)), ymap(b.*s.field));
    }
    if (!buckets_.empty() && buckets_.back().last_event != buckets_.back().first_event) {
      absl::StrAppendFormat(&svg, " %.1f,%.1f",
                            xmap(static_cast<double>(buckets_.back().last_event)),
                            ymap(buckets_.back().*s.field));
    }
    svg.append("\"/>\n");
  }
  if (buckets_.empty()) {
    absl::StrAppendFormat(&svg,
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#999\">no "
                          "samples</text>\n",
                          (kLeft + kRight) / 2, (kTop + kBottom) / 2);
  }

  // Legend, top left inside the plot.
  const std::uint64_t peaks[] = {peak_requested_, peak_allocated_, peak_reserved_};
  absl::StrAppendFormat(&svg,
                        "<g class=\"legend\"><rect x=\"%.1f\" y=\"%.1f\" width=\"250\" "
                        "height=\"66\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#ccc\"/>\n",
                        kLeft + 10, kTop + 8);
  for (int i = 0; i < 3; ++i) {
    const double y = kTop + 26 + 18 * i;
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                          "stroke-width=\"3\"/>\n",
                          kLeft + 18, y - 4, kLeft + 42, y - 4, kSeries[i].color);
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\">%s (peak %s)</text>\n", kLeft + 50, y,
                          kSeries[i].name, allocation::FormatBytes(peaks[i]));
  }
  svg.append("</g>\n</svg>\n");
  return svg;
}

void TimelineSvg::Write(const std::string& path) const {
  const std::string svg = Render();
  const std::string tmp = path + ".tmp";
  auto fail = [&](const char* what, int err) {
    std::remove(tmp.c_str());
    throw std::runtime_error(absl::StrCat("TimelineSvg: cannot ", what, " '", path,
                                          "': ", err != 0 ? std::strerror(err) : "I/O error"));
  };
  {
    errno = 0;
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail("write", errno);
    out.write(svg.data(), static_cast<std::streamsize>(svg.size()));
    out.close();
    if (!out) fail("write", errno);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("rename the temporary file onto", errno);
}

}  // namespace strata::tools
