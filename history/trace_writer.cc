#include "history/trace_writer.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace strata::history {
namespace {

// What an address's last event leaves it in, for the merge and for ids.
enum class AddrState : std::uint8_t { kNone, kLive, kFreed, kPending };

bool Fits(const RecordedEvent& e, AddrState s) {
  switch (e.kind) {
    case EventKind::kAlloc:
      return s == AddrState::kNone || s == AddrState::kFreed;
    case EventKind::kFree:
      return s == AddrState::kLive;
    case EventKind::kPending:
      return s == AddrState::kFreed;
    case EventKind::kReclaim:
      return s == AddrState::kPending;
    default:
      return true;
  }
}

void Apply(const RecordedEvent& e, AddrState* s) {
  switch (e.kind) {
    case EventKind::kAlloc:
      *s = AddrState::kLive;
      return;
    case EventKind::kFree:
      if (*s == AddrState::kLive) *s = AddrState::kFreed;
      return;
    case EventKind::kPending:
      if (*s == AddrState::kFreed) *s = AddrState::kPending;
      return;
    case EventKind::kReclaim:
      if (*s == AddrState::kPending) *s = AddrState::kNone;
      return;
    default:
      return;
  }
}

bool HasAddress(EventKind k) {
  return k == EventKind::kAlloc || k == EventKind::kFree || k == EventKind::kPending ||
         k == EventKind::kReclaim;
}

// Sorts by (time, thread, index), then merges the threads of each tick so that every address's
// events fit (see the header).
std::vector<RecordedEvent> Order(std::vector<RecordedEvent> events) {
  std::sort(events.begin(), events.end(), [](const RecordedEvent& a, const RecordedEvent& b) {
    if (a.time_ns != b.time_ns) return a.time_ns < b.time_ns;
    if (a.thread != b.thread) return a.thread < b.thread;
    return a.index < b.index;
  });
  std::vector<RecordedEvent> out;
  out.reserve(events.size());
  absl::flat_hash_map<std::uint64_t, AddrState> state;
  std::vector<std::pair<std::size_t, std::size_t>> heads;  // per thread of a tick: [next, end)
  for (std::size_t begin = 0; begin < events.size();) {
    std::size_t end = begin;
    while (end < events.size() && events[end].time_ns == events[begin].time_ns) ++end;
    heads.clear();
    for (std::size_t i = begin; i < end; ++i) {
      if (i == begin || events[i].thread != events[i - 1].thread) heads.emplace_back(i, i);
      heads.back().second = i + 1;
    }
    for (std::size_t n = begin; n < end; ++n) {
      // The first thread whose next event fits its address; if none does, the first thread.
      std::size_t pick = heads.size();
      for (std::size_t h = 0; h < heads.size() && heads.size() > 1; ++h) {
        if (heads[h].first == heads[h].second) continue;
        const RecordedEvent& e = events[heads[h].first];
        if (!HasAddress(e.kind) || Fits(e, state[e.addr])) {
          pick = h;
          break;
        }
      }
      if (pick == heads.size()) {
        pick = 0;
        while (heads[pick].first == heads[pick].second) ++pick;
      }
      const RecordedEvent& e = events[heads[pick].first++];
      if (HasAddress(e.kind)) Apply(e, &state[e.addr]);
      out.push_back(e);
    }
    begin = end;
  }
  return out;
}

class Writer {
 public:
  Writer(const std::vector<RecordedEvent>& events, std::uint64_t start_ns)
      : events_(events), start_ns_(start_ns) {}

  std::string Write(nlohmann::json header,
                    const absl::flat_hash_map<std::string, std::uint32_t>& contexts) {
    AssignIds();
    std::string body;
    body.reserve(events_.size() * 40);
    for (std::size_t i = 0; i < events_.size(); ++i) Line(i, &body);
    header["events"] = num_events_;
    header["allocs"] = num_allocs_;
    header["streams"] = streams_in_events_.size();
    header["trace_peak_live"] = peak_live_;
    header["left_out"] = left_out_;
    std::string out = absl::StrCat("# ", header.dump(), "\n");
    std::vector<const std::pair<const std::string, std::uint32_t>*> ctx;
    ctx.reserve(contexts.size());
    for (const auto& entry : contexts) ctx.push_back(&entry);
    std::sort(ctx.begin(), ctx.end(), [](auto* a, auto* b) { return a->second < b->second; });
    for (const auto* entry : ctx) {
      absl::StrAppend(&out, "ctx ", entry->second, " ", nlohmann::json(entry->first).dump(), "\n");
    }
    out += body;
    return out;
  }

 private:
  static constexpr std::int64_t kNone = -1;

  using EventOfAddr = absl::flat_hash_map<std::uint64_t, std::size_t>;
  static constexpr std::size_t kNoEvent = std::numeric_limits<std::size_t>::max();

  void AssignIds() {
    id_.assign(events_.size(), kNone);
    free_stream_.assign(events_.size(), 0);
    EventOfAddr live, freed, pending;
    for (std::size_t i = 0; i < events_.size(); ++i) {
      const RecordedEvent& e = events_[i];
      switch (e.kind) {
        case EventKind::kAlloc:
          id_[i] = next_id_++;
          live[e.addr] = i;
          freed.erase(e.addr);
          break;
        case EventKind::kFree:
          if (Follow(i, &live, &freed) != kNoEvent) free_stream_[i] = e.stream;
          break;
        case EventKind::kPending:
          // The replay records the free's stream on the block, as record_stream did.
          if (const std::size_t f = Follow(i, &freed, &pending); f != kNoEvent) {
            free_stream_[f] = e.stream;
          }
          break;
        case EventKind::kReclaim:
          Follow(i, &pending, nullptr);
          break;
        default:
          break;
      }
    }
  }

  // Event `i` is the next step of the block whose last event `from` holds under its address, if
  // any: it takes that block's id, and the address moves on to `to` (null: the block's last
  // step). Returns the block's previous event; kNoEvent when `from` has none.
  std::size_t Follow(std::size_t i, EventOfAddr* from, EventOfAddr* to) {
    const std::uint64_t addr = events_[i].addr;
    const auto it = from->find(addr);
    if (it == from->end()) return kNoEvent;
    const std::size_t previous = it->second;
    id_[i] = id_[previous];
    from->erase(it);
    if (to != nullptr) (*to)[addr] = i;
    return previous;
  }

  std::uint64_t StreamNumber(std::uint64_t handle) {
    if (handle == 0) return 0;
    auto [it, inserted] = streams_.try_emplace(handle, streams_.size() + 1);
    return it->second;
  }

  void Attributes(const RecordedEvent& e, std::string* out) const {
    absl::StrAppend(out, " t=", e.time_ns - std::min(e.time_ns, start_ns_), " th=", e.thread);
    if (e.context != 0) absl::StrAppend(out, " c=", e.context);
  }

  void Line(std::size_t i, std::string* out) {
    const RecordedEvent& e = events_[i];
    switch (e.kind) {
      case EventKind::kAlloc: {
        const std::uint64_t s = StreamNumber(e.stream);
        streams_in_events_.insert(s);
        absl::StrAppend(out, "a ", id_[i], " ", e.bytes, " ", s);
        Attributes(e, out);
        absl::StrAppend(out, " addr=0x", absl::Hex(e.addr), "\n");
        live_bytes_[id_[i]] = e.bytes;
        live_ += e.bytes;
        peak_live_ = std::max(peak_live_, live_);
        ++num_events_;
        ++num_allocs_;
        return;
      }
      case EventKind::kFree: {
        if (id_[i] == kNone) break;
        const std::uint64_t s = StreamNumber(free_stream_[i]);
        streams_in_events_.insert(s);
        absl::StrAppend(out, "f ", id_[i], " ", s);
        Attributes(e, out);
        out->push_back('\n');
        auto it = live_bytes_.find(id_[i]);
        live_ -= it->second;
        live_bytes_.erase(it);
        ++num_events_;
        return;
      }
      case EventKind::kPending:
        if (id_[i] == kNone) break;
        absl::StrAppend(out, "p ", id_[i], " ", StreamNumber(e.stream));
        Attributes(e, out);
        absl::StrAppend(out, " n=", e.bytes, "\n");
        return;
      case EventKind::kReclaim:
        if (id_[i] == kNone) break;
        absl::StrAppend(out, "r ", id_[i]);
        Attributes(e, out);
        out->push_back('\n');
        return;
      case EventKind::kOom:
        absl::StrAppend(out, "oom ", e.bytes, " ", StreamNumber(e.stream));
        Attributes(e, out);
        out->push_back('\n');
        return;
      case EventKind::kEmptyCache:
        absl::StrAppend(out, "empty_cache ", e.bytes);
        Attributes(e, out);
        out->push_back('\n');
        return;
      default: {
        static constexpr const char* kOps[] = {"malloc",  "free", "create",
                                               "release", "map",  "unmap"};
        const int op = static_cast<int>(e.kind) - static_cast<int>(EventKind::kSegMalloc);
        absl::StrAppend(out, "seg ", kOps[op], " 0x", absl::Hex(e.addr), " ", e.bytes);
        Attributes(e, out);
        out->push_back('\n');
        return;
      }
    }
    ++left_out_;
  }

  const std::vector<RecordedEvent>& events_;
  const std::uint64_t start_ns_;
  std::vector<std::int64_t> id_;
  std::vector<std::uint64_t> free_stream_;
  absl::flat_hash_map<std::uint64_t, std::uint64_t> streams_;
  absl::flat_hash_map<std::int64_t, std::uint64_t> live_bytes_;
  absl::flat_hash_set<std::uint64_t> streams_in_events_;
  std::int64_t next_id_ = 0;
  std::uint64_t live_ = 0, peak_live_ = 0;
  std::uint64_t num_events_ = 0, num_allocs_ = 0, left_out_ = 0;
};

}  // namespace

std::string WriteTrace(std::vector<RecordedEvent> events, std::size_t max_events,
                       std::uint64_t start_ns, nlohmann::json header,
                       const absl::flat_hash_map<std::string, std::uint32_t>& contexts) {
  std::vector<RecordedEvent> ordered = Order(std::move(events));
  if (ordered.size() > max_events) {
    const std::size_t extra = ordered.size() - max_events;
    ordered.erase(ordered.begin(), ordered.begin() + static_cast<std::ptrdiff_t>(extra));
    header["dropped"] = header.value("dropped", std::uint64_t{0}) + extra;
  }
  return Writer(ordered, start_ns).Write(std::move(header), contexts);
}

}  // namespace strata::history
