#include "history/history_recorder.h"

#include <cxxabi.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"
#include "history/trace_file.h"
#include "history/trace_writer.h"
#include "nlohmann/json.hpp"

namespace strata::history {

using internal::g_now_ns;
using internal::kIndexBits;
using internal::kIndexMask;
using internal::kSessionMask;
using internal::Tag;

namespace {

// Nanoseconds of the coarse monotonic clock: a read of the kernel's shared page (a few
// nanoseconds, no system call, no time-stamp counter, which costs 25 ns in some virtual machines)
// at the resolution of the kernel's tick (1 to 4 ms). Events keep their order within a thread
// exactly; across threads, WriteTrace orders each tick's events by what each address allows.
inline std::uint64_t CoarseNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// Leaked on purpose: a recorder alive at exit may still hold it.
class Ticker {
 public:
  static Ticker& Get() {
    static Ticker* const ticker = new Ticker();
    return *ticker;
  }
  // The first user starts a thread; the time is current when this returns.
  void Acquire() {
    std::lock_guard<std::mutex> lock(mu_);
    g_now_ns.store(CoarseNs(), std::memory_order_relaxed);
    if (users_ == 0) thread_ = std::thread([this, run = ++generation_] { Run(run); });
    ++users_;  // after the thread: a failed start holds nothing
  }
  // The last user stops the thread and joins it (a new one may have started meanwhile).
  void Release() {
    std::thread done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--users_ != 0) return;
      ++generation_;
      done = std::move(thread_);
    }
    wake_.notify_all();
    done.join();
  }

 private:
  void Run(std::uint64_t run) {
    std::unique_lock<std::mutex> lock(mu_);
    while (generation_ == run) {
      g_now_ns.store(CoarseNs(), std::memory_order_relaxed);
      wake_.wait_for(lock, std::chrono::microseconds(500));
    }
  }
  std::mutex mu_;
  std::condition_variable wake_;
  int users_ = 0;                 // guarded by mu_
  std::uint64_t generation_ = 0;  // guarded by mu_: a thread runs while it is its own
  std::thread thread_;
};

// Thread numbers for the file: 1 for the first thread that ever recorded, and so on.
std::atomic<std::uint32_t> g_threads{0};
// Sessions of every recorder of the process: a thread's cursor never mistakes a new ring at a
// freed ring's address for its own.
std::atomic<std::uint64_t> g_sessions{0};

}  // namespace

HistoryRecorder::HistoryRecorder(std::string place) : place_(std::move(place)) {}

HistoryRecorder::~HistoryRecorder() {
  absl::MutexLock lock(&mu_);
  if (on_.load(std::memory_order_relaxed)) Ticker::Get().Release();
}

void HistoryRecorder::Start(HistoryOptions options) {
  if (options.max_entries == 0 || options.max_entries > kMaxEntries) {
    throw std::invalid_argument(absl::StrCat("strata: history max_entries must be in [1, ",
                                             kMaxEntries, "], got ", options.max_entries));
  }
  // Room for max_entries events, and for the chunks that threads have begun and not filled.
  const std::size_t chunks = (options.max_entries + kChunk - 1) / kChunk + 4;
  absl::MutexLock lock(&mu_);
  // The ticker is held exactly while on_ is true (a restart lets go and takes it again).
  if (on_.exchange(false, std::memory_order_relaxed)) Ticker::Get().Release();
  ring_.store(nullptr, std::memory_order_release);
  Ring* ring = nullptr;
  for (auto& r : rings_) {
    if (r->chunks == chunks) ring = r.get();
  }
  if (ring == nullptr) {
    rings_.push_back(std::make_unique<Ring>(chunks));
    ring = rings_.back().get();
  }
  const std::uint64_t session =
      (g_sessions.fetch_add(1, std::memory_order_relaxed) + 1) & kSessionMask;
  ring->session.store(session == 0 ? 1 : session, std::memory_order_relaxed);
  ring->next_chunk.store(0, std::memory_order_relaxed);
  ring->dropped.store(0, std::memory_order_relaxed);
  max_entries_ = options.max_entries;
  contexts_.clear();
  const std::function<std::string()>* context = nullptr;
  if (options.context) {
    context_fns_.push_back(
        std::make_unique<std::function<std::string()>>(std::move(options.context)));
    context = context_fns_.back().get();
  }
  context_.store(context, std::memory_order_release);
  Ticker::Get().Acquire();
  start_ns_ = g_now_ns.load(std::memory_order_relaxed);
  start_steady_ns_ = std::chrono::steady_clock::now().time_since_epoch().count();
  ring_.store(ring, std::memory_order_release);
  on_.store(true, std::memory_order_release);
  VLOG(4) << "strata: recording the history of " << place_ << ", the newest " << options.max_entries
          << " events";
}

std::uint32_t HistoryRecorder::ContextId(const std::function<std::string()>& context) {
  std::string text;
  try {
    text = context();
  } catch (abi::__forced_unwind&) {
    throw;  // the thread is ending (pthread_exit, a cancellation): let it
  } catch (const std::exception& e) {
    // The allocation it describes is already made: a throwing context must not lose it (the
    // caller would never see its pointer) nor replace an out-of-memory error.
    text = absl::StrCat("<context callback threw: ", e.what(), ">");
  } catch (...) {
    text = "<context callback threw>";
  }
  absl::MutexLock lock(&mu_);
  auto [it, inserted] =
      contexts_.try_emplace(std::move(text), static_cast<std::uint32_t>(contexts_.size() + 1));
  return it->second;
}

void HistoryRecorder::Claim(Ring* r, std::uint64_t session, Cursor& c) {
  if (c.thread == 0) c.thread = g_threads.fetch_add(1, std::memory_order_relaxed) + 1;
  const std::uint64_t chunk = r->next_chunk.fetch_add(1, std::memory_order_relaxed);
  Slot* slots = r->Chunk(chunk);
  if (chunk >= r->chunks) {
    // This chunk's slots held chunk - chunks: count what is overwritten.
    std::uint64_t lost = 0;
    for (std::size_t i = 0; i < kChunk; ++i) {
      const std::uint64_t tag = slots[i].tag.load(std::memory_order_relaxed);
      if (tag >> kIndexBits == session && (tag & kIndexMask) != 0) ++lost;
    }
    if (lost != 0) r->dropped.fetch_add(lost, std::memory_order_relaxed);
  }
  c.ring = r;
  c.slots = slots;
  c.session = session;
  c.chunk = chunk;
  c.next = chunk * kChunk;
  c.end = c.next + kChunk;
}

std::string HistoryRecorder::Stop() {
  absl::MutexLock lock(&mu_);
  Ring* r = ring_.exchange(nullptr, std::memory_order_acq_rel);
  if (!on_.exchange(false, std::memory_order_acq_rel) || r == nullptr) {
    throw std::logic_error(
        absl::StrCat("strata: the history of ", place_, " is not being recorded"));
  }
  Ticker::Get().Release();  // it was recording: it held one
  const std::int64_t seconds_ns =
      std::chrono::steady_clock::now().time_since_epoch().count() - start_steady_ns_;
  const std::uint64_t session = r->session.load(std::memory_order_relaxed);
  const std::uint64_t chunks = r->next_chunk.load(std::memory_order_acquire);
  const std::uint64_t in_ring = r->chunks;
  const std::uint64_t first_chunk = chunks > in_ring ? chunks - in_ring : 0;
  std::vector<RecordedEvent> events;
  for (std::uint64_t k = first_chunk * kChunk; k < chunks * kChunk; ++k) {
    Slot& s = r->Chunk(k / kChunk)[k % kChunk];
    const std::uint64_t tag = s.tag.load(std::memory_order_acquire);
    if (tag != Tag(session, k)) continue;  // never written, being written, or overwritten
    RecordedEvent e{s.time_ns.load(std::memory_order_relaxed),
                    k,
                    s.addr.load(std::memory_order_relaxed),
                    s.bytes.load(std::memory_order_relaxed),
                    s.stream.load(std::memory_order_relaxed),
                    EventKind::kAlloc,
                    0,
                    0};
    const std::uint64_t meta = s.meta.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.tag.load(std::memory_order_relaxed) != tag) continue;
    e.kind = static_cast<EventKind>(meta & 0xff);
    e.thread = static_cast<std::uint32_t>((meta >> 8) & 0xffffff);
    e.context = static_cast<std::uint32_t>(meta >> 32);
    events.push_back(e);
  }
  const std::uint64_t dropped = r->dropped.load(std::memory_order_relaxed);
  nlohmann::json header = {
      {"recorded_by", "strata"},     {"place", place_},
      {"max_entries", max_entries_}, {"recorded", events.size() + dropped},
      {"dropped", dropped},          {"seconds", static_cast<double>(seconds_ns) * 1e-9},
  };
  const std::size_t kept = std::min(events.size(), max_entries_);
  std::string text = WriteTrace(std::move(events), max_entries_, start_ns_, header, contexts_);
  VLOG(4) << "strata: history of " << place_ << " stopped: " << kept << " events kept, " << dropped
          << " dropped";
  return text;
}

void HistoryRecorder::StopTo(const std::string& path) {
  if (!recording()) {
    throw std::logic_error(
        absl::StrCat("strata: the history of ", place_, " is not being recorded"));
  }
  TraceFile file(path);  // before Stop: a path that cannot be written leaves the recording running
  file.Commit(Stop());
}

void HistoryRecorder::WriteFile(const std::string& path, const std::string& text) {
  TraceFile(path).Commit(text);
}

}  // namespace strata::history
