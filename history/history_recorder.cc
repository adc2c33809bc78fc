#include "history/history_recorder.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace strata::history {
namespace {

// The time-stamp counter where there is one (constant-rate on every x86-64 CPU a GPU host
// has: a few nanoseconds, no system call), else the steady clock. Ticks become nanoseconds at
// Stop, from the two clocks read at Start and Stop.
inline std::uint64_t Ticks() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}

std::int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Thread numbers for the file: 1 for the first thread that ever recorded, and so on.
std::atomic<std::uint32_t> g_threads{0};
thread_local std::uint32_t t_thread = 0;

inline std::uint32_t ThreadNumber() {
  if (t_thread == 0) [[unlikely]]
    t_thread = g_threads.fetch_add(1, std::memory_order_relaxed) + 1;
  return t_thread;
}

// A slot's tag: the session in the top bits, the event's index + 1 below (0: being written).
constexpr int kIndexBits = 40;
constexpr std::uint64_t kIndexMask = (std::uint64_t{1} << kIndexBits) - 1;

std::uint64_t Tag(std::uint64_t session, std::uint64_t index) {
  return (session << kIndexBits) | ((index + 1) & kIndexMask);
}

}  // namespace

struct HistoryRecorder::Slot {
  std::atomic<std::uint64_t> tag{0};
  std::atomic<std::uint64_t> ticks{0};
  std::atomic<std::uint64_t> addr{0};
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<std::uint64_t> stream{0};
  std::atomic<std::uint64_t> meta{0};  // kind | thread << 8 | context << 32
};
static_assert(sizeof(std::atomic<std::uint64_t>) == 8);

struct HistoryRecorder::Ring {
  explicit Ring(std::size_t n) : capacity(n), slots(new Slot[n]) {}
  const std::size_t capacity;  // a power of two
  const std::unique_ptr<Slot[]> slots;
  std::atomic<std::uint64_t> session{0};
  alignas(64) std::atomic<std::uint64_t> next{0};  // events claimed this session
};

HistoryRecorder::HistoryRecorder(std::string place) : place_(std::move(place)) {}

HistoryRecorder::~HistoryRecorder() = default;

void HistoryRecorder::Start(HistoryOptions options) {
  if (options.max_entries == 0 || options.max_entries > kMaxEntries) {
    throw std::invalid_argument(absl::StrCat("strata: history max_entries must be in [1, ",
                                             kMaxEntries, "], got ", options.max_entries));
  }
  std::size_t capacity = 1;
  while (capacity < options.max_entries) capacity <<= 1;
  absl::MutexLock lock(&mu_);
  on_.store(false, std::memory_order_relaxed);
  ring_.store(nullptr, std::memory_order_release);
  Ring* ring = nullptr;
  for (auto& r : rings_) {
    if (r->capacity == capacity) ring = r.get();
  }
  if (ring == nullptr) {
    rings_.push_back(std::make_unique<Ring>(capacity));
    ring = rings_.back().get();
  }
  ++session_;
  ring->session.store(session_ & ((std::uint64_t{1} << (64 - kIndexBits)) - 1),
                      std::memory_order_relaxed);
  ring->next.store(0, std::memory_order_relaxed);
  max_entries_ = options.max_entries;
  contexts_.clear();
  const std::function<std::string()>* context = nullptr;
  if (options.context) {
    context_fns_.push_back(
        std::make_unique<std::function<std::string()>>(std::move(options.context)));
    context = context_fns_.back().get();
  }
  context_.store(context, std::memory_order_release);
  start_ns_ = SteadyNs();
  start_ticks_ = Ticks();
  ring_.store(ring, std::memory_order_release);
  on_.store(true, std::memory_order_release);
  VLOG(4) << "strata: recording the history of " << place_ << ", the newest " << options.max_entries
          << " events";
}

std::uint32_t HistoryRecorder::ContextId(const std::function<std::string()>& context) {
  std::string text = context();
  absl::MutexLock lock(&mu_);
  auto [it, inserted] =
      contexts_.try_emplace(std::move(text), static_cast<std::uint32_t>(contexts_.size() + 1));
  return it->second;
}

void HistoryRecorder::Record(EventKind kind, std::uint64_t addr, std::uint64_t bytes,
                             platform::Stream stream) {
  Ring* r = ring_.load(std::memory_order_acquire);
  if (r == nullptr) return;
  std::uint64_t context = 0;
  if (kind == EventKind::kAlloc || kind == EventKind::kOom) {
    if (const auto* f = context_.load(std::memory_order_acquire); f != nullptr) [[unlikely]]
      context = ContextId(*f);
  }
  const std::uint64_t session = r->session.load(std::memory_order_relaxed);
  const std::uint64_t k = r->next.fetch_add(1, std::memory_order_relaxed);
  Slot& s = r->slots[k & (r->capacity - 1)];
  // A sequence lock per slot: the tag is cleared before the fields change and set after, so a
  // reader never takes a half-written slot.
  s.tag.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s.ticks.store(Ticks(), std::memory_order_relaxed);
  s.addr.store(addr, std::memory_order_relaxed);
  s.bytes.store(bytes, std::memory_order_relaxed);
  s.stream.store(reinterpret_cast<std::uintptr_t>(stream.handle), std::memory_order_relaxed);
  s.meta.store(
      static_cast<std::uint64_t>(kind) | std::uint64_t{ThreadNumber()} << 8 | context << 32,
      std::memory_order_relaxed);
  s.tag.store(Tag(session, k), std::memory_order_release);
}

std::uint64_t HistoryRecorder::num_recorded() const {
  const Ring* r = ring_.load(std::memory_order_acquire);
  return r == nullptr ? 0 : r->next.load(std::memory_order_relaxed);
}

namespace {

struct Event {
  std::uint64_t ticks, addr, bytes, stream;
  EventKind kind;
  std::uint32_t thread, context;
};

// Turns the kept events into the file's lines: ids per allocation, streams numbered by first
// use, frees of allocations whose record was overwritten left out.
class TraceWriter {
 public:
  TraceWriter(const std::vector<Event>& events, double ns_per_tick, std::uint64_t start_ticks)
      : events_(events), ns_per_tick_(ns_per_tick), start_ticks_(start_ticks) {}

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

  void AssignIds() {
    id_.assign(events_.size(), kNone);
    free_stream_.assign(events_.size(), 0);
    absl::flat_hash_map<std::uint64_t, std::size_t> live, freed, pending;  // addr -> event
    for (std::size_t i = 0; i < events_.size(); ++i) {
      const Event& e = events_[i];
      switch (e.kind) {
        case EventKind::kAlloc:
          id_[i] = next_id_++;
          live[e.addr] = i;
          break;
        case EventKind::kFree:
          if (auto it = live.find(e.addr); it != live.end()) {
            id_[i] = id_[it->second];
            free_stream_[i] = e.stream;
            freed[e.addr] = i;
            live.erase(it);
          }
          break;
        case EventKind::kPending:
          if (auto it = freed.find(e.addr); it != freed.end()) {
            id_[i] = id_[it->second];
            // The replay records the free's stream on the block, as record_stream did.
            free_stream_[it->second] = e.stream;
            pending[e.addr] = i;
            freed.erase(it);
          }
          break;
        case EventKind::kReclaim:
          if (auto it = pending.find(e.addr); it != pending.end()) {
            id_[i] = id_[it->second];
            pending.erase(it);
          }
          break;
        default:
          break;
      }
    }
  }

  std::uint64_t StreamNumber(std::uint64_t handle) {
    if (handle == 0) return 0;
    auto [it, inserted] = streams_.try_emplace(handle, streams_.size() + 1);
    return it->second;
  }

  void Attributes(const Event& e, std::string* out) const {
    const auto ns = static_cast<std::uint64_t>(
        static_cast<double>(e.ticks - std::min(e.ticks, start_ticks_)) * ns_per_tick_);
    absl::StrAppend(out, " t=", ns, " th=", e.thread);
    if (e.context != 0) absl::StrAppend(out, " c=", e.context);
  }

  void Line(std::size_t i, std::string* out) {
    const Event& e = events_[i];
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

  const std::vector<Event>& events_;
  const double ns_per_tick_;
  const std::uint64_t start_ticks_;
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

std::string HistoryRecorder::Stop() {
  absl::MutexLock lock(&mu_);
  Ring* r = ring_.exchange(nullptr, std::memory_order_acq_rel);
  if (!on_.exchange(false, std::memory_order_acq_rel) || r == nullptr) {
    throw std::logic_error(
        absl::StrCat("strata: the history of ", place_, " is not being recorded"));
  }
  const std::int64_t stop_ns = SteadyNs();
  const std::uint64_t stop_ticks = Ticks();
  const std::uint64_t n = r->next.load(std::memory_order_acquire);
  const std::uint64_t session = r->session.load(std::memory_order_relaxed);
  const std::uint64_t kept_from = n > r->capacity ? n - r->capacity : 0;
  const std::uint64_t first = std::max(kept_from, n > max_entries_ ? n - max_entries_ : 0);
  std::vector<Event> events;
  events.reserve(n - first);
  for (std::uint64_t k = first; k < n; ++k) {
    Slot& s = r->slots[k & (r->capacity - 1)];
    const std::uint64_t tag = s.tag.load(std::memory_order_acquire);
    Event e{s.ticks.load(std::memory_order_relaxed),
            s.addr.load(std::memory_order_relaxed),
            s.bytes.load(std::memory_order_relaxed),
            s.stream.load(std::memory_order_relaxed),
            EventKind::kAlloc,
            0,
            0};
    const std::uint64_t meta = s.meta.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (tag != Tag(session, k) || s.tag.load(std::memory_order_relaxed) != tag) continue;
    e.kind = static_cast<EventKind>(meta & 0xff);
    e.thread = static_cast<std::uint32_t>((meta >> 8) & 0xffffff);
    e.context = static_cast<std::uint32_t>(meta >> 32);
    events.push_back(e);
  }
  const double ns_per_tick = stop_ticks > start_ticks_
                                 ? static_cast<double>(stop_ns - start_ns_) /
                                       static_cast<double>(stop_ticks - start_ticks_)
                                 : 1.0;
  nlohmann::json header = {
      {"recorded_by", "strata"},      {"place", place_},
      {"max_entries", max_entries_},  {"recorded", n},
      {"dropped", n - events.size()}, {"seconds", static_cast<double>(stop_ns - start_ns_) * 1e-9},
  };
  std::string text = TraceWriter(events, ns_per_tick, start_ticks_).Write(header, contexts_);
  VLOG(4) << "strata: history of " << place_ << " stopped: " << n << " events, " << events.size()
          << " kept";
  return text;
}

void HistoryRecorder::StopTo(const std::string& path) { WriteFile(path, Stop()); }

void HistoryRecorder::WriteFile(const std::string& path, const std::string& text) {
  errno = 0;
  const std::string tmp = path + ".tmp";
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  bool ok = false;
  if (gz) {
    gzFile f = gzopen(tmp.c_str(), "wb");
    if (f != nullptr) {
      ok = true;
      for (std::size_t at = 0; ok && at < text.size();) {  // gzwrite takes an unsigned count
        const auto n = static_cast<unsigned>(std::min<std::size_t>(text.size() - at, 1 << 30));
        ok = gzwrite(f, text.data() + at, n) == static_cast<int>(n);
        at += n;
      }
      ok = gzclose(f) == Z_OK && ok;
    }
  } else if (std::FILE* f = std::fopen(tmp.c_str(), "wb"); f != nullptr) {
    ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    ok = std::fclose(f) == 0 && ok;
  }
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error(absl::StrCat("strata: cannot write the history to ", path, ": ",
                                          err != 0 ? std::strerror(err) : "write failed"));
  }
}

}  // namespace strata::history
