#include "strategies/vmm/stream_clock.h"

#include <algorithm>
#include <cstddef>
#include <exception>

#include "glog/logging.h"

namespace strata::strategies::vmm {

using platform::Stream;

StreamClock::State::FenceSlot* StreamClock::State::Covering(std::uint64_t e) {
  FenceSlot* best = nullptr;
  for (FenceSlot& f : fences) {
    if (f.epoch >= e && f.epoch != 0 && (best == nullptr || f.epoch < best->epoch)) best = &f;
  }
  return best;
}

void StreamClock::State::NoteWaited(const State* last, std::uint64_t e) {
  for (Waited& w : waited) {
    if (w.last == last) {
      w.epoch = std::max(w.epoch, e);
      return;
    }
  }
  waited[next_waited] = {last, e};  // the oldest entry goes beyond kWaited streams
  next_waited = (next_waited + 1) % kWaited;
}

StreamClock::State& StreamClock::StateOf(Stream stream) {
  // Most frees in a row come from one stream: skip the hash lookup for it.
  if (last_state_ != nullptr && stream == last_stream_) [[likely]]
    return *last_state_;
  auto [it, inserted] = streams_.try_emplace(stream);
  if (inserted) order_.emplace_back(stream, &it->second);
  last_state_ = &it->second;
  last_stream_ = stream;
  return *last_state_;
}

bool StreamClock::Done(Stream stream, std::uint64_t epoch, Scan* scan) {
  if (epoch == 0) return true;
  State& s = StateOf(stream);
  if (epoch <= s.done_epoch) return true;
  State::FenceSlot* f = s.Covering(epoch);
  if (f == nullptr) return false;
  if (scan != nullptr && scan->KnownPending(stream, f->epoch)) return false;
  if (!runtime_->QueryEvent(f->event)) {
    if (scan != nullptr) scan->NotePending(stream, f->epoch);
    return false;
  }
  s.done_epoch = std::max(s.done_epoch, f->epoch);
  return true;
}

bool StreamClock::Done(const LastUse& use, Scan* scan) {
  if (use.epoch == 0) return true;
  if (!use.mixed) {
    if (Done(use.stream, use.epoch, scan)) return true;
    // A pending fence that covers the free will say when it is done; a newer one would say it
    // later (it covers work enqueued since), and recording one per query churns the ring.
    if (StateOf(use.stream).Covering(use.epoch) == nullptr) TryFence(use.stream);
    return false;
  }
  return CheckpointDone(use.checkpoint, scan);
}

bool StreamClock::CheckpointDone(std::uint64_t n, Scan* scan) {
  if (n <= done_checkpoint_) return true;
  if (last_checkpoint_ > done_checkpoint_ && !scan->checkpoint_checked) {
    scan->checkpoint_checked = true;
    bool done = true;
    for (const auto& [stream, epoch] : pending_) {
      if (!Done(stream, epoch, scan)) {
        done = false;
        break;
      }
    }
    if (done) done_checkpoint_ = last_checkpoint_;
  }
  if (n <= done_checkpoint_) return true;
  if (last_checkpoint_ == done_checkpoint_ && n > last_checkpoint_) TakeCheckpoint();
  return n <= done_checkpoint_;
}

void StreamClock::TakeCheckpoint() {
  ++last_checkpoint_;
  pending_.clear();
  for (auto& [stream, state] : order_) {
    State& s = *state;
    if (s.epoch == 0 || Done(stream, s.epoch)) continue;
    if (s.Covering(s.epoch) == nullptr) TryFence(stream);
    pending_.emplace_back(stream, s.epoch);
  }
  if (pending_.empty()) done_checkpoint_ = last_checkpoint_;  // every stream's frees are done
}

platform::Event StreamClock::Fence(Stream stream) {
  State& s = StateOf(stream);
  if (s.last_fence_epoch == s.epoch && s.epoch != 0) return s.Covering(s.epoch)->event;
  return RecordFence(stream, s);
}

platform::Event StreamClock::RecordFence(Stream stream, State& s) {
  // A record on a capturing stream would be a node of the graph, never queryable: no fence
  // while `stream` captures (its captured work does not run now; the caller orders nothing).
  if (runtime_->IsCapturing(stream)) [[unlikely]]
    return platform::Event{};
  // Re-recording a slot is safe: a wait already enqueued on it keeps what it waited for, and a
  // later query of an epoch it covered finds a newer (more conservative) fence. Once a turn of
  // the ring (and at each record while behind), the oldest slot is asked first: if it is still
  // pending, the device is further behind than the ring spans, and the newest is recorded again
  // instead, so that the oldest fence, the first to complete, stays to show frees done
  // (State::kFences). Once a turn: a query at every record cost the mixed benchmark one query
  // per fence (260,461 against 981, emulated).
  State::FenceSlot* slot = &s.fences[s.next_slot];
  if (slot->epoch > s.done_epoch && (s.behind || s.next_slot == 0)) {
    s.behind = !runtime_->QueryEvent(slot->event);
    if (!s.behind) {
      s.done_epoch = slot->epoch;  // what it covers stays known done
    } else {
      slot = &s.fences[0];
      for (State::FenceSlot& f : s.fences) {
        if (f.epoch > slot->epoch) slot = &f;
      }
    }
  }
  if (slot == &s.fences[s.next_slot]) s.next_slot = (s.next_slot + 1) % State::kFences;
  State::FenceSlot& f = *slot;
  if (f.event.handle == nullptr) f.event = runtime_->CreateEvent(place_.device());
  runtime_->RecordEvent(f.event, stream);
  f.epoch = s.epoch;
  s.last_fence_epoch = s.epoch;
  s.taken_back = 0;
  return f.event;
}

void StreamClock::TryFence(Stream stream) {
  State& s = StateOf(stream);
  if (s.gone) return;
  try {
    Fence(stream);
  } catch (const platform::RuntimeError& e) {
    // Destroyed: its last work is known done only after a device synchronize (an EmptyCache).
    s.gone = true;
    LOG(WARNING) << "vmm_pool on " << place_ << ": cannot fence " << stream << " (" << e.what()
                 << "); its pages wait for an empty_cache";
  }
}

bool StreamClock::End(Stream stream) {
  State& s = StateOf(stream);
  ++s.epoch;  // a number for the fence to cover, even where nothing was freed yet
  TryFence(stream);
  if (!s.ended) {
    s.ended = true;
    ++num_ended_;
  }
  VLOG(6) << "vmm_pool on " << place_ << ": " << stream << " ended at free number " << s.epoch;
  return !s.gone;
}

bool StreamClock::ResumeEnded(Stream stream) {
  State& s = StateOf(stream);
  if (!s.ended) return false;
  s.ended = false;
  s.waited = {};  // a new stream has the handle: it made none of the old one's waits
  s.next_waited = 0;
  --num_ended_;
  return true;
}

void StreamClock::RecordFenceOrWarn(Stream stream, State& s) {
  try {
    RecordFence(stream, s);
  } catch (const platform::RuntimeError& e) {
    // The stream is gone: the free still happens (later checks fence on demand, and ordering
    // after a destroyed stream falls back to a device synchronize).
    LOG(WARNING) << "vmm_pool on " << place_ << ": cannot fence " << stream << ": " << e.what();
  }
}

void StreamClock::OrderAfter(Stream last_stream, std::uint64_t epoch, Stream stream) {
  State& last = StateOf(last_stream);
  State* waiter = &StateOf(stream);
  if (epoch <= waiter->WaitedFor(&last)) [[likely]]
    return;                              // an earlier wait of `stream` covers that free
  if (Done(last_stream, epoch)) return;  // the last user's work is complete
  // The oldest fence after the free: waiting for a newer one would also wait for the last
  // user's later work, which serializes the two streams.
  State::FenceSlot* f = last.Covering(epoch);
  try {
    const std::uint64_t covered = f != nullptr ? f->epoch : last.epoch;
    const platform::Event fence = f != nullptr ? f->event : Fence(last_stream);
    if (fence.handle == nullptr) return;  // `last_stream` captures: nothing runs to wait for
    runtime_->StreamWaitEvent(stream, fence);
    ++num_waits_;
    // (`stream` does not capture: CUDA refuses a capturing stream's wait on a fence recorded
    // outside the capture, and fences are never recorded inside one.)
    waiter->NoteWaited(&last, covered);
    VLOG(8) << "vmm_pool: " << stream << " waits for " << last_stream << " on the device";
  } catch (const platform::RuntimeError& e) {
    // The last user's stream is gone (destroyed): its work cannot be fenced any more.
    LOG(WARNING) << "vmm_pool on " << place_ << ": cannot order " << stream << " after "
                 << last_stream << " (" << e.what() << "); synchronizing the device instead";
    runtime_->SynchronizeDevice(place_.device());
    last.done_epoch = last.epoch;
  }
}

void StreamClock::OrderAfter(const LastUse& use, Stream stream) {
  if (use.epoch == 0) return;
  if (!use.mixed) {
    if (use.stream != stream) OrderAfter(use.stream, use.epoch, stream);
    return;
  }
  OrderAfterAllStreams(stream);  // freed by several streams
}

void StreamClock::OrderAfterAllStreams(Stream stream) {
  // The waiter's state first: OrderAfter keeps its waits there, and a stream met for the first
  // time joins order_, which must not grow under the loop.
  StateOf(stream);
  for (std::size_t i = 0; i < order_.size(); ++i) {
    const auto [other, state] = order_[i];
    if (other != stream && state->epoch != 0) OrderAfter(other, state->epoch, stream);
  }
}

bool StreamClock::FencesToWaitFor(std::vector<platform::Event>* fences) {
  const std::size_t before = fences->size();
  bool gone = false;
  for (auto& [stream, state] : order_) {
    State& s = *state;
    if (s.epoch == 0 || Done(stream, s.epoch)) continue;
    if (!s.gone) {
      try {
        const platform::Event fence = Fence(stream);
        if (fence.handle != nullptr) fences->push_back(fence);
        continue;
      } catch (const platform::RuntimeError& e) {
        s.gone = true;
        LOG(WARNING) << "vmm_pool on " << place_ << ": cannot fence " << stream << " (" << e.what()
                     << ")";
      }
    }
    gone = true;
  }
  if (fences->size() != before || gone) ++num_host_waits_;
  return gone;
}

void StreamClock::CatchUpGoneStreams() {
  for (auto& [stream, state] : order_) {
    State& s = *state;
    if (s.gone) s.done_epoch = s.epoch;
  }
}

void StreamClock::SynchronizeLastFences() {
  for (auto& [stream, s] : order_) {
    State& state = *s;
    // Frees since the last fence (those of quick reuse are not fenced) are waited for too.
    if (state.epoch != state.last_fence_epoch) TryFence(stream);
    if (state.last_fence_epoch == 0) continue;
    try {
      runtime_->SynchronizeEvent(state.Covering(state.last_fence_epoch)->event);
    } catch (const std::exception& e) {
      LOG(ERROR) << "vmm_pool on " << place_ << ": cannot wait for " << stream << ": " << e.what();
    }
  }
}

void StreamClock::DestroyEvents() {
  for (auto& [stream, s] : order_) {
    State& state = *s;
    for (auto& f : state.fences) {
      if (f.event.handle != nullptr) runtime_->DestroyEvent(f.event);
      f.event = platform::Event{};
    }
  }
}

}  // namespace strata::strategies::vmm
