#include "platform/fault_injection_runtime.h"

#include <stdexcept>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "glog/logging.h"

namespace strata::platform {

FaultInjectionRuntime::FaultInjectionRuntime(DeviceRuntime* base)
    : ForwardingRuntime(base, "FaultInjectionRuntime") {}

FaultInjectionRuntime::FaultInjectionRuntime(std::shared_ptr<DeviceRuntime> base)
    : ForwardingRuntime(base.get(), "FaultInjectionRuntime"), owner_(std::move(base)) {}

void FaultInjectionRuntime::FailEveryNth(std::uint64_t n) {
  SetFaults(&malloc_faults_, Policy::kEveryNth, n, "device malloc");
}

void FaultInjectionRuntime::FailWithProbability(double p, std::uint64_t seed) {
  if (!(p >= 0.0 && p <= 1.0)) {
    throw std::invalid_argument(
        absl::StrCat("FaultInjectionRuntime: probability must be in [0, 1], got ", p));
  }
  absl::MutexLock lock(&mu_);
  probability_ = p;
  rng_.seed(seed);
  UpdateArmedLocked();
  VLOG(4) << "fault injection: fail device malloc with probability " << p << " seed " << seed;
}

void FaultInjectionRuntime::FailNext(std::uint64_t k) {
  SetFaults(&malloc_faults_, Policy::kNext, k, "device malloc");
}

void FaultInjectionRuntime::FailNextCreatePhysical(std::uint64_t k) {
  SetFaults(&physical_faults_, Policy::kNext, k, "CreatePhysical call");
}

void FaultInjectionRuntime::FailCreatePhysicalEveryNth(std::uint64_t n) {
  SetFaults(&physical_faults_, Policy::kEveryNth, n, "CreatePhysical call");
}

void FaultInjectionRuntime::FailNextMap(std::uint64_t k) {
  SetFaults(&map_faults_, Policy::kNext, k, "Map call");
}

void FaultInjectionRuntime::FailMapEveryNth(std::uint64_t n) {
  SetFaults(&map_faults_, Policy::kEveryNth, n, "Map call");
}

void FaultInjectionRuntime::SetFaults(CallFaults* faults, Policy policy, std::uint64_t value,
                                      const char* calls) {
  absl::MutexLock lock(&mu_);
  if (policy == Policy::kNext) {
    faults->fail_next = value;
    VLOG(4) << "fault injection: fail the next " << value << " " << calls << "(s)";
  } else {
    faults->every_nth = value;
    faults->nth_counter = 0;
    VLOG(4) << "fault injection: fail every " << value << "th " << calls;
  }
  UpdateArmedLocked();
}

void FaultInjectionRuntime::UpdateArmedLocked() {
  armed_.store(malloc_faults_.fail_next > 0 || malloc_faults_.every_nth > 0 || probability_ > 0,
               std::memory_order_release);
}

void FaultInjectionRuntime::Configure(std::string_view spec) {
  // Parsed whole before anything is applied: a bad entry changes nothing.
  double probability = -1;
  std::uint64_t seed = 0;
  std::uint64_t malloc_every = 0, create_every = 0, map_every = 0;
  bool has_malloc_every = false, has_create_every = false, has_map_every = false;
  const absl::string_view text(spec.data(), spec.size());
  for (absl::string_view entry : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    const std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(entry, ':');
    const absl::string_view key = absl::StripAsciiWhitespace(kv.first);
    const absl::string_view value = absl::StripAsciiWhitespace(kv.second);
    auto bad = [&](const char* expected) {
      return std::invalid_argument(absl::StrCat("fault specification: ", key, "='", value,
                                                "' is invalid: expected ", expected));
    };
    std::uint64_t n = 0;
    if (key == "malloc_probability") {
      if (!absl::SimpleAtod(value, &probability) || !(probability >= 0 && probability <= 1)) {
        throw bad("a probability in [0, 1]");
      }
    } else if (key == "seed" || key == "malloc_every" || key == "create_physical_every" ||
               key == "map_every") {
      if (!absl::SimpleAtoi(value, &n)) throw bad("a non-negative integer");
      if (key == "seed") seed = n;
      if (key == "malloc_every") malloc_every = n, has_malloc_every = true;
      if (key == "create_physical_every") create_every = n, has_create_every = true;
      if (key == "map_every") map_every = n, has_map_every = true;
    } else {
      throw std::invalid_argument(absl::StrCat(
          "fault specification: unknown key '", key,
          "' (known: malloc_probability, seed, malloc_every, create_physical_every, map_every)"));
    }
  }
  if (probability >= 0) FailWithProbability(probability, seed);
  if (has_malloc_every) FailEveryNth(malloc_every);
  if (has_create_every) FailCreatePhysicalEveryNth(create_every);
  if (has_map_every) FailMapEveryNth(map_every);
  LOG(WARNING) << "strata: injecting device faults: " << text;
}

void FaultInjectionRuntime::Clear() {
  absl::MutexLock lock(&mu_);
  malloc_faults_ = CallFaults{};
  physical_faults_ = CallFaults{};
  map_faults_ = CallFaults{};
  probability_ = 0;
  armed_.store(false, std::memory_order_release);
  hold_events_.store(false, std::memory_order_release);
}

void FaultInjectionRuntime::ResetCounters() {
  malloc_calls_.store(0, std::memory_order_relaxed);
  injected_.store(0, std::memory_order_relaxed);
  physical_calls_.store(0, std::memory_order_relaxed);
  physical_injected_.store(0, std::memory_order_relaxed);
  map_calls_.store(0, std::memory_order_relaxed);
  map_injected_.store(0, std::memory_order_relaxed);
}

bool FaultInjectionRuntime::CallFaults::Next() {
  bool fail = false;
  if (fail_next > 0) {
    --fail_next;
    fail = true;
  }
  if (every_nth > 0 && ++nth_counter % every_nth == 0) fail = true;
  return fail;
}

bool FaultInjectionRuntime::ShouldFail() {
  absl::MutexLock lock(&mu_);
  bool fail = malloc_faults_.Next();
  if (probability_ > 0) {
    // 53 random bits -> [0, 1): defined by the standard engine alone, unlike the
    // implementation-specific std::bernoulli_distribution, so a seed's pattern is portable.
    const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    if (u < probability_) fail = true;
  }
  UpdateArmedLocked();
  return fail;
}

bool FaultInjectionRuntime::NextFails(CallFaults* faults) {
  absl::MutexLock lock(&mu_);
  return faults->Next();
}

void* FaultInjectionRuntime::Malloc(int device, std::size_t size) {
  malloc_calls_.fetch_add(1, std::memory_order_relaxed);
  if (armed_.load(std::memory_order_acquire) && ShouldFail()) {
    injected_.fetch_add(1, std::memory_order_relaxed);
    VLOG(8) << "fault injection: failing device malloc of " << size << " bytes on device "
            << device;
    return nullptr;
  }
  return base()->Malloc(device, size);
}

PhysicalMemory FaultInjectionRuntime::CreatePhysical(int device, std::size_t size) {
  physical_calls_.fetch_add(1, std::memory_order_relaxed);
  if (NextFails(&physical_faults_)) {
    physical_injected_.fetch_add(1, std::memory_order_relaxed);
    VLOG(8) << "fault injection: failing CreatePhysical of " << size << " bytes on device "
            << device;
    return PhysicalMemory{};
  }
  return base()->CreatePhysical(device, size);
}

void FaultInjectionRuntime::Map(void* ptr, std::size_t size, PhysicalMemory mem, std::size_t offset,
                                int device) {
  map_calls_.fetch_add(1, std::memory_order_relaxed);
  if (NextFails(&map_faults_)) {
    map_injected_.fetch_add(1, std::memory_order_relaxed);
    throw RuntimeError(absl::StrFormat(
        "fault injection: Map(%p, %d, handle %d, offset %d, device %d) failed (injected)", ptr,
        size, mem.handle, offset, device));
  }
  base()->Map(ptr, size, mem, offset, device);
}

bool FaultInjectionRuntime::QueryEvent(Event event) {
  const bool done = base()->QueryEvent(event);
  return done && !hold_events_.load(std::memory_order_acquire);
}

}  // namespace strata::platform
