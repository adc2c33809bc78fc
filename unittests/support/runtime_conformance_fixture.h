// The fixture of the DeviceRuntime contract's suite (runtime_conformance_streams_test.cc,
// runtime_conformance_events_test.cc, runtime_conformance_memory_test.cc,
// runtime_conformance_vmm_test.cc): RuntimeConformanceTest runs each test against every runtime,
// the emulated one everywhere and the CUDA one (instantiation prefix "CUDA", labelled gpu) where
// a GPU is available. Each file instantiates the suite for both:
//   INSTANTIATE_TEST_SUITE_P(Emulated, RuntimeConformanceTest, EmulatedCase(), CaseName);
//   INSTANTIATE_TEST_SUITE_P(CUDA, RuntimeConformanceTest, CudaCase(), CaseName);
// The test files live in this namespace. Device memory is never read directly: results are copied
// back with MemcpyAsync into pinned host memory, as they must be on a real GPU.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "platform/cuda_runtime.h"
#include "platform/device_runtime.h"
#include "platform/emulated_runtime.h"
#include "platform/physical_memory.h"

namespace strata::platform::conformance_test {

inline constexpr std::size_t kMiB = std::size_t{1} << 20;

struct RuntimeCase {
  std::string name;
  // Returns the runtime, or null with the reason to skip in *skip.
  std::function<std::shared_ptr<DeviceRuntime>(std::string* skip)> make;
};

inline void PrintTo(const RuntimeCase& c, std::ostream* os) { *os << c.name; }

inline std::shared_ptr<DeviceRuntime> MakeEmulated(std::string*) {
  return std::make_shared<EmulatedRuntime>();
}

inline std::shared_ptr<DeviceRuntime> MakeCuda(std::string* skip) {
  if (!CUDARuntime::Available(skip)) return nullptr;
  // The process-wide instance is never destroyed: share it without ownership.
  return std::shared_ptr<DeviceRuntime>(&CUDARuntime::Instance(), [](DeviceRuntime*) {});
}

// The parameters of the two instantiations, and their names ("emulated", "cuda").
inline auto EmulatedCase() { return ::testing::Values(RuntimeCase{"emulated", &MakeEmulated}); }
inline auto CudaCase() { return ::testing::Values(RuntimeCase{"cuda", &MakeCuda}); }
inline std::string CaseName(const ::testing::TestParamInfo<RuntimeCase>& info) {
  return info.param.name;
}

// Blocks a stream until opened (a host task waiting on it), so "not yet complete" states are
// deterministic rather than timed. Opens itself when destroyed, so a failing test never leaves
// a stream blocked.
class Gate {
 public:
  Gate() : open_(std::make_shared<absl::Notification>()) {}
  ~Gate() { Open(); }
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  void Open() {
    if (!open_->HasBeenNotified()) open_->Notify();
  }
  std::function<void()> Wait() const {
    return [open = open_] { open->WaitForNotification(); };
  }

 private:
  std::shared_ptr<absl::Notification> open_;
};

// The runtime of the parameter's kind, made current on device 0, with helpers that create streams,
// events, device, host and virtual memory and release whatever the test left in TearDown.
class RuntimeConformanceTest : public ::testing::TestWithParam<RuntimeCase> {
 protected:
  void SetUp() override {
    std::string skip;
    rt_ = GetParam().make(&skip);
    if (rt_ == nullptr) GTEST_SKIP() << skip;
    rt_->SetDevice(0);
  }

  // Releases what the test created through the helpers below; test locals (gates) are gone by
  // now, so pending work can finish.
  void TearDown() override {
    if (rt_ == nullptr) return;
    try {
      for (Stream s : streams_) {
        rt_->SynchronizeStream(s);
        rt_->DestroyStream(s);
      }
      rt_->SynchronizeDevice(0);
      for (auto [p, bytes] : mappings_) rt_->Unmap(p, bytes);
      for (PhysicalMemory m : physical_) rt_->ReleasePhysical(m);
      for (auto [p, bytes] : reservations_) rt_->FreeAddress(p, bytes);
      for (Event e : events_) rt_->DestroyEvent(e);
      for (void* p : device_blocks_) rt_->Free(0, p);
      for (void* p : host_blocks_) rt_->HostFree(p);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "cleanup failed: " << e.what();
    }
  }

  DeviceRuntime& rt() { return *rt_; }

  // Opens `gate`, which holds back the work `e` was recorded after, and waits for `e`: it is
  // complete then.
  void OpenAndWait(Gate& gate, Event e) {
    gate.Open();
    rt().SynchronizeEvent(e);
    EXPECT_TRUE(rt().QueryEvent(e));
  }

  // Work held back by a gate: a task that sets `ran`, and the event `done` recorded after it.
  struct GatedWork {
    explicit GatedWork(Event e) : done(e) {}
    Gate gate;
    std::atomic<bool> ran{false};
    const Event done;
  };
  void Enqueue(Stream s, GatedWork& w) {
    rt().LaunchHostTask(s, w.gate.Wait());
    rt().LaunchHostTask(s, [&ran = w.ran] { ran = true; });
    rt().RecordEvent(w.done, s);
  }
  // Neither the task has run nor the event completed.
  void ExpectPending(const GatedWork& w) {
    EXPECT_FALSE(rt().QueryEvent(w.done));
    EXPECT_FALSE(w.ran.load());
  }
  // Once the gate opens, the task runs and the event completes.
  void ExpectRunsOnceOpened(GatedWork& w) {
    OpenAndWait(w.gate, w.done);
    EXPECT_TRUE(w.ran.load());
  }

  Stream NewStream() {
    Stream s = rt_->CreateStream(0);
    streams_.push_back(s);
    return s;
  }
  // For tests that destroy the stream themselves.
  void Forget(Stream s) { std::erase(streams_, s); }
  Event NewEvent() {
    Event e = rt_->CreateEvent(0);
    events_.push_back(e);
    return e;
  }
  void* NewDevice(std::size_t bytes) {
    void* p = rt_->Malloc(0, bytes);
    if (p != nullptr) device_blocks_.push_back(p);
    return p;
  }
  // Virtual memory through the fixture: whatever a test leaves mapped, created or reserved is
  // undone in TearDown.
  void* NewReservation(std::size_t bytes) {
    void* p = rt_->ReserveAddress(0, bytes);
    reservations_.emplace_back(p, bytes);
    return p;
  }
  PhysicalMemory NewPhysical(std::size_t bytes) {
    PhysicalMemory m = rt_->CreatePhysical(0, bytes);
    if (m.valid()) physical_.push_back(m);
    return m;
  }
  void MapTracked(void* p, std::size_t bytes, PhysicalMemory m, std::size_t offset) {
    rt_->Map(p, bytes, m, offset, 0);
    mappings_.emplace_back(p, bytes);
  }
  void UnmapTracked(void* p, std::size_t bytes) {
    rt_->Unmap(p, bytes);
    std::erase(mappings_, std::pair<void*, std::size_t>(p, bytes));
  }
  void ReleaseTracked(PhysicalMemory m) {
    rt_->ReleasePhysical(m);
    std::erase(physical_, m);
  }
  void FreeAddressTracked(void* p, std::size_t bytes) {
    rt_->FreeAddress(p, bytes);
    std::erase(reservations_, std::pair<void*, std::size_t>(p, bytes));
  }

  unsigned char* NewHost(std::size_t bytes) {
    void* p = rt_->HostMalloc(bytes);
    if (p != nullptr) host_blocks_.push_back(p);
    return static_cast<unsigned char*>(p);
  }

  // Copies `bytes` of device memory back to the host on `stream` and waits for it.
  // `host` (pinned, from NewHost) defaults to a new buffer; pass one allocated beforehand where
  // the stream state must not be disturbed by an allocation.
  std::vector<unsigned char> ReadBack(const void* device_ptr, std::size_t bytes, Stream stream,
                                      unsigned char* host = nullptr) {
    if (host == nullptr) host = NewHost(bytes);
    std::memset(host, 0xEE, bytes);
    rt_->MemcpyAsync(host, device_ptr, bytes, stream);
    rt_->SynchronizeStream(stream);
    return std::vector<unsigned char>(host, host + bytes);
  }

  // Number of bytes in `v` different from `value` (0 on success; prints nicely on failure).
  static std::size_t Mismatches(const std::vector<unsigned char>& v, unsigned char value) {
    std::size_t n = 0;
    for (unsigned char c : v) n += c != value;
    return n;
  }

 private:
  std::shared_ptr<DeviceRuntime> rt_;
  std::vector<Stream> streams_;
  std::vector<Event> events_;
  std::vector<void*> device_blocks_;
  std::vector<void*> host_blocks_;
  std::vector<std::pair<void*, std::size_t>> reservations_, mappings_;
  std::vector<PhysicalMemory> physical_;
};

}  // namespace strata::platform::conformance_test
