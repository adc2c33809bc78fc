#include "tools/timeline_svg.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace strata::tools {
namespace {

std::size_t Count(const std::string& haystack, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t pos = haystack.find(needle); pos != std::string::npos;
       pos = haystack.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

// The number of points of the polyline of class `name`.
std::size_t PointsOf(const std::string& svg, const std::string& name) {
  const std::size_t start = svg.find(absl::StrCat("<polyline class=\"", name, "\""));
  if (start == std::string::npos) return 0;
  const std::size_t points = svg.find("points=\"", start) + 8;
  const std::string list = svg.substr(points, svg.find('"', points) - points);
  return list.empty() ? 0 : Count(list, " ") + 1;
}

TEST(TimelineSvgTest, RendersAStandaloneSvgWithThreeSeriesAxesAndLegend) {
  TimelineSvg plot("resnet50 <train> & more", 2000);
  plot.set_subtitle("best_fit, 4 steps");
  plot.AddReferenceLine("torch peak reserved", std::uint64_t{3} << 30);
  for (std::uint64_t i = 0; i < 100; ++i) {
    plot.Add(i, i << 20, (i + 1) << 20, std::uint64_t{2} << 30);
  }
  const std::string svg = plot.Render();
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("</svg>\n"), std::string::npos);
  EXPECT_EQ(Count(svg, "<polyline"), 3u);
  EXPECT_EQ(PointsOf(svg, "requested"), 100u);
  EXPECT_EQ(PointsOf(svg, "allocated"), 100u);
  EXPECT_EQ(PointsOf(svg, "reserved"), 100u);
  // Legend entries with the exact peaks, the title escaped, GiB tick labels, the reference line.
  EXPECT_NE(svg.find(">requested (peak 99.00 MiB)</text>"), std::string::npos);
  EXPECT_NE(svg.find(">allocated (peak 100.00 MiB)</text>"), std::string::npos);
  EXPECT_NE(svg.find(">reserved (peak 2.00 GiB)</text>"), std::string::npos);
  EXPECT_NE(svg.find("resnet50 &lt;train&gt; &amp; more"), std::string::npos);
  EXPECT_EQ(svg.find("<train>"), std::string::npos);
  EXPECT_NE(svg.find(" GiB</text>"), std::string::npos);
  EXPECT_NE(svg.find("torch peak reserved (3.00 GiB)"), std::string::npos);
  EXPECT_NE(svg.find("best_fit, 4 steps"), std::string::npos);
  // Balanced elements: every opened <g>/<text> is closed.
  EXPECT_EQ(Count(svg, "<g"), Count(svg, "</g>"));
  EXPECT_EQ(Count(svg, "<text"), Count(svg, "</text>"));
}

TEST(TimelineSvgTest, SmallValuesUseMiBTicks) {
  TimelineSvg plot("small");
  plot.Add(0, 1 << 20, 2 << 20, 3 << 20);
  plot.Add(10, 2 << 20, 3 << 20, 5 << 20);
  const std::string svg = plot.Render();
  EXPECT_NE(svg.find(" MiB</text>"), std::string::npos);
  EXPECT_EQ(svg.find(" GiB</text>"), std::string::npos);
}

TEST(TimelineSvgTest, DownsamplingBoundsPointsAndKeepsEachMaximum) {
  TimelineSvg plot("big", 2000);
  const std::uint64_t n = 1'000'003;
  // A single spike in each series at different events, everything else small.
  for (std::uint64_t i = 0; i < n; ++i) {
    plot.Add(i, i == 123'457 ? 900'000 : i % 100, i == 777'777 ? 800'000 : 100 + i % 50,
             i == n - 1 ? 700'000 : 1000);
  }
  EXPECT_EQ(plot.num_added(), n);
  const auto& s = plot.samples();
  EXPECT_LE(s.size(), 2000u);
  EXPECT_GT(s.size(), 1000u);  // halving only when full: at least max/2 buckets remain
  std::uint64_t max_req = 0, max_alloc = 0, max_res = 0, total = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    max_req = std::max(max_req, s[i].requested);
    max_alloc = std::max(max_alloc, s[i].allocated);
    max_res = std::max(max_res, s[i].reserved);
    total += s[i].count;
    if (i > 0) {
      EXPECT_EQ(s[i].first_event, s[i - 1].last_event + 1);
    }
    EXPECT_LE(s[i].first_event, s[i].last_event);
  }
  EXPECT_EQ(total, n);
  EXPECT_EQ(s.front().first_event, 0u);
  EXPECT_EQ(s.back().last_event, n - 1);
  EXPECT_EQ(max_req, 900'000u);
  EXPECT_EQ(max_alloc, 800'000u);
  EXPECT_EQ(max_res, 700'000u);
  EXPECT_EQ(plot.peak_requested(), 900'000u);
  // The bucket holding event 123457 shows the spike; its neighbours do not.
  for (std::size_t i = 0; i < s.size(); ++i) {
    const bool has_spike = s[i].first_event <= 123'457 && 123'457 <= s[i].last_event;
    EXPECT_EQ(s[i].requested == 900'000, has_spike) << i;
  }
  const std::string svg = plot.Render();
  EXPECT_LE(PointsOf(svg, "requested"), 2001u);
  EXPECT_LT(svg.size(), 200'000u);
}

TEST(TimelineSvgTest, EmptyAndSingleSampleRenderValidSvg) {
  TimelineSvg empty("empty");
  const std::string e = empty.Render();
  EXPECT_EQ(e.rfind("<svg", 0), 0u);
  EXPECT_EQ(Count(e, "<polyline"), 3u);
  EXPECT_NE(e.find("no samples"), std::string::npos);
  EXPECT_EQ(e.find("nan"), std::string::npos);
  EXPECT_EQ(e.find("inf"), std::string::npos);

  TimelineSvg one("one");
  one.Add(5, 10, 20, 30);
  const std::string o = one.Render();
  EXPECT_EQ(PointsOf(o, "reserved"), 1u);
  EXPECT_EQ(o.find("nan"), std::string::npos);
  EXPECT_EQ(o.find("inf"), std::string::npos);
}

TEST(TimelineSvgTest, DecreasingEventIndexIsRejected) {
  TimelineSvg plot("t");
  plot.Add(10, 1, 1, 1);
  plot.Add(10, 2, 2, 2);  // equal is fine
  EXPECT_THROW(plot.Add(9, 1, 1, 1), std::invalid_argument);
}

TEST(TimelineSvgTest, WriteCreatesTheFileAndReportsFailures) {
  TimelineSvg plot("written");
  plot.Add(0, 1, 2, 3);
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/strata_timeline_", ::getpid(), ".svg");
  plot.Write(path);
  std::ifstream in(path);
  std::stringstream content;
  content << in.rdbuf();
  EXPECT_EQ(content.str(), plot.Render());
  EXPECT_FALSE(std::ifstream(path + ".tmp").good());  // the temporary file was renamed
  std::remove(path.c_str());

  const std::string bad = "/nonexistent_dir_strata/x.svg";
  try {
    plot.Write(bad);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write '" + bad + "'"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::tools
