#include "platform/cuda_runtime.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"

#if STRATA_WITH_CUDA
// The C API headers: <cuda_runtime.h> would be found next to this file by a quoted include.
// <cuda.h> only declares the driver API: its functions are looked up at run time (see Driver).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "absl/base/attributes.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#endif

namespace strata::platform {

CUDARuntime& CUDARuntime::Instance() {
  // Leaked on purpose: see the header.
  static CUDARuntime* const instance = new CUDARuntime();
  return *instance;
}

#if STRATA_WITH_CUDA

namespace {

[[noreturn]] void Fail(cudaError_t err, const std::string& call) {
  // Clears a non-sticky error so the next unrelated call does not report it again.
  cudaGetLastError();
  throw RuntimeError(absl::StrCat("strata cuda runtime: ", call, " failed: ", cudaGetErrorName(err),
                                  ": ", cudaGetErrorString(err)));
}

// `describe` builds the call's description only on failure: the success path formats nothing.
template <typename Describe>
inline void Check(cudaError_t err, Describe&& describe) {
  if (err != cudaSuccess) [[unlikely]] {
    Fail(err, describe());
  }
}

// Relaxed stream-capture mode for the calling thread for a scope: allocation calls (cudaMalloc,
// cuMemCreate, cuMemMap, cuMemSetAccess) are then allowed while another stream captures a graph
// in global mode, as PyTorch allows them. They are not captured; the memory outlives replays.
class RelaxedCaptureScope {
 public:
  RelaxedCaptureScope() {
    if (cudaThreadExchangeStreamCaptureMode(&mode_) != cudaSuccess) {
      cudaGetLastError();
      active_ = false;
    }
  }
  ~RelaxedCaptureScope() {
    if (active_ && cudaThreadExchangeStreamCaptureMode(&mode_) != cudaSuccess) cudaGetLastError();
  }
  RelaxedCaptureScope(const RelaxedCaptureScope&) = delete;
  RelaxedCaptureScope& operator=(const RelaxedCaptureScope&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
  bool active_ = true;
};

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

// Query result: true on success, false on cudaErrorNotReady (cleared), throws otherwise.
template <typename Describe>
bool CheckQuery(cudaError_t err, Describe&& describe) {
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  Fail(err, describe());
}

// --- the driver API, for virtual memory ------------------------------------------------------

// Driver entry points, looked up through the runtime rather than linked: linking libcuda would
// make strata fail to load on a machine without a driver, where the runtime API merely reports
// "no device". Requested at the ABI of the <cuda.h> compiled against.
struct Driver {
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuGetErrorName) get_error_name = nullptr;
  decltype(&::cuGetErrorString) get_error_string = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) primary_ctx_retain = nullptr;
  decltype(&::cuCtxPushCurrent) ctx_push = nullptr;
  decltype(&::cuCtxPopCurrent) ctx_pop = nullptr;
  decltype(&::cuMemGetAllocationGranularity) mem_get_granularity = nullptr;
  decltype(&::cuMemAddressReserve) mem_address_reserve = nullptr;
  decltype(&::cuMemAddressFree) mem_address_free = nullptr;
  decltype(&::cuMemCreate) mem_create = nullptr;
  decltype(&::cuMemRelease) mem_release = nullptr;
  decltype(&::cuMemMap) mem_map = nullptr;
  decltype(&::cuMemSetAccess) mem_set_access = nullptr;
  decltype(&::cuMemUnmap) mem_unmap = nullptr;
};

template <typename F>
void LoadEntryPoint(const char* symbol, F* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  Check(cudaGetDriverEntryPointByVersion(symbol, &p, CUDA_VERSION, cudaEnableDefault, &status),
        [symbol] { return absl::StrCat("cudaGetDriverEntryPointByVersion(", symbol, ")"); });
  if (status != cudaDriverEntryPointSuccess || p == nullptr) {
    throw RuntimeError(absl::StrCat(
        "strata cuda runtime: the CUDA driver has no ", symbol, " of version ", CUDA_VERSION,
        status == cudaDriverEntryPointVersionNotSufficent ? " (driver too old)" : ""));
  }
  *fn = reinterpret_cast<F>(p);
}

// Loaded once; a failed load throws and is tried again by the next call.
const Driver& GetDriver() {
  static const Driver* const driver = [] {
    auto d = std::make_unique<Driver>();
    LoadEntryPoint("cuInit", &d->init);
    LoadEntryPoint("cuGetErrorName", &d->get_error_name);
    LoadEntryPoint("cuGetErrorString", &d->get_error_string);
    LoadEntryPoint("cuDeviceGet", &d->device_get);
    LoadEntryPoint("cuDeviceGetAttribute", &d->device_get_attribute);
    LoadEntryPoint("cuDevicePrimaryCtxRetain", &d->primary_ctx_retain);
    LoadEntryPoint("cuCtxPushCurrent", &d->ctx_push);
    LoadEntryPoint("cuCtxPopCurrent", &d->ctx_pop);
    LoadEntryPoint("cuMemGetAllocationGranularity", &d->mem_get_granularity);
    LoadEntryPoint("cuMemAddressReserve", &d->mem_address_reserve);
    LoadEntryPoint("cuMemAddressFree", &d->mem_address_free);
    LoadEntryPoint("cuMemCreate", &d->mem_create);
    LoadEntryPoint("cuMemRelease", &d->mem_release);
    LoadEntryPoint("cuMemMap", &d->mem_map);
    LoadEntryPoint("cuMemSetAccess", &d->mem_set_access);
    LoadEntryPoint("cuMemUnmap", &d->mem_unmap);
    return d.release();  // leaked, like the runtime instance
  }();
  return *driver;
}

[[noreturn]] void FailDriver(CUresult result, const std::string& call) {
  const Driver& driver = GetDriver();
  const char* name = nullptr;
  const char* text = nullptr;
  if (driver.get_error_name(result, &name) != CUDA_SUCCESS) name = nullptr;
  if (driver.get_error_string(result, &text) != CUDA_SUCCESS) text = nullptr;
  throw RuntimeError(absl::StrCat("strata cuda runtime: ", call, " failed: ",
                                  name != nullptr ? name : absl::StrCat("CUresult ", result), ": ",
                                  text != nullptr ? text : "unknown error"));
}

template <typename Describe>
inline void CheckDriver(CUresult result, Describe&& describe) {
  if (result != CUDA_SUCCESS) [[unlikely]] {
    FailDriver(result, describe());
  }
}

// What virtual memory needs of one device, found once per device and kept for the process.
struct VmmDevice {
  CUdevice device = 0;
  CUcontext primary = nullptr;  // retained, never released
  std::size_t granularity = 0;  // 0: no virtual memory management
};

CUmemAllocationProp PinnedOn(CUdevice device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  return prop;
}

VmmDevice GetVmmDevice(int ordinal) {
  ABSL_CONST_INIT static absl::Mutex mu(absl::kConstInit);
  static auto* const devices = new absl::flat_hash_map<int, VmmDevice>();
  absl::MutexLock lock(&mu);
  if (auto it = devices->find(ordinal); it != devices->end()) return it->second;
  const Driver& driver = GetDriver();
  CheckDriver(driver.init(0), [] { return std::string("cuInit(0)"); });
  VmmDevice d;
  CheckDriver(driver.device_get(&d.device, ordinal),
              [ordinal] { return absl::StrCat("cuDeviceGet(", ordinal, ")"); });
  int supported = 0;
  CheckDriver(driver.device_get_attribute(
                  &supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, d.device),
              [ordinal] {
                return absl::StrCat(
                    "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) on device ",
                    ordinal);
              });
  CheckDriver(driver.primary_ctx_retain(&d.primary, d.device),
              [ordinal] { return absl::StrCat("cuDevicePrimaryCtxRetain on device ", ordinal); });
  if (supported != 0) {
    const CUmemAllocationProp prop = PinnedOn(d.device);
    CheckDriver(
        driver.mem_get_granularity(&d.granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
        [ordinal] { return absl::StrCat("cuMemGetAllocationGranularity on device ", ordinal); });
  }
  VLOG(4) << "strata cuda runtime: device " << ordinal << " VMM granularity " << d.granularity;
  devices->emplace(ordinal, d);
  return d;
}

// A device that has virtual memory management, or RuntimeError.
VmmDevice RequireVmm(int ordinal, const char* call) {
  VmmDevice d = GetVmmDevice(ordinal);
  if (d.granularity == 0) {
    throw RuntimeError(
        absl::StrCat("strata cuda runtime: ", call, " on device ", ordinal,
                     ": the device has no virtual memory management "
                     "(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0)"));
  }
  return d;
}

int CurrentDevice() {
  int device = 0;
  Check(cudaGetDevice(&device), [] { return std::string("cudaGetDevice"); });
  return device;
}

// Makes the device's primary context current for a scope (the driver calls need one), restoring
// whatever was current before.
class PrimaryContextScope {
 public:
  explicit PrimaryContextScope(const VmmDevice& d) : driver_(GetDriver()) {
    CheckDriver(driver_.ctx_push(d.primary), [] { return std::string("cuCtxPushCurrent"); });
  }
  ~PrimaryContextScope() {
    CUcontext popped = nullptr;
    const CUresult result = driver_.ctx_pop(&popped);
    if (result != CUDA_SUCCESS) {
      LOG(ERROR) << "strata cuda runtime: cuCtxPopCurrent failed: CUresult " << result;
    }
  }
  PrimaryContextScope(const PrimaryContextScope&) = delete;
  PrimaryContextScope& operator=(const PrimaryContextScope&) = delete;

 private:
  const Driver& driver_;
};

// Sizes, offsets and addresses must be multiples of the granularity (sizes also non-zero).
void CheckGranular(const char* call, const char* what, std::uint64_t value, std::size_t g,
                   bool nonzero) {
  if ((nonzero && value == 0) || value % g != 0) {
    throw RuntimeError(absl::StrCat("strata cuda runtime: ", call, ": ", what, " ", value,
                                    " is not a ", nonzero ? "non-zero " : "",
                                    "multiple of the granularity ", g));
  }
}

CUdeviceptr ToDevicePtr(void* ptr) { return reinterpret_cast<CUdeviceptr>(ptr); }

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

std::size_t CUDARuntime::VmmGranularity(int device) { return GetVmmDevice(device).granularity; }

void* CUDARuntime::ReserveAddress(int device, std::size_t size) {
  const VmmDevice d = RequireVmm(device, "ReserveAddress");
  CheckGranular("ReserveAddress", "size", size, d.granularity, /*nonzero=*/true);
  PrimaryContextScope context(d);
  CUdeviceptr ptr = 0;
  CheckDriver(GetDriver().mem_address_reserve(&ptr, size, d.granularity, 0, 0), [&] {
    return absl::StrCat("cuMemAddressReserve(", size, ", alignment ", d.granularity, ") on device ",
                        device);
  });
  return reinterpret_cast<void*>(ptr);
}

void CUDARuntime::FreeAddress(void* ptr, std::size_t size) {
  const VmmDevice d = GetVmmDevice(CurrentDevice());
  PrimaryContextScope context(d);
  CheckDriver(GetDriver().mem_address_free(ToDevicePtr(ptr), size),
              [&] { return absl::StrFormat("cuMemAddressFree(%p, %d)", ptr, size); });
}

PhysicalMemory CUDARuntime::CreatePhysical(int device, std::size_t size) {
  const VmmDevice d = RequireVmm(device, "CreatePhysical");
  CheckGranular("CreatePhysical", "size", size, d.granularity, /*nonzero=*/true);
  PrimaryContextScope context(d);
  RelaxedCaptureScope relaxed;
  const CUmemAllocationProp prop = PinnedOn(d.device);
  CUmemGenericAllocationHandle handle = 0;
  const CUresult result = GetDriver().mem_create(&handle, size, &prop, 0);
  if (result == CUDA_ERROR_OUT_OF_MEMORY) {
    VLOG(6) << "strata cuda runtime: cuMemCreate(" << size << ") on device " << device
            << ": out of memory";
    return PhysicalMemory{};
  }
  CheckDriver(result, [&] { return absl::StrCat("cuMemCreate(", size, ") on device ", device); });
  return PhysicalMemory{static_cast<std::uint64_t>(handle)};
}

void CUDARuntime::ReleasePhysical(PhysicalMemory mem) {
  const VmmDevice d = GetVmmDevice(CurrentDevice());
  PrimaryContextScope context(d);
  CheckDriver(GetDriver().mem_release(static_cast<CUmemGenericAllocationHandle>(mem.handle)),
              [mem] { return absl::StrCat("cuMemRelease(handle ", mem.handle, ")"); });
}

void CUDARuntime::Map(void* ptr, std::size_t size, PhysicalMemory mem, std::size_t offset,
                      int device) {
  const VmmDevice d = RequireVmm(device, "Map");
  CheckGranular("Map", "size", size, d.granularity, /*nonzero=*/true);
  CheckGranular("Map", "offset", offset, d.granularity, /*nonzero=*/false);
  if (offset != 0) {
    throw RuntimeError(absl::StrFormat(
        "strata cuda runtime: Map(%p, %d, handle %d, offset %d): the offset must be 0 (cuMemMap "
        "maps a physical allocation only from its start)",
        ptr, size, mem.handle, offset));
  }
  CheckGranular("Map", "address", ToDevicePtr(ptr), d.granularity, /*nonzero=*/false);
  PrimaryContextScope context(d);
  RelaxedCaptureScope relaxed;
  const Driver& driver = GetDriver();
  auto describe = [&](const char* call) {
    return absl::StrFormat("%s(%p, %d, handle %d, offset %d) on device %d", call, ptr, size,
                           mem.handle, offset, device);
  };
  CheckDriver(driver.mem_map(ToDevicePtr(ptr), size, offset,
                             static_cast<CUmemGenericAllocationHandle>(mem.handle), 0),
              [&] { return describe("cuMemMap"); });
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = d.device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const CUresult result = driver.mem_set_access(ToDevicePtr(ptr), size, &access, 1);
  if (result != CUDA_SUCCESS) {
    // Leave the range as it was: reserved, not mapped.
    const CUresult undo = driver.mem_unmap(ToDevicePtr(ptr), size);
    if (undo != CUDA_SUCCESS) {
      LOG(ERROR) << "strata cuda runtime: cuMemUnmap after a failed cuMemSetAccess: CUresult "
                 << undo;
    }
    FailDriver(result, describe("cuMemSetAccess"));
  }
}

void CUDARuntime::Unmap(void* ptr, std::size_t size) {
  const VmmDevice d = GetVmmDevice(CurrentDevice());
  PrimaryContextScope context(d);
  CheckDriver(GetDriver().mem_unmap(ToDevicePtr(ptr), size),
              [&] { return absl::StrFormat("cuMemUnmap(%p, %d)", ptr, size); });
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
void CUDARuntime::LaunchHostTask(Stream, std::function<void()>) { NoCuda(); }
void CUDARuntime::MemsetAsync(void*, int, std::size_t, Stream) { NoCuda(); }
void CUDARuntime::MemcpyAsync(void*, const void*, std::size_t, Stream) { NoCuda(); }

#endif  // STRATA_WITH_CUDA

}  // namespace strata::platform
