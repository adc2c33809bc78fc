#include "history/trace_writer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_split.h"

namespace strata::history {
namespace {

RecordedEvent E(EventKind kind, std::uint64_t time, std::uint32_t thread, std::uint64_t index,
                std::uint64_t addr, std::uint64_t bytes = 64) {
  return RecordedEvent{time, index, addr, bytes, 0, kind, thread, 0};
}

// The event lines (kind and fields, no attributes).
std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view row : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (row.front() == '#') continue;
    std::vector<std::string> tokens = absl::StrSplit(row, ' ');
    std::string line;
    for (const std::string& t : tokens) {
      if (t.find('=') != std::string::npos) break;
      line += (line.empty() ? "" : " ") + t;
    }
    out.push_back(line);
  }
  return out;
}

TEST(TraceWriterTest, EventsOfOneTickOnSeveralThreadsFollowTheirAddresses) {
  // Thread 2 freed X between thread 1's two allocations of it, all within one clock tick: sorted
  // by thread, thread 1's second allocation would come before the free.
  std::vector<RecordedEvent> events = {
      E(EventKind::kAlloc, 10, 1, 0, 0x1000),
      E(EventKind::kAlloc, 10, 1, 1, 0x1000),
      E(EventKind::kFree, 10, 2, 64, 0x1000),
      E(EventKind::kFree, 20, 1, 2, 0x1000),
  };
  const std::string text = WriteTrace(events, 100, 0, nlohmann::json::object(), {});
  EXPECT_EQ(Lines(text), (std::vector<std::string>{"a 0 64 0", "f 0 0", "a 1 64 0", "f 1 0"}))
      << text;
}

TEST(TraceWriterTest, ADeferredFreeIsReclaimedAfterItWasDeferred) {
  std::vector<RecordedEvent> events = {
      E(EventKind::kAlloc, 10, 1, 0, 0x1000),
      E(EventKind::kReclaim, 30, 1, 3, 0x1000),  // reclaimed by thread 1 in the tick...
      E(EventKind::kFree, 30, 2, 64, 0x1000),    // ...in which thread 2 freed and deferred it
      E(EventKind::kPending, 30, 2, 65, 0x1000, 1),
  };
  events[3].stream = 0x77;
  const std::string text = WriteTrace(events, 100, 0, nlohmann::json::object(), {});
  EXPECT_EQ(Lines(text), (std::vector<std::string>{"a 0 64 0", "f 0 1", "p 0 1", "r 0"})) << text;
}

TEST(TraceWriterTest, KeepsTheNewestEventsAndLeavesOutOrphans) {
  std::vector<RecordedEvent> events;
  for (std::uint64_t i = 0; i < 10; ++i) {
    events.push_back(E(EventKind::kAlloc, i, 1, 2 * i, 0x1000 + i));
    events.push_back(E(EventKind::kFree, i, 1, 2 * i + 1, 0x1000 + i));
  }
  nlohmann::json header = {{"dropped", 5}};
  const std::string text = WriteTrace(events, 5, 0, header, {});
  // The newest five: a free whose allocation is not kept, then two pairs.
  EXPECT_EQ(Lines(text), (std::vector<std::string>{"a 0 64 0", "f 0 0", "a 1 64 0", "f 1 0"}))
      << text;
  const nlohmann::json h = nlohmann::json::parse(text.substr(2, text.find('\n') - 2));
  EXPECT_EQ(h["dropped"], 5 + 15);
  EXPECT_EQ(h["left_out"], 1);
  EXPECT_EQ(h["events"], 4);
  EXPECT_EQ(h["allocs"], 2);
}

}  // namespace
}  // namespace strata::history
