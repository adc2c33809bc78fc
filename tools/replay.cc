#include "tools/replay.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocation/bad_alloc.h"
#include "facade/allocator_facade.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"

namespace strata::tools {

namespace {

using allocation::AllocationPtr;
using allocation::kAggregate;

// The device calls, waits and syncs between two readings of the statistics (`syncs`: the
// runtime's count of syncs in between).
ReplayResult::PassCalls CallsBetween(const allocation::MemoryStats& before,
                                     const allocation::MemoryStats& after, std::uint64_t syncs) {
  ReplayResult::PassCalls c;
  c.device_mallocs = after.num_device_alloc - before.num_device_alloc;
  c.device_frees = after.num_device_free - before.num_device_free;
  c.num_device_map = after.num_device_map - before.num_device_map;
  c.num_device_unmap = after.num_device_unmap - before.num_device_unmap;
  c.num_stream_waits = after.num_stream_waits - before.num_stream_waits;
  c.syncs = syncs;
  return c;
}

nlohmann::ordered_json CallsJson(const ReplayResult::PassCalls& c) {
  return {{"device_mallocs", c.device_mallocs},     {"device_frees", c.device_frees},
          {"num_device_map", c.num_device_map},     {"num_device_unmap", c.num_device_unmap},
          {"num_stream_waits", c.num_stream_waits}, {"syncs", c.syncs}};
}

// Streams of the trace mapped onto the runtime: trace stream 0 is the default stream; a runtime
// stream is created for each other stream number the trace uses (not for every number up to
// the largest: the emulated device runs a thread per stream). The facade that allocated on the
// streams is told before each is destroyed (AllocatorFacade::EndStream): it outlives them.
class StreamTable {
 public:
  StreamTable(platform::DeviceRuntime* runtime, const Trace& trace, facade::AllocatorFacade* facade)
      : runtime_(runtime), facade_(facade) {
    if (trace.num_streams() > Replayer::kMaxStreams) {
      throw std::invalid_argument(
          absl::StrCat("trace ", trace.workload(), " uses ", trace.num_streams(),
                       " streams; a replay creates one device stream per trace stream, at most ",
                       Replayer::kMaxStreams));
    }
    streams_.resize(std::max<std::size_t>(trace.stream_table_size(), 1));
    std::vector<bool> used(streams_.size(), false);
    for (const TraceEvent& e : trace.events()) used[e.stream] = true;
    try {
      for (std::size_t i = 1; i < streams_.size(); ++i) {
        if (used[i]) streams_[i] = runtime_->CreateStream(0);
      }
    } catch (...) {
      Destroy();
      throw;
    }
  }
  ~StreamTable() { Destroy(); }
  platform::Stream operator[](std::size_t i) const { return streams_[i]; }

 private:
  void Destroy() {
    for (std::size_t i = 1; i < streams_.size(); ++i) {
      if (streams_[i].is_default()) continue;
      try {
        facade_->EndStream(platform::CUDAPlace(0), streams_[i]);
      } catch (const std::exception& e) {
        LOG(WARNING) << "replay: ending " << streams_[i] << ": " << e.what();
      }
      runtime_->DestroyStream(streams_[i]);
      streams_[i] = platform::Stream{};
    }
  }
  platform::DeviceRuntime* runtime_;
  facade::AllocatorFacade* facade_;
  std::vector<platform::Stream> streams_;
};

}  // namespace

std::string ReplayResult::ToJson() const {
  // ordered_json keeps the documented key order; NaN and infinities are written as null.
  nlohmann::ordered_json j = {
      {"trace", trace},
      {"strategy", strategy},
      {"device", device},
      {"events", events},
      {"peak_requested_bytes", peak_requested_bytes},
      {"peak_allocated_bytes", peak_allocated_bytes},
      {"peak_reserved_bytes", peak_reserved_bytes},
      {"fragmentation", fragmentation},
      {"device_mallocs", device_mallocs},
      {"device_frees", device_frees},
      {"syncs", syncs},
      {"ooms", ooms},
      {"ns_per_event", ns_per_event},
      {"torch_peak_reserved_bytes", torch_peak_reserved_bytes},
      {"torch_fragmentation", torch_fragmentation},
      {"num_device_map", num_device_map},
      {"num_device_unmap", num_device_unmap},
      {"num_stream_waits", num_stream_waits},
      {"device_lag", device_lag},
  };
  if (repeat > 1) {
    j["repeat"] = repeat;
    j["last_pass"] = CallsJson(last_pass);
    j["last_pass"]["ns_per_event"] = last_pass.ns_per_event;
    nlohmann::ordered_json passes_json = nlohmann::ordered_json::array();
    for (const Pass& pass : passes) {
      nlohmann::ordered_json p = CallsJson(pass.calls);
      p["peak_reserved_bytes"] = pass.peak_reserved_bytes;
      passes_json.push_back(std::move(p));
    }
    j["passes"] = std::move(passes_json);
  }
  if (tail_percent != 0) {
    j["tail_percent"] = tail_percent;
    j["tail_from_event"] = tail_from_event;
    j["tail"] = CallsJson(tail);
  }
  if (!oom_message.empty()) {
    j["oom_event"] = oom_event;
    j["oom_message"] = oom_message;
  }
  // Invalid UTF-8 (e.g. a file name in the message) is replaced, not thrown on.
  return j.dump(/*indent=*/-1, ' ', /*ensure_ascii=*/false,
                nlohmann::ordered_json::error_handler_t::replace);
}

Replayer::Replayer(platform::DeviceRuntime* runtime, std::string device_name,
                   const flags::AllocatorFlags& flags)
    : runtime_(runtime), device_name_(std::move(device_name)), flags_(flags) {}

double Replayer::TimeOnce(const Trace& trace, std::uint64_t device_lag) {
  return TimeRepeated(trace, device_lag, 1).front();
}

std::vector<double> Replayer::TimeRepeated(const Trace& trace, std::uint64_t device_lag,
                                           std::uint64_t repeat) {
  const bool kernels = device_lag != 0;
  facade::AllocatorFacade facade(runtime_, flags_);
  StreamTable streams(runtime_, trace, &facade);
  const platform::CUDAPlace place(0);
  std::vector<AllocationPtr> live(trace.num_allocations());
  std::vector<double> ns;
  for (std::uint64_t pass = 0; pass < std::max<std::uint64_t>(repeat, 1); ++pass) {
    const auto start = std::chrono::steady_clock::now();
    for (const TraceEvent& e : trace.events()) {
      if (e.is_alloc()) {
        live[e.index] = facade.Alloc(place, e.bytes, streams[e.stream]);
      } else {
        AllocationPtr& a = live[e.index];
        if (streams[e.stream] != facade.GetStream(*a) && facade.HonoursRecordStream(place)) {
          facade.RecordStream(*a, streams[e.stream]);
        }
        a.reset();
      }
      if (kernels) runtime_->LaunchHostTask(streams[e.stream], [] {});
    }
    const auto end = std::chrono::steady_clock::now();
    ns.push_back(std::chrono::duration<double, std::nano>(end - start).count());
    for (AllocationPtr& a : live) a.reset();  // what the trace left live, untimed
  }
  return ns;
}

ReplayResult Replayer::Run(const Trace& trace, const Options& options) {
  ReplayResult r;
  r.trace = trace.workload();
  r.strategy = std::string(flags::AllocatorStrategyName(flags_.allocator_strategy));
  if (flags_.use_system_allocator) r.strategy = "system";
  r.device = device_name_;
  r.device_lag = options.device_lag;
  r.events = trace.num_events();
  r.peak_requested_bytes = trace.peak_requested_bytes();
  r.torch_peak_reserved_bytes = trace.header().torch_peak_reserved;
  r.torch_segments_peak = trace.header().torch_segments_peak;
  if (trace.header().torch_peak_requested != 0) {
    r.torch_fragmentation = static_cast<double>(trace.header().torch_peak_reserved) /
                            static_cast<double>(trace.header().torch_peak_requested);
  }

  const std::uint64_t repeat = std::max<std::uint64_t>(options.repeat, 1);
  r.repeat = repeat;
  if (options.tail_percent > 99) {
    throw std::invalid_argument(absl::StrCat("replay: the tail must be 1 to 99 % of the trace (0: ",
                                             "none), got ", options.tail_percent));
  }
  r.tail_percent = options.tail_percent;
  r.tail_from_event = r.events - r.events * options.tail_percent / 100;
  if (options.timed_pass) {
    try {
      const std::vector<double> ns = TimeRepeated(trace, options.device_lag, repeat);
      const auto events = static_cast<double>(std::max<std::uint64_t>(r.events, 1));
      r.ns_per_event = ns.front() / events;
      r.last_pass.ns_per_event = ns.back() / events;
    } catch (const allocation::BadAlloc&) {
      // Reported with its event by the measured pass below.
    }
  }

  facade::AllocatorFacade facade(runtime_, flags_);
  const platform::CUDAPlace place(0);
  if (options.history != nullptr) {
    history::HistoryOptions h;
    // Every event of the trace, its device calls and more: nothing is dropped.
    h.max_entries = std::min<std::size_t>(history::HistoryRecorder::kMaxEntries,
                                          std::max<std::size_t>(4 * trace.num_events(), 1 << 16));
    facade.RecordHistory(place, std::move(h));
  }
  if (options.series != nullptr) options.series->reserve(trace.num_events());
  const std::uint64_t syncs_before = runtime_->SyncCount();
  {
    StreamTable streams(runtime_, trace, &facade);
    std::vector<AllocationPtr> live(trace.num_allocations());
    std::uint64_t requested = 0;
    std::uint64_t event_no = 0;
    // One pass over the trace; false when an allocation was refused (r.oom_*). The series and
    // the snapshot come from the first pass.
    allocation::MemoryStats before;
    std::uint64_t syncs_before_last = syncs_before;
    allocation::MemoryStats tail_before;
    std::uint64_t syncs_before_tail = syncs_before;
    bool tail_reached = false;  // false: the pass stopped before (out of memory), or no tail
    auto pass = [&](bool first, bool last) {
      std::uint64_t in_pass = 0;
      for (const TraceEvent& e : trace.events()) {
        if (last && r.tail_percent != 0 && in_pass++ == r.tail_from_event) {
          tail_before = facade.GetMemoryStats(place);
          syncs_before_tail = runtime_->SyncCount();
          tail_reached = true;
        }
        ++event_no;
        if (e.is_alloc()) {
          try {
            live[e.index] = facade.Alloc(place, e.bytes, streams[e.stream]);
          } catch (const allocation::BadAlloc& oom) {
            r.oom_event = event_no;
            r.oom_message = oom.what();
            return false;
          }
          requested += e.bytes;
        } else {
          AllocationPtr& a = live[e.index];
          if (streams[e.stream] != facade.GetStream(*a) && facade.HonoursRecordStream(place)) {
            facade.RecordStream(*a, streams[e.stream]);
          }
          a.reset();
          requested -= e.bytes;
        }
        if (options.device_lag != 0) runtime_->LaunchHostTask(streams[e.stream], [] {});
        const allocation::MemoryStats s = facade.GetMemoryStats(place);
        const auto reserved = static_cast<std::uint64_t>(s.reserved_bytes[kAggregate].current);
        const auto allocated = static_cast<std::uint64_t>(s.allocated_bytes[kAggregate].current);
        r.peak_reserved_bytes = std::max(r.peak_reserved_bytes, reserved);
        r.peak_allocated_bytes = std::max(r.peak_allocated_bytes, allocated);
        if (first && options.snapshot != nullptr && event_no - 1 == trace.peak_event()) {
          *options.snapshot = facade.Snapshot(place);
        }
        if (first && options.series != nullptr) {
          options.series->push_back({event_no - 1, event_no - 1, requested, allocated, reserved});
        }
      }
      return true;
    };
    for (std::uint64_t i = 0; i < repeat; ++i) {
      const allocation::MemoryStats pass_before = facade.GetMemoryStats(place);
      const std::uint64_t syncs_before_pass = runtime_->SyncCount();
      if (i + 1 == repeat) {
        before = pass_before;
        syncs_before_last = syncs_before_pass;
      }
      const bool completed = pass(i == 0, i + 1 == repeat);
      if (repeat > 1) {
        r.passes.push_back({CallsBetween(pass_before, facade.GetMemoryStats(place),
                                         runtime_->SyncCount() - syncs_before_pass),
                            r.peak_reserved_bytes});
      }
      if (!completed) break;
      if (i + 1 < repeat) {
        for (AllocationPtr& a : live) a.reset();  // what the trace left live
        requested = 0;
      }
    }
    {
      const allocation::MemoryStats s = facade.GetMemoryStats(place);
      const std::uint64_t syncs = runtime_->SyncCount();
      const double ns = r.last_pass.ns_per_event;  // from the timed pass
      r.last_pass = CallsBetween(before, s, syncs - syncs_before_last);
      r.last_pass.ns_per_event = ns;
      if (tail_reached) r.tail = CallsBetween(tail_before, s, syncs - syncs_before_tail);
    }
    const allocation::MemoryStats s = facade.GetMemoryStats(place);
    if (options.keep_summary) r.summary = facade.MemorySummary(place);
    r.device_mallocs = s.num_device_alloc;
    r.device_frees = s.num_device_free;
    r.ooms = s.num_ooms;
    r.num_device_map = s.num_device_map;
    r.num_device_unmap = s.num_device_unmap;
    r.num_stream_waits = s.num_stream_waits;
    live.clear();
  }
  if (options.history != nullptr) *options.history = facade.StopHistory(place);
  r.syncs = runtime_->SyncCount() - syncs_before;
  if (r.peak_requested_bytes != 0) {
    r.fragmentation =
        static_cast<double>(r.peak_reserved_bytes) / static_cast<double>(r.peak_requested_bytes);
  }
  return r;
}

}  // namespace strata::tools
