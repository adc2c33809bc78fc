// The C ABI of strata (strata/c_api.h): libstrata_c.so.
//
// Design
// - One AllocatorFacade owned here (not AllocatorFacade::Instance(), whose runtime and flags are
//   fixed at first use): built lazily from flags::Current() over the chosen runtime (CUDA, or
//   emulated), published through an atomic pointer, so the hot path is one acquire load.
// - Reconfiguration (strata_set_flags, strata_use_emulated_device) is allowed only while no
//   allocation made here is live; it retires the facade: releases its cache and keeps the object
//   (and its runtime) alive for the rest of the process, so a thread still holding the old
//   pointer can never touch freed memory. Each retirement leaks one empty facade: these calls
//   are for start-up and tests.
// - Pointers map to their AllocationPtr in kShards hash maps chosen by pointer bits, each under
//   a SpinLock held only for the map operation (the free itself runs outside it).
// - Nothing global is ever destroyed: PyTorch and CuPy free tensors during interpreter shutdown,
//   after static destructors would have run.
// - Exceptions stop at Guard(): each maps to an error code and the thread's last-error message.
#include "strata/c_api.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "allocation/allocation.h"
#include "allocation/bad_alloc.h"
#include "capi/c_api_internal.h"
#include "facade/allocator_facade.h"
#include "flags/flag_sources.h"
#include "glog/logging.h"
#include "platform/cuda_runtime.h"
#include "platform/device_runtime.h"
#include "platform/emulated_runtime.h"
#include "platform/fault_injection_runtime.h"
#include "platform/place.h"
#include "platform/spin_lock.h"
#include "platform/stream.h"

namespace strata::capi {
namespace {

using allocation::AllocationPtr;
using facade::AllocatorFacade;
using platform::CUDAPlace;
using platform::Place;
using platform::Stream;

// A failure that already knows its C error code.
class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

thread_local std::string t_last_error;

// Sets the thread's message "<where()>: <what>" (and logs it when `log`); returns `code`.
template <typename Where>
int Fail(int code, Where& where, const char* what, bool log) noexcept {
  try {
    t_last_error = absl::StrCat(where(), ": ", what);
    // Callers that cannot see an error code (PyTorch's free_fn, a NULL it does not check) get
    // the message in the log.
    if (log) LOG(ERROR) << t_last_error;
  } catch (...) {
    // Out of host memory while reporting: the code still tells the caller.
  }
  return code;
}

// C ABI calls in flight, counted per thread in padded slots (no shared line on the hot path), so
// that a reconfiguration can refuse while another thread is inside a call: its allocation would
// land in the retired allocator.
struct alignas(64) InFlightSlot {
  std::atomic<std::int64_t> count{0};
};
constexpr int kInFlightSlots = 64;
InFlightSlot g_in_flight[kInFlightSlots];
thread_local std::int64_t t_depth = 0;

class InFlight {
 public:
  InFlight() {
    Slot().fetch_add(1, std::memory_order_seq_cst);
    ++t_depth;
  }
  ~InFlight() {
    --t_depth;
    Slot().fetch_sub(1, std::memory_order_release);
  }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

  // Calls in flight on other threads than the caller.
  static std::int64_t OnOtherThreads() {
    std::int64_t n = 0;
    for (const InFlightSlot& s : g_in_flight) n += s.count.load(std::memory_order_seq_cst);
    return n - t_depth;
  }

 private:
  static std::atomic<std::int64_t>& Slot() {
    static std::atomic<int> next{0};
    thread_local const int index = next.fetch_add(1, std::memory_order_relaxed) % kInFlightSlots;
    return g_in_flight[index].count;
  }
};

// Runs `body` (returning an int result), turning every exception into an error code. `where`
// builds the message prefix, only on failure.
template <typename Body, typename Where>
int Guard(Body&& body, Where&& where, bool log) noexcept {
  try {
    const InFlight in_flight;
    return body();
  } catch (const Error& e) {
    return Fail(e.code(), where, e.what(), log);
  } catch (const allocation::BadAlloc& e) {
    return Fail(STRATA_ERROR_OUT_OF_MEMORY, where, e.what(), log);
  } catch (const std::bad_alloc&) {
    return Fail(STRATA_ERROR_OUT_OF_MEMORY, where, "host out of memory (std::bad_alloc)", log);
  } catch (const std::invalid_argument& e) {
    return Fail(STRATA_ERROR_INVALID_ARGUMENT, where, e.what(), log);
  } catch (const platform::RuntimeError& e) {
    return Fail(STRATA_ERROR_RUNTIME, where, e.what(), log);
  } catch (const std::exception& e) {
    return Fail(STRATA_ERROR_INTERNAL, where, e.what(), log);
  } catch (...) {
    return Fail(STRATA_ERROR_INTERNAL, where, "unknown exception", log);
  }
}

std::string Ptr(const void* p) { return absl::StrFormat("%p", p); }

// ptr -> AllocationPtr of every live strata_malloc allocation.
class Registry {
 public:
  void Insert(void* ptr, AllocationPtr allocation) {
    AllocationPtr stale;
    {
      Shard& s = ShardOf(ptr);
      std::lock_guard<platform::SpinLock> lock(s.mu);
      auto [it, inserted] = s.live.try_emplace(ptr, std::move(allocation));
      if (!inserted) {
        // Impossible unless memory was handed out twice; keep the newer record and leak the
        // older one rather than free memory that is in use.
        stale = std::exchange(it->second, std::move(allocation));
      }
    }
    if (stale) {
      LOG(ERROR) << "strata C API: pointer " << ptr
                 << " handed out while already live; the older record is dropped";
      (void)stale.release();
    }
  }

  // Removes and returns the allocation of `ptr`; null when unknown.
  AllocationPtr Take(void* ptr) {
    Shard& s = ShardOf(ptr);
    std::lock_guard<platform::SpinLock> lock(s.mu);
    auto it = s.live.find(ptr);
    if (it == s.live.end()) return nullptr;
    AllocationPtr a = std::move(it->second);
    s.live.erase(it);
    return a;
  }

  // Calls f(allocation) under the shard's lock, so the allocation cannot be freed meanwhile.
  // Returns false when `ptr` is unknown.
  template <typename F>
  bool With(void* ptr, F&& f) {
    Shard& s = ShardOf(ptr);
    std::lock_guard<platform::SpinLock> lock(s.mu);
    auto it = s.live.find(ptr);
    if (it == s.live.end()) return false;
    f(*it->second);
    return true;
  }

  std::int64_t Count() {
    std::int64_t n = 0;
    for (Shard& s : shards_) {
      std::lock_guard<platform::SpinLock> lock(s.mu);
      n += static_cast<std::int64_t>(s.live.size());
    }
    return n;
  }

 private:
  static constexpr int kShardBits = 6;
  static constexpr int kShards = 1 << kShardBits;

  struct alignas(64) Shard {
    platform::SpinLock mu;
    absl::flat_hash_map<void*, AllocationPtr> live ABSL_GUARDED_BY(mu);
  };

  Shard& ShardOf(void* ptr) {
    // Fibonacci hashing: device pointers are aligned, so their low bits carry no information.
    const std::uint64_t h =
        static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(ptr)) * 0x9E3779B97F4A7C15ull;
    return shards_[h >> (64 - kShardBits)];
  }

  Shard shards_[kShards];
};

// The facade, its runtime, and the emulated streams' pause gates.
class State {
 public:
  // The current facade, built on first use.
  AllocatorFacade& Facade() {
    AllocatorFacade* f = facade_.load(std::memory_order_acquire);
    return f != nullptr ? *f : Build();
  }
  // The current facade, or null when none is built (then nothing is live either).
  AllocatorFacade* FacadeIfBuilt() { return facade_.load(std::memory_order_acquire); }

  // Throws when CUDA places cannot work (no GPU and no emulated device), with the reason.
  void CheckDevice(AllocatorFacade& f, int device) {
    if (device < 0) {
      throw std::invalid_argument(absl::StrCat("invalid device ordinal ", device));
    }
    if (f.runtime() == nullptr) {
      absl::MutexLock lock(&mu_);
      throw Error(STRATA_ERROR_RUNTIME,
                  absl::StrCat("no device runtime: ", no_runtime_reason_,
                               " (set STRATA_C_DEVICE=emulated or call "
                               "strata_use_emulated_device() to test without a GPU)"));
    }
  }

  // Runs `change` (flags or runtime) and retires the facade, if no allocation is live.
  template <typename F>
  void Reconfigure(const char* what, F&& change) {
    absl::MutexLock lock(&mu_);
    // Before changing anything, so that a later first use does not re-read the environment
    // over these changes.
    flags::EnsureLoadedFromEnvironment();
    // Taken away first: a call that starts now waits in Build() for the new allocator; one
    // already inside (counted in flight before it read the pointer) makes this refuse.
    AllocatorFacade* current = facade_.exchange(nullptr, std::memory_order_seq_cst);
    if (current != nullptr) {
      const std::int64_t live = registry_.Count();
      const std::int64_t in_flight = InFlight::OnOtherThreads();
      if (live > 0 || in_flight > 0) {
        facade_.store(current, std::memory_order_release);
        throw Error(
            STRATA_ERROR_BUSY,
            live > 0 ? absl::StrCat(what, " is only possible while no allocation is live (", live,
                                    " allocation(s) from strata_malloc not yet freed); "
                                    "call it before the first allocation")
                     : absl::StrCat(what, " is refused while other threads are inside ", in_flight,
                                    " strata call(s); retry when they return"));
      }
    }
    try {
      change();
    } catch (...) {  // nothing changed: the allocator stays
      facade_.store(current, std::memory_order_release);
      throw;
    }
    RetireLocked(current);
  }

  void UseEmulated(int device_count, std::size_t capacity_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (emulated_ != nullptr) retired_runtimes_.push_back(std::move(emulated_));
    if (device_count > 0) {
      platform::EmulatedRuntime::Options o;
      o.device_count = device_count;
      o.capacity_bytes = capacity_bytes;
      emulated_ = std::make_unique<platform::EmulatedRuntime>(o);
      VLOG(1) << "strata C API: emulated device runtime, " << device_count << " device(s) of "
              << capacity_bytes << " bytes";
    }
    runtime_chosen_ = true;
  }

  platform::EmulatedRuntime& Emulated() {
    absl::MutexLock lock(&mu_);
    if (emulated_ == nullptr) {
      throw std::invalid_argument(
          "the emulated device is not in use (call strata_use_emulated_device first)");
    }
    return *emulated_;  // never destroyed (retired runtimes are kept), so safe after unlock
  }

  void Pause(Stream stream) {
    platform::EmulatedRuntime& rt = Emulated();
    auto gate = std::make_shared<absl::Notification>();
    rt.LaunchHostTask(stream, [gate] { gate->WaitForNotification(); });
    absl::MutexLock lock(&mu_);
    gates_[stream.handle].push_back(std::move(gate));
  }

  void Resume(Stream stream, bool synchronize) {
    platform::EmulatedRuntime& rt = Emulated();
    std::vector<std::shared_ptr<absl::Notification>> gates;
    {
      absl::MutexLock lock(&mu_);
      auto it = gates_.find(stream.handle);
      if (it != gates_.end()) {
        gates = std::move(it->second);
        gates_.erase(it);
      }
    }
    for (auto& g : gates) g->Notify();
    if (synchronize) rt.SynchronizeStream(stream);
  }

  Registry& registry() { return registry_; }

 private:
  AllocatorFacade& Build() {
    absl::MutexLock lock(&mu_);
    if (AllocatorFacade* f = facade_.load(std::memory_order_acquire)) return *f;
    flags::EnsureLoadedFromEnvironment();
    platform::DeviceRuntime* runtime = ChooseRuntimeLocked();
    auto f = std::make_unique<AllocatorFacade>(runtime, flags::Current());
    VLOG(4) << "strata C API: allocator built over "
            << (runtime != nullptr ? runtime->Name() : "no device runtime") << " with "
            << f->flags().DebugString();
    facade_.store(f.get(), std::memory_order_release);
    return *f.release();  // owned by facade_ from now on; retired, never destroyed
  }

  platform::DeviceRuntime* ChooseRuntimeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!runtime_chosen_) {
      const char* device = std::getenv("STRATA_C_DEVICE");
      const std::string choice = device != nullptr ? device : "";
      if (choice == "emulated") {
        UseEmulated(EnvInt("STRATA_C_EMULATED_DEVICES", 1),
                    static_cast<std::size_t>(EnvInt("STRATA_C_EMULATED_CAPACITY_MB", 16384)) << 20);
      } else if (!choice.empty() && choice != "cuda") {
        throw std::invalid_argument(absl::StrCat("environment variable STRATA_C_DEVICE='", choice,
                                                 "': expected 'cuda' or 'emulated'"));
      }
      runtime_chosen_ = true;
    }
    platform::DeviceRuntime* runtime = nullptr;
    std::string why;
    if (emulated_ != nullptr) {
      runtime = emulated_.get();
    } else if (platform::CUDARuntime::Available(&why)) {
      runtime = &platform::CUDARuntime::Instance();
    } else {
      no_runtime_reason_ = why;
      return nullptr;
    }
    // STRATA_C_FAULTS: device faults injected under the whole chain, to soak it (tests, CI).
    const char* faults = std::getenv("STRATA_C_FAULTS");
    if (faults == nullptr || *faults == '\0') return runtime;
    auto injected = std::make_unique<platform::FaultInjectionRuntime>(runtime);
    try {
      injected->Configure(faults);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(absl::StrCat("environment variable STRATA_C_FAULTS: ", e.what()));
    }
    faults_.push_back(std::move(injected));  // kept: a retired facade may still use it
    return faults_.back().get();
  }

  static int EnvInt(const char* name, int fallback) {
    const char* text = std::getenv(name);
    if (text == nullptr) return fallback;
    int value = 0;
    if (!absl::SimpleAtoi(text, &value) || value <= 0) {
      throw std::invalid_argument(absl::StrCat("environment variable ", name, "='", text,
                                               "': expected a positive integer"));
    }
    return value;
  }

  // Gives back what `old` (taken off facade_; nothing live, no call inside) caches; destroys it
  // unless frees it deferred on other streams' work are still pending.
  void RetireLocked(AllocatorFacade* old) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (old == nullptr) return;
    bool pending = false;
    if (old->runtime() != nullptr) {
      for (int d = 0; d < old->runtime()->DeviceCount(); ++d) {
        try {
          old->Release(CUDAPlace(d));
          pending =
              pending ||
              old->GetMemoryStats(CUDAPlace(d)).active_bytes[allocation::kAggregate].current > 0;
        } catch (const std::exception& e) {
          LOG(WARNING) << "strata C API: releasing cuda:" << d
                       << " of the old allocator: " << e.what();
          pending = true;
        }
      }
    }
    if (pending) {  // destroying it would wait for that work: kept (and cached memory given back)
      retired_.emplace_back(old);
    } else {
      delete old;  // NOLINT(cppcoreguidelines-owning-memory): facade_ owned it
    }
    VLOG(4) << "strata C API: allocator retired; the next use builds a new one";
  }

  std::atomic<AllocatorFacade*> facade_{nullptr};
  Registry registry_;

  absl::Mutex mu_;
  bool runtime_chosen_ ABSL_GUARDED_BY(mu_) = false;
  std::string no_runtime_reason_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<platform::EmulatedRuntime> emulated_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<platform::EmulatedRuntime>> retired_runtimes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<AllocatorFacade>> retired_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<platform::FaultInjectionRuntime>> faults_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<void*, std::vector<std::shared_ptr<absl::Notification>>> gates_
      ABSL_GUARDED_BY(mu_);
};

// Never destroyed (see the file comment).
State& G() {
  static State* state = new State;
  return *state;
}

// snprintf-style copy of `text` into buf[len].
int CopyOut(const std::string& text, char* buf, std::size_t len) {
  if (buf == nullptr && len != 0) throw std::invalid_argument("buf is NULL but len is not 0");
  if (text.size() > static_cast<std::size_t>(INT_MAX)) {
    throw std::invalid_argument(absl::StrCat("the text (", text.size(), " bytes) exceeds INT_MAX"));
  }
  if (len > 0) {
    const std::size_t n = std::min(len - 1, text.size());
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return static_cast<int>(text.size());
}

int FreeImpl(void* ptr, const char* fn, ssize_t size, int device, void* stream) noexcept {
  if (ptr == nullptr) return STRATA_OK;
  return Guard(
      [&] {
        AllocationPtr a = G().registry().Take(ptr);
        if (a == nullptr) {
          throw Error(STRATA_ERROR_UNKNOWN_POINTER,
                      "unknown pointer: not allocated by strata_malloc, or already freed");
        }
        VLOG(10) << "strata_free " << ptr << " (" << a->size() << " bytes, " << a->place() << ")";
        a.reset();  // back to the pool of the stream it was allocated on
        return STRATA_OK;
      },
      [&] {
        return absl::StrCat(fn, "(ptr=", Ptr(ptr), ", size=", size, ", device=", device,
                            ", stream=", Ptr(stream), ")");
      },
      /*log=*/true);
}

// A call on CUDA device `device`: `op(facade, place)` returns the call's int result, under
// Guard with `where` as the message prefix.
template <typename Op, typename Where>
int OnDevice(int device, Where&& where, bool log, Op&& op) {
  return Guard(
      [&] {
        AllocatorFacade& f = G().Facade();
        G().CheckDevice(f, device);
        return op(f, CUDAPlace(device));
      },
      where, log);
}

// strata_empty_cache (empty = true) and strata_reset_peak_stats.
int DeviceOp(const char* fn, int device, bool empty) {
  return OnDevice(
      device, [&] { return absl::StrCat(fn, "(device=", device, ")"); }, /*log=*/false,
      [&](AllocatorFacade& f, const Place& place) {
        if (empty) {
          const std::uint64_t bytes = f.EmptyCache(place);
          VLOG(1) << "strata_empty_cache(" << device << "): released " << bytes << " bytes";
        } else {
          f.ResetPeakStats(place);
        }
        return STRATA_OK;
      });
}

template <typename Text>
int TextOut(const char* fn, int device, char* buf, std::size_t len, Text&& text) {
  return OnDevice(
      device, [&] { return absl::StrCat(fn, "(device=", device, ", len=", len, ")"); },
      /*log=*/false,
      [&](AllocatorFacade& f, const Place& place) { return CopyOut(text(f, place), buf, len); });
}

}  // namespace
}  // namespace strata::capi

namespace strata::capi {
namespace {
// The graph-pool hooks: `op` on the facade for CUDA device `device`.
template <typename Op>
void PoolOp(const char* fn, int device, const strata_pool_id& pool, Op&& op) {
  OnDevice(
      device,
      [&] {
        return absl::StrCat(fn, "(device=", device, ", pool=(", pool.first, ", ", pool.second,
                            "))");
      },
      /*log=*/true,
      [&](AllocatorFacade& f, const Place& place) {
        op(f, place, facade::GraphPools::PoolId{pool.first, pool.second});
        return STRATA_OK;
      });
}
}  // namespace
}  // namespace strata::capi

namespace strata::capi {

// The C ABI's error handling for the other files of capi/ (c_api_internal.h).
int GuardCall(const std::function<int()>& body, const std::function<std::string()>& where,
              bool log) noexcept {
  return Guard(body, where, log);
}

int OnDeviceCall(int device, const std::function<std::string()>& where, bool log,
                 const PlaceOp& op) noexcept {
  return OnDevice(device, where, log, op);
}

int TextCall(const char* fn, int device, char* buf, std::size_t len, const TextOp& text) noexcept {
  return TextOut(fn, device, buf, len, text);
}

AllocatorFacade& CurrentFacade() { return G().Facade(); }

}  // namespace strata::capi

using strata::capi::G;
using strata::capi::Guard;
using strata::capi::Ptr;

extern "C" {

void* strata_malloc(ssize_t size, int device, void* stream) {
  if (size == 0) return nullptr;  // PyTorch never frees what a 0-byte request returns
  void* result = nullptr;
  Guard(
      [&] {
        if (size < 0) {
          throw std::invalid_argument(absl::StrCat("negative size ", size));
        }
        strata::facade::AllocatorFacade& f = G().Facade();
        G().CheckDevice(f, device);
        const strata::platform::CUDAPlace place(device);
        const std::size_t bytes = static_cast<std::size_t>(size);
        // The default stream's chain is reached without a lock.
        strata::allocation::AllocationPtr a =
            stream == nullptr ? f.Alloc(place, bytes)
                              : f.Alloc(place, bytes, strata::platform::Stream{stream});
        result = a->ptr();
        VLOG(10) << "strata_malloc " << size << " bytes on " << place << " stream " << stream
                 << " -> " << result;
        G().registry().Insert(result, std::move(a));
        return STRATA_OK;
      },
      [&] {
        return absl::StrCat("strata_malloc(size=", size, ", device=", device,
                            ", stream=", Ptr(stream), ")");
      },
      /*log=*/true);
  return result;
}

void* strata_malloc_or_throw(ssize_t size, int device, void* stream) {
  void* result = strata_malloc(size, device, stream);
  if (result == nullptr && size != 0) throw std::runtime_error(strata_last_error());
  return result;
}

void strata_free(void* ptr, ssize_t size, int device, void* stream) {
  (void)strata::capi::FreeImpl(ptr, "strata_free", size, device, stream);
}

int strata_free_checked(void* ptr) {
  return strata::capi::FreeImpl(ptr, "strata_free_checked", -1, -1, nullptr);
}

int strata_record_stream(void* ptr, void* stream) {
  return Guard(
      [&] {
        strata::facade::AllocatorFacade* f = G().FacadeIfBuilt();
        bool recorded = false;
        const bool known = f != nullptr && G().registry().With(ptr, [&](auto& allocation) {
          recorded = f->RecordStream(allocation, strata::platform::Stream{stream});
        });
        if (!known) {
          throw strata::capi::Error(
              STRATA_ERROR_UNKNOWN_POINTER,
              "unknown pointer: not allocated by strata_malloc (pass the pointer it returned, "
              "not an offset into it), or already freed");
        }
        return recorded ? 1 : 0;
      },
      [&] {
        return absl::StrCat("strata_record_stream(ptr=", Ptr(ptr), ", stream=", Ptr(stream), ")");
      },
      /*log=*/false);
}

int strata_empty_cache(int device) {
  return strata::capi::DeviceOp("strata_empty_cache", device, /*empty=*/true);
}

int strata_set_memory_fraction(double fraction, int device) {
  return strata::capi::OnDevice(
      device,
      [&] {
        return absl::StrCat("strata_set_memory_fraction(fraction=", fraction, ", device=", device,
                            ")");
      },
      /*log=*/true,
      [&](strata::facade::AllocatorFacade& f, const strata::platform::Place& place) {
        f.SetMemoryFraction(place, fraction);
        return STRATA_OK;
      });
}

void strata_begin_allocate_to_pool(int device, strata_pool_id pool,
                                   std::function<bool(CUstream_st*)> filter) {
  strata::capi::PoolOp("strata_begin_allocate_to_pool", device, pool,
                       [&](strata::facade::AllocatorFacade& f, const strata::platform::Place& place,
                           strata::facade::GraphPools::PoolId id) {
                         f.BeginAllocateToPool(
                             place, id, [filter = std::move(filter)](strata::platform::Stream s) {
                               return filter(static_cast<CUstream_st*>(s.handle));
                             });
                       });
}

void strata_end_allocate_to_pool(int device, strata_pool_id pool) {
  strata::capi::PoolOp(
      "strata_end_allocate_to_pool", device, pool,
      [](strata::facade::AllocatorFacade& f, const strata::platform::Place& place,
         strata::facade::GraphPools::PoolId id) { f.EndAllocateToPool(place, id); });
}

void strata_release_pool(int device, strata_pool_id pool) {
  strata::capi::PoolOp("strata_release_pool", device, pool,
                       [](strata::facade::AllocatorFacade& f, const strata::platform::Place& place,
                          strata::facade::GraphPools::PoolId id) { f.ReleasePool(place, id); });
}

int strata_reset_peak_stats(int device) {
  return strata::capi::DeviceOp("strata_reset_peak_stats", device, /*empty=*/false);
}

int strata_memory_stats_json(int device, char* buf, size_t len) {
  return strata::capi::TextOut(
      "strata_memory_stats_json", device, buf, len,
      [](strata::facade::AllocatorFacade& f, const strata::platform::Place& place) {
        return f.MemoryStatsJson(place);
      });
}

int strata_memory_summary(int device, char* buf, size_t len) {
  return strata::capi::TextOut(
      "strata_memory_summary", device, buf, len,
      [](strata::facade::AllocatorFacade& f, const strata::platform::Place& place) {
        return f.MemorySummary(place);
      });
}

int64_t strata_live_allocations(void) {
  try {
    return G().registry().Count();
  } catch (...) {
    return 0;  // Count() takes spin locks only; nothing in it throws
  }
}

int strata_set_flags(const char* config) {
  return Guard(
      [&] {
        if (config == nullptr) throw std::invalid_argument("config is NULL");
        // The flag layer names the origin in its messages ("strata_set_flags config: unknown key").
        G().Reconfigure("strata_set_flags", [&] {
          // The origin names the call, not the config: each entry's message quotes its entry,
          // and quoting the whole config in each would make a long one quadratic.
          strata::flags::ApplyAllocConf(config, "strata_set_flags config");
        });
        VLOG(4) << "strata_set_flags('" << config << "') applied";
        return STRATA_OK;
      },
      [&] { return std::string("strata_set_flags"); },
      /*log=*/false);
}

const char* strata_last_error(void) { return strata::capi::t_last_error.c_str(); }

int strata_use_emulated_device(int device_count, size_t capacity_bytes) {
  return Guard(
      [&] {
        if (device_count < 0) {
          throw std::invalid_argument(absl::StrCat("negative device_count ", device_count));
        }
        if (device_count > 0 && capacity_bytes == 0) {
          throw std::invalid_argument("capacity_bytes must be > 0");
        }
        // Checked before anything is reconfigured (the runtime checks them again).
        using strata::platform::EmulatedRuntime;
        if (device_count > EmulatedRuntime::kMaxDevices) {
          throw std::invalid_argument(
              absl::StrCat("device_count must be at most ", EmulatedRuntime::kMaxDevices));
        }
        if (capacity_bytes > EmulatedRuntime::kMaxCapacityBytes) {
          throw std::invalid_argument(absl::StrCat("capacity_bytes must be at most ",
                                                   EmulatedRuntime::kMaxCapacityBytes, " (1 PiB)"));
        }
        G().Reconfigure("strata_use_emulated_device", [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          G().UseEmulated(device_count, capacity_bytes);
        });
        return STRATA_OK;
      },
      [&] {
        return absl::StrCat("strata_use_emulated_device(device_count=", device_count,
                            ", capacity_bytes=", capacity_bytes, ")");
      },
      /*log=*/false);
}

int strata_emulated_stream_create(int device, void** stream) {
  return Guard(
      [&] {
        if (stream == nullptr) throw std::invalid_argument("stream is NULL");
        *stream = G().Emulated().CreateStream(device).handle;
        return STRATA_OK;
      },
      [&] { return absl::StrCat("strata_emulated_stream_create(device=", device, ")"); },
      /*log=*/false);
}

int strata_emulated_stream_destroy(void* stream) {
  return Guard(
      [&] {
        if (stream == nullptr)
          throw std::invalid_argument("the default stream cannot be destroyed");
        G().Resume(strata::platform::Stream{stream}, /*synchronize=*/false);
        G().Emulated().DestroyStream(strata::platform::Stream{stream});
        return STRATA_OK;
      },
      [&] { return absl::StrCat("strata_emulated_stream_destroy(", Ptr(stream), ")"); },
      /*log=*/false);
}

int strata_emulated_stream_pause(void* stream) {
  return Guard(
      [&] {
        G().Pause(strata::platform::Stream{stream});
        return STRATA_OK;
      },
      [&] { return absl::StrCat("strata_emulated_stream_pause(", Ptr(stream), ")"); },
      /*log=*/false);
}

int strata_emulated_stream_resume(void* stream) {
  return Guard(
      [&] {
        G().Resume(strata::platform::Stream{stream}, /*synchronize=*/true);
        return STRATA_OK;
      },
      [&] { return absl::StrCat("strata_emulated_stream_resume(", Ptr(stream), ")"); },
      /*log=*/false);
}

}  // extern "C"
