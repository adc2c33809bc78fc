// HistoryRecorder: the live memory history of one place (docs/HISTORY.md). Layers report
// events (allocations and frees from the statistics layer, deferred frees from the stream-safe
// layer, device calls from RecordingRuntime, OOMs and empty-caches from the facade) while
// recording is on; Stop turns them into a trace file that strata-replay and strata-viz read.
//
// Ring buffer: Start(options) sets aside a ring of slots (max_entries, rounded up to chunks of
// kChunk, plus four chunks); each thread claims kChunk slots at a time (one atomic add per chunk)
// and fills them in order, so the oldest chunks are overwritten first. Stop reads the ring,
// skips slots a writer was still filling (a sequence tag per slot), orders the events
// (trace_writer.h), keeps the newest max_entries and leaves out frees, deferrals and reclaims of
// allocations whose record was overwritten.
//
// Time: the coarse monotonic clock (the kernel tick's resolution, 1-4 ms), sampled every half
// millisecond by a ticker thread while some recorder records, so that an event reads one word.
// Order is exact within a thread and follows each address's events across threads.
//
// Cost (hot path, while recording): a thread-local cursor, the ticker's time, seven relaxed
// stores; an atomic add per 64 events. Off: the callers test recording() (one relaxed load) and
// do nothing else. No lock, no allocation per event; a context callback (when set) runs on
// allocations and OOMs only, and its texts are interned under a mutex.
//
// Contract
// - Thread-safe: Record may run on any threads concurrently with each other and with Start and
//   Stop. An event recorded concurrently with Stop may be missing from the file (never torn).
// - Start while recording restarts (events so far are dropped). Stop without Start throws
//   std::logic_error. Start throws std::invalid_argument for max_entries of 0 or above
//   kMaxEntries.
// - Memory: the slots of each ring size asked for stay allocated until the recorder is destroyed
//   (a writer that raced Stop may still touch them); 48 bytes a slot, 6 MB by default.
// - Streams are numbered in the file in order of first use, the null stream as 0.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "platform/stream.h"

namespace strata::history {

enum class EventKind : std::uint8_t {
  kAlloc,       // addr, bytes (requested), stream
  kFree,        // addr, bytes, stream (the allocation's)
  kPending,     // addr, bytes: count of recorded streams, stream: the first recorded stream
  kReclaim,     // addr
  kSegMalloc,   // addr, bytes
  kSegFree,     // addr, bytes
  kSegCreate,   // addr: the physical handle, bytes
  kSegRelease,  // addr: the physical handle, bytes
  kSegMap,      // addr, bytes
  kSegUnmap,    // addr, bytes
  kOom,         // bytes (requested), stream
  kEmptyCache,  // bytes released
};

struct HistoryOptions {
  // The last 64K allocation/free pairs or so (6 MB): enough to see what led to an OOM, and small
  // enough to stay in the CPU's caches. Raise it to record whole runs.
  static constexpr std::size_t kDefaultEntries = std::size_t{1} << 17;
  // The newest events kept.
  std::size_t max_entries = kDefaultEntries;
  // Called on each allocation and OOM when set; its text (a stack, a layer name) is written
  // once per distinct text as a `ctx` line and referenced by id. It runs on the allocating
  // thread, outside every allocator lock; it must not allocate from the recorded place. An
  // exception from it is recorded as the text "<context callback threw: ...>", never thrown.
  std::function<std::string()> context;
};

class HistoryRecorder {
 public:
  static constexpr std::size_t kMaxEntries = std::size_t{1} << 28;

  // `place` names the place in the file's header.
  explicit HistoryRecorder(std::string place);
  ~HistoryRecorder();
  HistoryRecorder(const HistoryRecorder&) = delete;
  HistoryRecorder& operator=(const HistoryRecorder&) = delete;

  void Start(HistoryOptions options);
  // Stops recording and returns the trace text (docs/HISTORY.md).
  std::string Stop();
  // Stop, then writes the text to `path` (gzip-compressed when it ends in ".gz") through a
  // TraceFile (history/trace_file.h). Throws std::runtime_error naming the path when it cannot:
  // a path that cannot be opened leaves the recording running; a write that fails after it
  // stopped loses the recording.
  void StopTo(const std::string& path);

  // Writes trace text to `path` as StopTo does (a TraceFile); std::runtime_error naming the path
  // when it cannot.
  static void WriteFile(const std::string& path, const std::string& text);

  bool recording() const { return on_.load(std::memory_order_relaxed); }

  // Hot (inline, below): callers test recording() first.
  void Record(EventKind kind, std::uint64_t addr, std::uint64_t bytes, platform::Stream stream);
  void Record(EventKind kind, const void* addr, std::uint64_t bytes, platform::Stream stream) {
    Record(kind, reinterpret_cast<std::uintptr_t>(addr), bytes, stream);
  }

  // Slots are claimed by each thread this many at a time.
  static constexpr std::size_t kChunk = 64;

  struct Cursor;  // a thread's chunk (internal::t_cursor)

 private:
  struct Slot;
  struct Ring;
  std::uint32_t ContextId(const std::function<std::string()>& context);
  void Claim(Ring* r, std::uint64_t session, Cursor& c);

  const std::string place_;
  std::atomic<bool> on_{false};
  std::atomic<Ring*> ring_{nullptr};
  absl::Mutex mu_;  // Start/Stop, the rings' ownership, the context table
  std::vector<std::unique_ptr<Ring>> rings_ ABSL_GUARDED_BY(mu_);
  // The context callback of the current session (null: none). Callbacks of earlier sessions
  // stay alive with the recorder: a writer that raced Start may still call one.
  std::atomic<const std::function<std::string()>*> context_{nullptr};
  std::vector<std::unique_ptr<std::function<std::string()>>> context_fns_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::uint32_t> contexts_ ABSL_GUARDED_BY(mu_);
  std::size_t max_entries_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t start_ns_ = 0;  // the clock's, at Start
  std::int64_t start_steady_ns_ = 0;
};

// ---- the hot path, inline: what an event costs is what the callers' code does --------------

namespace internal {

// The clock events read: the coarse clock, sampled by a ticker thread every half millisecond
// while some recorder records (history_recorder.cc). An event reads one shared word (about a
// nanosecond) instead of calling the clock (a few nanoseconds, twice per allocation/free pair),
// at the same resolution.
alignas(64) inline std::atomic<std::uint64_t> g_now_ns{0};

// A slot's tag: the session in the top bits, the slot's claim number + 1 below (0: being
// written).
inline constexpr int kIndexBits = 44;
inline constexpr std::uint64_t kIndexMask = (std::uint64_t{1} << kIndexBits) - 1;
inline constexpr std::uint64_t kSessionMask = (std::uint64_t{1} << (64 - kIndexBits)) - 1;
inline std::uint64_t Tag(std::uint64_t session, std::uint64_t index) {
  return (session << kIndexBits) | ((index + 1) & kIndexMask);
}

}  // namespace internal

struct HistoryRecorder::Slot {
  std::atomic<std::uint64_t> tag{0};
  std::atomic<std::uint64_t> time_ns{0};
  std::atomic<std::uint64_t> addr{0};
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<std::uint64_t> stream{0};
  std::atomic<std::uint64_t> meta{0};  // kind | thread << 8 | context << 32
};

// Slots are claimed a chunk at a time (one atomic add per kChunk events of a thread); the chunk
// claimed as number c is chunk c mod `chunks` of the ring, and is overwritten once chunk
// c + chunks is claimed.
struct HistoryRecorder::Ring {
  explicit Ring(std::size_t n) : chunks(n), slots(new Slot[n * kChunk]) {}
  const std::size_t chunks;
  const std::unique_ptr<Slot[]> slots;
  Slot* Chunk(std::uint64_t c) const { return &slots[(c % chunks) * kChunk]; }
  std::atomic<std::uint64_t> session{0};
  std::atomic<std::uint64_t> dropped{0};  // events in chunks overwritten this session
  alignas(64) std::atomic<std::uint64_t> next_chunk{0};
};

// The calling thread's chunk; one per thread (a thread recording two places at once claims a
// new chunk at each switch).
struct HistoryRecorder::Cursor {
  const Ring* ring = nullptr;
  Slot* slots = nullptr;  // the chunk's
  std::uint64_t session = 0;
  std::uint64_t chunk = 0;
  std::uint64_t next = 0;  // the next slot's claim number
  std::uint64_t end = 0;
  std::uint32_t thread = 0;
};

namespace internal {
inline thread_local HistoryRecorder::Cursor t_cursor;
}  // namespace internal

inline void HistoryRecorder::Record(EventKind kind, std::uint64_t addr, std::uint64_t bytes,
                                    platform::Stream stream) {
  Ring* r = ring_.load(std::memory_order_acquire);
  if (r == nullptr) return;
  std::uint64_t context = 0;
  if (kind == EventKind::kAlloc || kind == EventKind::kOom) {
    if (const auto* f = context_.load(std::memory_order_acquire); f != nullptr) [[unlikely]]
      context = ContextId(*f);
  }
  const std::uint64_t session = r->session.load(std::memory_order_relaxed);
  Cursor& c = internal::t_cursor;
  // A new chunk when this one is full, belongs to another ring or session, or was overwritten
  // since (the ring went round while this thread recorded nothing). Sessions are unique in the
  // process, and a chunk of this session was claimed below next_chunk.
  const std::uint64_t claimed = r->next_chunk.load(std::memory_order_relaxed);
  if (c.next == c.end || c.ring != r || c.session != session || c.chunk >= claimed ||
      c.chunk + r->chunks <= claimed) [[unlikely]] {
    Claim(r, session, c);
  }
  const std::uint64_t k = c.next++;
  Slot& s = c.slots[k - c.chunk * kChunk];
  // A sequence lock per slot: the tag is cleared before the fields change and set after, so a
  // reader never takes a half-written slot.
  s.tag.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s.time_ns.store(internal::g_now_ns.load(std::memory_order_relaxed), std::memory_order_relaxed);
  s.addr.store(addr, std::memory_order_relaxed);
  s.bytes.store(bytes, std::memory_order_relaxed);
  s.stream.store(reinterpret_cast<std::uintptr_t>(stream.handle), std::memory_order_relaxed);
  s.meta.store(static_cast<std::uint64_t>(kind) | std::uint64_t{c.thread} << 8 | context << 32,
               std::memory_order_relaxed);
  s.tag.store(internal::Tag(session, k), std::memory_order_release);
}

}  // namespace strata::history
