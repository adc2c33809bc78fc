// CUDARuntime: the runtime-API half of the CUDA backend (devices, Malloc/Free, pinned host
// memory, streams, events, capture and the work enqueued on streams), and every method's stub
// when strata is built without CUDA. Virtual memory, which goes through the driver API, is in
// cuda_vmm.cc; loading the driver's entry points in cuda_driver.cc; how a runtime call is
// checked in cuda_call.h.
#include "platform/cuda_runtime.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"

#if STRATA_WITH_CUDA
// The C API header: <cuda_runtime.h> would be found next to this file by a quoted include.
#include <cuda_runtime_api.h>

#include "platform/cuda_call.h"
#endif

namespace strata::platform {

CUDARuntime& CUDARuntime::Instance() {
  // Leaked on purpose: see the header.
  static CUDARuntime* const instance = new CUDARuntime();
  return *instance;
}

#if STRATA_WITH_CUDA

using internal::Check;
using internal::CheckQuery;
using internal::RelaxedCaptureScope;

namespace {

// Makes `device` current for a scope when it is not already, restoring the previous device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    Check(cudaGetDevice(&previous_), [] { return std::string("cudaGetDevice"); });
    if (previous_ != device) {
      Check(cudaSetDevice(device),
            [device] { return absl::StrCat("cudaSetDevice(", device, ")"); });
      switched_ = true;
    }
  }
  ~DeviceGuard() {
    if (switched_) {
      // Cannot throw from a destructor; restoring a device that was valid does not fail in
      // practice.
      const cudaError_t err = cudaSetDevice(previous_);
      if (err != cudaSuccess) {
        cudaGetLastError();
        LOG(ERROR) << "strata cuda runtime: could not restore device " << previous_ << ": "
                   << cudaGetErrorName(err);
      }
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

cudaStream_t ToCuda(Stream stream) { return static_cast<cudaStream_t>(stream.handle); }
cudaEvent_t ToCuda(Event event) { return static_cast<cudaEvent_t>(event.handle); }

void CUDART_CB RunHostTask(void* arg) {
  std::unique_ptr<std::function<void()>> task(static_cast<std::function<void()>*>(arg));
  try {
    (*task)();
  } catch (const std::exception& e) {
    LOG(ERROR) << "strata cuda runtime: a host task threw: " << e.what();
  } catch (...) {
    LOG(ERROR) << "strata cuda runtime: a host task threw a non-std exception";
  }
}

}  // namespace

bool CUDARuntime::Available(std::string* why) {
  static const std::string* const reason = [] {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return new std::string(
          absl::StrCat("no CUDA device: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
    }
    if (count == 0) return new std::string("no CUDA device: cudaGetDeviceCount found 0 devices");
    // Creating the primary context catches devices that are listed but unusable (prohibited
    // compute mode, driver/runtime mismatch, out of memory).
    err = cudaFree(nullptr);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return new std::string(absl::StrCat("no CUDA device: cannot initialize a context: ",
                                          cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
    }
    VLOG(4) << "strata cuda runtime: " << count << " device(s)";
    return static_cast<std::string*>(nullptr);
  }();
  if (reason != nullptr && why != nullptr) *why = *reason;
  return reason == nullptr;
}

int CUDARuntime::DeviceCount() {
  int count = 0;
  Check(cudaGetDeviceCount(&count), [] { return std::string("cudaGetDeviceCount"); });
  return count;
}

void CUDARuntime::SetDevice(int device) {
  Check(cudaSetDevice(device), [device] { return absl::StrCat("cudaSetDevice(", device, ")"); });
}

int CUDARuntime::GetDevice() {
  int device = 0;
  Check(cudaGetDevice(&device), [] { return std::string("cudaGetDevice"); });
  return device;
}

void* CUDARuntime::Malloc(int device, std::size_t size) {
  if (size == 0) return nullptr;
  DeviceGuard guard(device);
  RelaxedCaptureScope relaxed;
  void* ptr = nullptr;
  const cudaError_t err = cudaMalloc(&ptr, size);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    VLOG(6) << "strata cuda runtime: cudaMalloc(" << size << ") on device " << device
            << ": out of memory";
    return nullptr;
  }
  Check(err, [&] { return absl::StrCat("cudaMalloc(", size, ") on device ", device); });
  return ptr;
}

void CUDARuntime::Free(int device, void* ptr) {
  if (ptr == nullptr) return;
  DeviceGuard guard(device);
  Check(cudaFree(ptr), [&] { return absl::StrFormat("cudaFree(%p) on device %d", ptr, device); });
  syncs_.fetch_add(1, std::memory_order_relaxed);  // cudaFree synchronized the device
}

void CUDARuntime::MemInfo(int device, std::size_t* free_bytes, std::size_t* total_bytes) {
  DeviceGuard guard(device);
  std::size_t free_b = 0, total_b = 0;
  Check(cudaMemGetInfo(&free_b, &total_b),
        [device] { return absl::StrCat("cudaMemGetInfo on device ", device); });
  if (free_bytes) *free_bytes = free_b;
  if (total_bytes) *total_bytes = total_b;
}

void* CUDARuntime::HostMalloc(std::size_t size) {
  if (size == 0) return nullptr;
  void* ptr = nullptr;
  // Portable: the pinned block is usable from every device's context, not just the current one.
  const cudaError_t err = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  Check(err, [size] { return absl::StrCat("cudaHostAlloc(", size, ")"); });
  return ptr;
}

void CUDARuntime::HostFree(void* ptr) {
  if (ptr == nullptr) return;
  Check(cudaFreeHost(ptr), [ptr] { return absl::StrFormat("cudaFreeHost(%p)", ptr); });
}

Stream CUDARuntime::CreateStream(int device) {
  DeviceGuard guard(device);
  cudaStream_t stream = nullptr;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
        [device] { return absl::StrCat("cudaStreamCreateWithFlags on device ", device); });
  return Stream{stream};
}

void CUDARuntime::DestroyStream(Stream stream) {
  if (stream.is_default())
    throw RuntimeError("strata cuda runtime: cannot destroy the default stream");
  Check(cudaStreamDestroy(ToCuda(stream)),
        [stream] { return absl::StrFormat("cudaStreamDestroy(%p)", stream.handle); });
}

void CUDARuntime::SynchronizeStream(Stream stream) {
  syncs_.fetch_add(1, std::memory_order_relaxed);
  Check(cudaStreamSynchronize(ToCuda(stream)),
        [stream] { return absl::StrFormat("cudaStreamSynchronize(%p)", stream.handle); });
}

void CUDARuntime::SynchronizeDevice(int device) {
  syncs_.fetch_add(1, std::memory_order_relaxed);
  DeviceGuard guard(device);
  Check(cudaDeviceSynchronize(),
        [device] { return absl::StrCat("cudaDeviceSynchronize on device ", device); });
}

bool CUDARuntime::QueryStream(Stream stream) {
  return CheckQuery(cudaStreamQuery(ToCuda(stream)),
                    [stream] { return absl::StrFormat("cudaStreamQuery(%p)", stream.handle); });
}

Event CUDARuntime::CreateEvent(int device) {
  DeviceGuard guard(device);
  cudaEvent_t event = nullptr;
  Check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
        [device] { return absl::StrCat("cudaEventCreateWithFlags on device ", device); });
  return Event{event};
}

void CUDARuntime::DestroyEvent(Event event) {
  Check(cudaEventDestroy(ToCuda(event)),
        [event] { return absl::StrFormat("cudaEventDestroy(%p)", event.handle); });
}

void CUDARuntime::RecordEvent(Event event, Stream stream) {
  Check(cudaEventRecord(ToCuda(event), ToCuda(stream)), [event, stream] {
    return absl::StrFormat("cudaEventRecord(%p, stream %p)", event.handle, stream.handle);
  });
}

bool CUDARuntime::QueryEvent(Event event) {
  return CheckQuery(cudaEventQuery(ToCuda(event)),
                    [event] { return absl::StrFormat("cudaEventQuery(%p)", event.handle); });
}

void CUDARuntime::SynchronizeEvent(Event event) {
  syncs_.fetch_add(1, std::memory_order_relaxed);
  Check(cudaEventSynchronize(ToCuda(event)),
        [event] { return absl::StrFormat("cudaEventSynchronize(%p)", event.handle); });
}

void CUDARuntime::BeginCapture(Stream stream) {
  Check(cudaStreamBeginCapture(ToCuda(stream), cudaStreamCaptureModeGlobal),
        [stream] { return absl::StrFormat("cudaStreamBeginCapture(stream %p)", stream.handle); });
}

void CUDARuntime::EndCapture(Stream stream) {
  cudaGraph_t graph = nullptr;
  Check(cudaStreamEndCapture(ToCuda(stream), &graph),
        [stream] { return absl::StrFormat("cudaStreamEndCapture(stream %p)", stream.handle); });
  if (graph != nullptr) cudaGraphDestroy(graph);
}

bool CUDARuntime::IsCapturing(Stream stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  Check(cudaStreamIsCapturing(ToCuda(stream), &status),
        [stream] { return absl::StrFormat("cudaStreamIsCapturing(stream %p)", stream.handle); });
  return status == cudaStreamCaptureStatusActive;
}

int CUDARuntime::StreamDevice(Stream stream) {
  if (stream.is_default()) return -1;
#if CUDART_VERSION >= 12080
  int device = -1;
  Check(cudaStreamGetDevice(ToCuda(stream), &device),
        [stream] { return absl::StrFormat("cudaStreamGetDevice(stream %p)", stream.handle); });
  return device;
#else
  return -1;  // no query before CUDA 12.8
#endif
}

void CUDARuntime::LaunchHostTask(Stream stream, std::function<void()> task) {
  auto heap_task = std::make_unique<std::function<void()>>(std::move(task));
  Check(cudaLaunchHostFunc(ToCuda(stream), &RunHostTask, heap_task.get()),
        [stream] { return absl::StrFormat("cudaLaunchHostFunc(stream %p)", stream.handle); });
  static_cast<void>(heap_task.release());  // owned by RunHostTask from now on
}

void CUDARuntime::MemsetAsync(void* dst, int value, std::size_t bytes, Stream stream) {
  Check(cudaMemsetAsync(dst, value, bytes, ToCuda(stream)), [&] {
    return absl::StrFormat("cudaMemsetAsync(%p, %d, %d, stream %p)", dst, value, bytes,
                           stream.handle);
  });
}

void CUDARuntime::MemcpyAsync(void* dst, const void* src, std::size_t bytes, Stream stream) {
  Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ToCuda(stream)), [&] {
    return absl::StrFormat("cudaMemcpyAsync(%p, %p, %d, stream %p)", dst, src, bytes,
                           stream.handle);
  });
}

void CUDARuntime::StreamWaitEvent(Stream stream, Event event) {
  Check(cudaStreamWaitEvent(ToCuda(stream), ToCuda(event), cudaEventWaitDefault), [stream, event] {
    return absl::StrFormat("cudaStreamWaitEvent(stream %p, event %p)", stream.handle, event.handle);
  });
}

#else  // !STRATA_WITH_CUDA

namespace {
constexpr char kNoCuda[] = "strata was built without CUDA";
[[noreturn]] void NoCuda() { throw RuntimeError(kNoCuda); }
}  // namespace

bool CUDARuntime::Available(std::string* why) {
  if (why != nullptr) *why = "built without CUDA";
  return false;
}

int CUDARuntime::DeviceCount() { NoCuda(); }
void CUDARuntime::SetDevice(int) { NoCuda(); }
int CUDARuntime::GetDevice() { NoCuda(); }
void* CUDARuntime::Malloc(int, std::size_t) { NoCuda(); }
void CUDARuntime::Free(int, void*) { NoCuda(); }
void CUDARuntime::MemInfo(int, std::size_t*, std::size_t*) { NoCuda(); }
std::size_t CUDARuntime::VmmGranularity(int) { NoCuda(); }
void* CUDARuntime::ReserveAddress(int, std::size_t) { NoCuda(); }
void CUDARuntime::FreeAddress(void*, std::size_t) { NoCuda(); }
PhysicalMemory CUDARuntime::CreatePhysical(int, std::size_t) { NoCuda(); }
void CUDARuntime::ReleasePhysical(PhysicalMemory) { NoCuda(); }
void CUDARuntime::Map(void*, std::size_t, PhysicalMemory, std::size_t, int) { NoCuda(); }
void CUDARuntime::Unmap(void*, std::size_t) { NoCuda(); }
void* CUDARuntime::HostMalloc(std::size_t) { NoCuda(); }
void CUDARuntime::HostFree(void*) { NoCuda(); }
Stream CUDARuntime::CreateStream(int) { NoCuda(); }
void CUDARuntime::DestroyStream(Stream) { NoCuda(); }
void CUDARuntime::SynchronizeStream(Stream) { NoCuda(); }
void CUDARuntime::SynchronizeDevice(int) { NoCuda(); }
bool CUDARuntime::QueryStream(Stream) { NoCuda(); }
Event CUDARuntime::CreateEvent(int) { NoCuda(); }
void CUDARuntime::DestroyEvent(Event) { NoCuda(); }
void CUDARuntime::RecordEvent(Event, Stream) { NoCuda(); }
bool CUDARuntime::QueryEvent(Event) { NoCuda(); }
void CUDARuntime::SynchronizeEvent(Event) { NoCuda(); }
void CUDARuntime::StreamWaitEvent(Stream, Event) { NoCuda(); }
void CUDARuntime::BeginCapture(Stream) { NoCuda(); }
void CUDARuntime::EndCapture(Stream) { NoCuda(); }
bool CUDARuntime::IsCapturing(Stream) { NoCuda(); }
int CUDARuntime::StreamDevice(Stream) { NoCuda(); }
void CUDARuntime::LaunchHostTask(Stream, std::function<void()>) { NoCuda(); }
void CUDARuntime::MemsetAsync(void*, int, std::size_t, Stream) { NoCuda(); }
void CUDARuntime::MemcpyAsync(void*, const void*, std::size_t, Stream) { NoCuda(); }

#endif  // STRATA_WITH_CUDA

}  // namespace strata::platform
