// StreamClock: the virtual-memory pool's record of stream order. Each stream's frees are numbered
// (epochs); fences are events recorded on a stream, each covering the frees numbered up to its
// epoch. Memory last freed by free number `e` of stream A is safe for stream B once a fence of A
// covering `e` has completed (a query), or after B waits for that fence on the device.
//
// Owns: the per-stream numbers, the fence rings and their events, and the counts of device-side
// waits and of host waits for every stream (WaitForStreams).
//
// Contract
// - Not thread-safe: the pool calls it under its lock.
// - The host never waits here except in SynchronizeLastFences (teardown) and, when a stream to
//   order after is gone, OrderAfter's fallback to a device synchronize.
// - Throws platform::RuntimeError from the runtime (Fence, RecordFence).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "platform/device_runtime.h"
#include "platform/event.h"
#include "platform/place.h"
#include "platform/stream.h"

namespace strata::strategies::vmm {

// A record of the last free through a page: its stream and free number (0: none), `mixed` once
// two streams freed there: then every stream's frees up to the last note must be done, which
// checkpoint number `checkpoint` (StreamClock::next_checkpoint at that note) tells.
struct LastUse {
  platform::Stream stream;
  std::uint64_t epoch = 0;
  bool mixed = false;
  std::uint64_t checkpoint = 0;

  void Clear() { *this = LastUse{}; }
  // Adds a free (`s`, number `e`; 0: none); `next_checkpoint` is the clock's. Holds are released
  // out of free order, so a record of the same stream keeps the newest number.
  void Note(platform::Stream s, std::uint64_t e, std::uint64_t next_checkpoint) {
    if (e == 0) return;
    if (epoch == 0 || stream != s) {
      mixed = mixed || epoch != 0;
      stream = s;
      epoch = e;
    } else if (e > epoch) {
      epoch = e;
    }
    if (mixed) MarkMixed(next_checkpoint);
  }
  // Freed on several streams: every stream's frees so far must be done.
  void MarkMixed(std::uint64_t next_checkpoint) {
    mixed = true;
    if (epoch == 0) epoch = 1;  // a use to wait for
    if (next_checkpoint > checkpoint) checkpoint = next_checkpoint;
  }
};

class StreamClock {
 public:
  // The answers of one decision (a placement weighing its fits, one walk of the idle pages):
  // one query of the pending checkpoint, for the pages of several streams it meets, and no
  // second query of a stream's fence found pending, nor of a later one (a stream's fences
  // complete in order). Without it a placement on a device far behind the host queried the same
  // pending fence once per page of every fit: a 60-step bert_infer_dynamic trace replayed with a
  // lag of 1,024 kernels made 760 queries an allocation, 0.05 with it (the same placements; the
  // host's time 38.9 -> 8.0 us an event). Use a fresh Scan for each decision: an answer it keeps
  // may be stale afterwards.
  struct Scan {
    bool checkpoint_checked = false;
    // The oldest fence found pending, per stream (the first kMemo streams met).
    static constexpr int kMemo = 4;
    std::array<std::pair<platform::Stream, std::uint64_t>, kMemo> pending{};
    int num_pending = 0;

    // Whether a fence of `stream` covering free number `fence_epoch` is known pending.
    bool KnownPending(platform::Stream stream, std::uint64_t fence_epoch) const {
      for (int i = 0; i < num_pending; ++i) {
        if (pending[i].first == stream) return fence_epoch >= pending[i].second;
      }
      return false;
    }
    void NotePending(platform::Stream stream, std::uint64_t fence_epoch) {
      for (int i = 0; i < num_pending; ++i) {
        if (pending[i].first == stream) {
          pending[i].second = std::min(pending[i].second, fence_epoch);
          return;
        }
      }
      if (num_pending < kMemo) pending[num_pending++] = {stream, fence_epoch};
    }
  };

  StreamClock(platform::DeviceRuntime* runtime, const platform::Place& place)
      : runtime_(runtime), place_(place) {}
  StreamClock(const StreamClock&) = delete;
  StreamClock& operator=(const StreamClock&) = delete;

  // Numbers a free on `stream` and returns its number. Records a fence when `fence_due` says so
  // (given the frees since the last fence and the number of streams seen), unless every earlier
  // free since then was taken back (TakenBack); a stream that cannot be fenced (destroyed) gets a
  // warning, and the free still happens.
  template <typename FenceDue>
  std::uint64_t NumberFree(platform::Stream stream, FenceDue&& fence_due) {
    State& s = StateOf(stream);
    if (s.ended) [[unlikely]]
      return s.epoch;  // work enqueued before End: its fence covers the free
    ++s.epoch;
    const std::uint64_t since = s.epoch - s.last_fence_epoch;
    if (fence_due(since, streams_.size()) && s.taken_back + 1 < since) [[unlikely]]
      RecordFenceOrWarn(stream, s);
    return s.epoch;
  }
  // A free on `stream` was taken back by the stream itself before anything else could use its
  // memory (quick reuse): stream order covers it, so no fence is needed for it. A block freed and
  // taken back in a loop then records no event (on a GPU a record costs about as much as a
  // hundred such pairs). Frees of which only some were taken back are fenced as before: skipping
  // those fences made bert_infer_dynamic replay at 1.049 of its peak instead of 1.028 (pages seen
  // done later).
  void TakenBack(platform::Stream stream) {
    State& s = StateOf(stream);
    if (s.epoch - s.last_fence_epoch > s.taken_back) ++s.taken_back;
  }
  // A new number on `stream` without a free: a fence recorded later covers what is ordered
  // before this point.
  std::uint64_t Mark(platform::Stream stream) { return ++StateOf(stream).epoch; }

  // Whether a fence on `stream` covering free number `epoch` has completed (query only; none
  // when `scan` already found that fence, or an older one of the stream, pending).
  bool Done(platform::Stream stream, std::uint64_t epoch, Scan* scan = nullptr);
  // Whether the work of `use` is complete (queries); fences its stream(s) otherwise, so that a
  // later query can say yes.
  bool Done(const LastUse& use, Scan* scan);
  // Checkpoints order records of several streams (mixed): checkpoint n holds every stream's free
  // number at the moment it was taken, with a fence recorded on each stream past it. A mixed
  // record noted at time T carries the number of the first checkpoint taken after T, and is done
  // once that checkpoint is. One checkpoint is pending at a time: a query of a record it does not
  // cover waits for it to complete before the next is taken, so queries never churn fences.
  std::uint64_t next_checkpoint() const { return last_checkpoint_ + 1; }
  // A fence on `stream` covering every free so far (recorded now unless one already does). An
  // empty event while `stream` captures.
  platform::Event Fence(platform::Stream stream);

  // `stream` is about to be destroyed (AllocatorFacade::EndStream): a new fence covering its
  // frees so far (also when it had ended before), after which nothing here calls the runtime on
  // the handle (CUDA does not check a destroyed one) until Resume. Frees made through it
  // meanwhile (of blocks whose work was enqueued before the fence) take the fence's number.
  // Returns false when the stream was already gone (no fence could be recorded).
  bool End(platform::Stream stream);
  // `stream` allocates: if End saw its handle, a new stream has it, ordered after the ended one's
  // fence by the caller. Returns whether it had ended. One compare while no stream is ended.
  bool Resume(platform::Stream stream) {
    if (num_ended_ == 0) [[likely]]
      return false;
    return ResumeEnded(stream);
  }

  // Makes `stream` safe to use memory whose last free was free number `epoch` of `last`: nothing
  // when that is done, `last` is `stream`'s own order, or an earlier wait of `stream` covers it;
  // else a device-side wait for the oldest fence after it. A destroyed `last` falls back to a
  // device synchronize.
  void OrderAfter(platform::Stream last, std::uint64_t epoch, platform::Stream stream);
  // The same for a page record (after every other stream when it is mixed).
  void OrderAfter(const LastUse& use, platform::Stream stream);
  // After every other stream's frees so far.
  void OrderAfterAllStreams(platform::Stream stream);

  // The fences a host wait for every stream's frees so far needs (recorded where missing);
  // counts a host wait when there are any. The caller waits, outside its lock. Returns whether
  // a stream with pending frees is gone (destroyed: no fence can be recorded on it); then the
  // caller synchronizes the device and calls CatchUpGoneStreams.
  bool FencesToWaitFor(std::vector<platform::Event>* fences);
  // After a device synchronize: every free of a destroyed stream is done.
  void CatchUpGoneStreams();
  // Teardown: waits (host) for each stream's latest free (fencing it where no fence covers it
  // yet).
  void SynchronizeLastFences();
  void DestroyEvents();

  std::int64_t num_waits() const { return num_waits_; }
  std::int64_t num_host_waits() const { return num_host_waits_; }

 private:
  // A ring of recent fences lets another stream wait for the work up to a block's free rather
  // than for everything the stream did since. A device further behind than the ring spans
  // keeps its oldest fences (RecordFence): overwritten while pending, they never showed a free
  // done, and the pool mapped every page anew, never unmapping one (a 60-step
  // bert_infer_dynamic trace replayed with a lag of 1,024 kernels: 46,034 maps, 1.372 of its
  // peak, and out of mappings when repeated; now 5,337 maps and 1.092).
  struct State {
    static constexpr int kFences = 8;
    struct FenceSlot {
      platform::Event event;    // created on first use
      std::uint64_t epoch = 0;  // the frees it covers (0: never recorded)
    };
    std::uint64_t epoch = 0;       // frees made on the stream so far
    std::uint64_t done_epoch = 0;  // frees known complete (a fence seen done, or a device sync)
    std::uint64_t last_fence_epoch = 0;
    bool gone = false;             // a fence could not be recorded: the stream was destroyed
    bool ended = false;            // End: no call on the handle until Resume
    std::uint64_t taken_back = 0;  // frees since the last fence taken back (TakenBack)
    int next_slot = 0;
    bool behind = false;  // the oldest fence was pending when a new one was recorded
    std::array<FenceSlot, kFences> fences;
    // Device-side waits this stream made: for each stream waited for (the last kWaited), the
    // frees the newest fence it waited for covers. Stream order keeps them, so a wait for work
    // they cover is not made again: on a device behind the host, blocks and pages of one
    // stream's work taken by another asked for the same fence again and again
    // (multi_model_streams replayed at device lag 64: 5,327 -> 113 waits in the last of three
    // passes, one driver call each; docs/benchmarks/2026-11-28-run34.md).
    struct Waited {
      const State* last = nullptr;
      std::uint64_t epoch = 0;
    };
    static constexpr int kWaited = 8;
    std::array<Waited, kWaited> waited{};
    int next_waited = 0;
    // The frees of `last` that this stream's waits cover (0: none known).
    std::uint64_t WaitedFor(const State* last) const {
      for (const Waited& w : waited) {
        if (w.last == last) return w.epoch;
      }
      return 0;
    }
    void NoteWaited(const State* last, std::uint64_t e);
    // The oldest recorded fence covering free number `e`; nullptr if none does yet.
    FenceSlot* Covering(std::uint64_t e);
  };

  State& StateOf(platform::Stream stream);
  // Whether checkpoint `n` is complete: queries the pending one (once per scan), takes a new one
  // when none is pending and `n` needs it.
  bool CheckpointDone(std::uint64_t n, Scan* scan);
  void TakeCheckpoint();
  // Records a new fence on `stream` (whose state is `s`) covering every free so far.
  platform::Event RecordFence(platform::Stream stream, State& s);
  void RecordFenceOrWarn(platform::Stream stream, State& s);
  // Fence(stream) for a query that may fail: a destroyed stream is marked gone, not an error.
  void TryFence(platform::Stream stream);
  bool ResumeEnded(platform::Stream stream);

  platform::DeviceRuntime* const runtime_;
  const platform::Place place_;
  // Node storage: StateOf's one-entry cache and order_ hold pointers into it.
  absl::node_hash_map<platform::Stream, State> streams_;
  // The streams in order of first use: every walk over the streams goes this way, so that a run
  // does not depend on the handles' hash order (the emulated device's replays then repeat
  // exactly with several streams too).
  std::vector<std::pair<platform::Stream, State*>> order_;
  platform::Stream last_stream_;
  State* last_state_ = nullptr;
  std::uint64_t last_checkpoint_ = 0;  // the newest taken (0: none)
  std::uint64_t done_checkpoint_ = 0;  // the newest seen complete
  // The pending checkpoint's free numbers (last_checkpoint_ > done_checkpoint_): capacity kept.
  std::vector<std::pair<platform::Stream, std::uint64_t>> pending_;
  std::int64_t num_waits_ = 0;
  int num_ended_ = 0;                // streams whose State::ended is set
  std::int64_t num_host_waits_ = 0;  // FencesToWaitFor calls that found work to wait for
};

}  // namespace strata::strategies::vmm
