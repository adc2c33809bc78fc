#include "tools/memory_compare.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "support/error_of.h"
#include "tools/trace.h"

namespace strata::tools {
namespace {

using testing::ErrorOf;

using U = std::vector<std::uint64_t>;

MemoryCurve Curve(std::string label, U reserved, U allocated = {}) {
  return MemoryCurve{std::move(label), std::move(reserved), std::move(allocated)};
}

// ---- curves from a trace -----------------------------------------------------------------------

TEST(ReservedFromSegLinesTest, CountsTheDeviceCallsBeforeEachEvent) {
  // The growth an allocation causes is written before it; a virtual-memory map or unmap does
  // not change reserved bytes (its create and release do).
  const Trace trace = Trace::Parse(
      "seg malloc 0x1000 100\n"
      "a 1 60 0\n"
      "a 2 30 0\n"
      "seg create 0x1 50\n"
      "seg map 0x2000 50\n"
      "a 3 40 0\n"
      "f 1 0\n"
      "seg free 0x1000 100\n"
      "f 2 0\n"
      "seg unmap 0x2000 50\n"
      "seg release 0x1 50\n"
      "f 3 0\n",
      "rec.trace");
  EXPECT_EQ(ReservedFromSegLines(trace), (U{100, 100, 150, 150, 50, 0}));
  EXPECT_EQ(RequestedAfterEachEvent(trace), (U{60, 90, 130, 70, 40, 0}));
}

TEST(ReservedFromSegLinesTest, ARecordingThatLostItsStartIsLiftedToStayAboveZero) {
  // The segment freed first was allocated before the recording's window began.
  const Trace trace = Trace::Parse(
      "a 1 10 0\n"
      "f 1 0\n"
      "seg free 0x1000 300\n"
      "seg malloc 0x2000 100\n"
      "a 2 10 0\n",
      "window.trace");
  EXPECT_EQ(ReservedFromSegLines(trace), (U{300, 300, 100}));
}

TEST(ReservedFromSegLinesTest, ATraceWithoutSegLinesHasNoCurve) {
  EXPECT_TRUE(ReservedFromSegLines(Trace::Parse("a 1 10 0\nf 1 0\n")).empty());
  // Map and unmap lines alone say nothing about reserved bytes either.
  EXPECT_TRUE(ReservedFromSegLines(Trace::Parse("seg map 0x1 2\na 1 10 0\n")).empty());
}

// ---- the divergence ----------------------------------------------------------------------------

TEST(FindDivergenceTest, GapPeaksAndWidestGapKeepTheirSign) {
  const Divergence d =
      FindDivergence(Curve("a", {10, 40, 40, 30}), Curve("b", {10, 20, 60, 60}), 10);
  EXPECT_EQ(d.gap, (std::vector<std::int64_t>{0, -20, 20, 30}));
  EXPECT_EQ(d.peak_a, 40u);
  EXPECT_EQ(d.peak_a_event, 1u);  // the first event reaching it
  EXPECT_EQ(d.peak_b, 60u);
  EXPECT_EQ(d.peak_b_event, 2u);
  EXPECT_EQ(d.widest_gap, 30);
  EXPECT_EQ(d.widest_gap_event, 3u);

  const Divergence below = FindDivergence(Curve("a", {50, 90}), Curve("b", {50, 10}), 10);
  EXPECT_EQ(below.widest_gap, -80);
  EXPECT_EQ(below.widest_gap_event, 1u);
}

TEST(FindDivergenceTest, MomentsAreWhereTheGapMovesAwayFromZeroLargestFirst) {
  // gap: 0, +5, +25, +10 (converging: not listed), -40 (|gap| grows by 30), -40, -41.
  const MemoryCurve a = Curve("a", {100, 100, 100, 120, 170, 170, 171});
  const MemoryCurve b = Curve("b", {100, 105, 125, 130, 130, 130, 130});
  const Divergence d = FindDivergence(a, b, 10);
  ASSERT_EQ(d.moments.size(), 4u);
  EXPECT_EQ(d.moments[0].event, 4u);  // +10 -> -40: grows by 30
  EXPECT_EQ(d.moments[0].gap_before, 10);
  EXPECT_EQ(d.moments[0].gap_after, -40);
  EXPECT_EQ(d.moments[0].change_a, 50);
  EXPECT_EQ(d.moments[0].change_b, 0);
  EXPECT_EQ(d.moments[1].event, 2u);  // +5 -> +25
  EXPECT_EQ(d.moments[1].change_b, 20);
  EXPECT_EQ(d.moments[2].event, 1u);  // 0 -> +5
  EXPECT_EQ(d.moments[3].event, 6u);  // -40 -> -41
  for (const DivergenceMoment& m : d.moments) EXPECT_NE(m.event, 3u);

  // At most `top`, still largest first.
  const Divergence two = FindDivergence(a, b, 2);
  ASSERT_EQ(two.moments.size(), 2u);
  EXPECT_EQ(two.moments[0].event, 4u);
  EXPECT_EQ(two.moments[1].event, 2u);
}

TEST(FindDivergenceTest, TheFirstEventDivergesFromAnEmptyStartAndTiesGoToTheEarlierEvent) {
  const Divergence d = FindDivergence(Curve("a", {20, 20, 20}), Curve("b", {30, 30, 40}), 10);
  ASSERT_EQ(d.moments.size(), 2u);
  EXPECT_EQ(d.moments[0].event, 0u);
  EXPECT_EQ(d.moments[0].gap_before, 0);
  EXPECT_EQ(d.moments[0].change_a, 20);
  EXPECT_EQ(d.moments[0].change_b, 30);
  EXPECT_EQ(d.moments[1].event, 2u);
}

TEST(FindDivergenceTest, IdenticalCurvesHaveNoMoments) {
  const Divergence d = FindDivergence(Curve("a", {1, 2, 3}), Curve("b", {1, 2, 3}), 10);
  EXPECT_TRUE(d.moments.empty());
  EXPECT_EQ(d.widest_gap, 0);
  EXPECT_TRUE(FindDivergence(Curve("a", {}), Curve("b", {}), 10).gap.empty());
}

TEST(FindDivergenceTest, CurvesOfDifferentLengthsAreRefused) {
  EXPECT_EQ(ErrorOf([] {
              FindDivergence(Curve("left", {1, 2}), Curve("right", {1}), 5);
            }),
            "cannot compare 'left' (2 events) with 'right' (1 events)");
  EXPECT_EQ(ErrorOf([] {
              FindDivergence(Curve("left", {1, 2}), Curve("right", {1, 2}, {1}), 5);
            }),
            "'right': 1 allocated figures for 2 events");
}

// ---- the same events ---------------------------------------------------------------------------

TEST(CheckSameEventsTest, StreamsMayDifferButNotKindsSizesOrLength) {
  const Trace base = Trace::Parse("a 1 10 0\na 2 20 0\nf 1 0\nf 2 0\n", "base.trace");
  // Other ids and streams, the same events.
  EXPECT_NO_THROW(
      CheckSameEvents(base, Trace::Parse("a 7 10 3\na 9 20 3\nf 7 3\nf 9 3\n", "same.trace")));
  EXPECT_EQ(ErrorOf([&] {
              CheckSameEvents(base, Trace::Parse("a 1 10 0\na 2 20 0\nf 1 0\n", "short.trace"));
            }),
            "short.trace has 3 allocation/free events where base.trace has 4: a comparison needs "
            "two recordings of the same events");
  EXPECT_EQ(ErrorOf([&] {
              CheckSameEvents(base,
                              Trace::Parse("a 1 10 0\na 2 21 0\nf 1 0\nf 2 0\n", "bytes.trace"));
            }),
            "bytes.trace differs from base.trace at event 1: alloc of id 2 (21 bytes) where "
            "base.trace has alloc of id 2 (20 bytes)");
  // The same sizes freed in the other order.
  EXPECT_EQ(ErrorOf([&] {
              CheckSameEvents(base,
                              Trace::Parse("a 1 10 0\na 2 20 0\nf 2 0\nf 1 0\n", "order.trace"));
            }),
            "order.trace differs from base.trace at event 2: free of id 2 (20 bytes) where "
            "base.trace has free of id 1 (10 bytes)");
}

}  // namespace
}  // namespace strata::tools
