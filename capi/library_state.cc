#include "capi/library_state.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "allocation/memory_stats.h"
#include "capi/guard.h"
#include "capi/in_flight.h"
#include "flags/flag_sources.h"
#include "glog/logging.h"
#include "platform/cuda_runtime.h"
#include "platform/place.h"
#include "strata/c_api.h"

namespace strata::capi {
namespace {

using facade::AllocatorFacade;
using platform::CUDAPlace;

int EnvInt(const char* name, int fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr) return fallback;
  int value = 0;
  if (!absl::SimpleAtoi(text, &value) || value <= 0) {
    throw std::invalid_argument(
        absl::StrCat("environment variable ", name, "='", text, "': expected a positive integer"));
  }
  return value;
}

}  // namespace

void LibraryState::CheckDevice(AllocatorFacade& f, int device) {
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

void LibraryState::Reconfigure(const char* what, absl::FunctionRef<void()> change) {
  absl::MutexLock lock(&mu_);
  // Before changing anything, so that a later first use does not re-read the environment over
  // these changes.
  flags::EnsureLoadedFromEnvironment();
  // Taken away first: a call that starts now waits in Build() for the new allocator; one already
  // inside (counted in flight before it read the pointer, a free from before its registry take)
  // makes this refuse.
  AllocatorFacade* current = facade_.exchange(nullptr, std::memory_order_seq_cst);
  if (current != nullptr) {
    // In flight, live, in flight again. A malloc that read the old pointer lists its block
    // before it stops counting: it is counted in the first read, or its block is listed. A free
    // counts before it takes its block off the list: it is listed, or counted in the last read.
    // (Live first and one read after let a malloc list its block and return in between, and the
    // block leaked with the retired allocator.)
    std::int64_t in_flight = InFlight::OnOtherThreads();
    const std::int64_t live = registry_.Count();
    if (in_flight == 0 && live == 0) in_flight = InFlight::OnOtherThreads();
    if (live > 0 || in_flight > 0) {
      facade_.store(current, std::memory_order_release);
      throw Error(STRATA_ERROR_BUSY,
                  live > 0
                      ? absl::StrCat(what, " is only possible while no allocation is live (", live,
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

void LibraryState::UseEmulatedDevice(int device_count, std::size_t capacity_bytes) {
  // Reconfigure runs the change under mu_.
  Reconfigure("strata_use_emulated_device", [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    UseEmulatedLocked(device_count, capacity_bytes);
  });
}

void LibraryState::UseEmulatedLocked(int device_count, std::size_t capacity_bytes) {
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

platform::EmulatedRuntime& LibraryState::Emulated() {
  absl::MutexLock lock(&mu_);
  if (emulated_ == nullptr) {
    throw std::invalid_argument(
        "the emulated device is not in use (call strata_use_emulated_device first)");
  }
  return *emulated_;  // never destroyed (retired runtimes are kept), so safe after unlock
}

void LibraryState::Pause(platform::Stream stream) {
  platform::EmulatedRuntime& rt = Emulated();
  auto gate = std::make_shared<absl::Notification>();
  rt.LaunchHostTask(stream, [gate] { gate->WaitForNotification(); });
  absl::MutexLock lock(&mu_);
  gates_[stream.handle].push_back(std::move(gate));
}

void LibraryState::Resume(platform::Stream stream, bool synchronize) {
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

AllocatorFacade& LibraryState::Build() {
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

platform::DeviceRuntime* LibraryState::ChooseRuntimeLocked() {
  if (!runtime_chosen_) {
    const char* device = std::getenv("STRATA_C_DEVICE");
    const std::string choice = device != nullptr ? device : "";
    if (choice == "emulated") {
      UseEmulatedLocked(EnvInt("STRATA_C_EMULATED_DEVICES", 1),
                        static_cast<std::size_t>(EnvInt("STRATA_C_EMULATED_CAPACITY_MB", 16384))
                            << 20);
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

// Gives back what `old` (taken off facade_; nothing live, no call inside) caches; destroys it
// unless frees it deferred on other streams' work are still pending.
void LibraryState::RetireLocked(AllocatorFacade* old) {
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

LibraryState& Library() {
  static LibraryState* state = new LibraryState;  // never destroyed (library_state.h)
  return *state;
}

}  // namespace strata::capi
