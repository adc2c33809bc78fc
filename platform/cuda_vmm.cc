// CUDARuntime, virtual memory: reserving address ranges, creating physical allocations and
// mapping them, through the CUDA driver API (the contract's "Virtual memory" in cuda_runtime.h).
// Separate from the runtime-API half (cuda_runtime.cc): it calls another API (the driver's, whose
// entry points cuda_driver.h loads), in another context (the device's primary context, pushed for
// the call), and keeps state of its own (what each device's virtual memory needs, found once).
#include "platform/cuda_runtime.h"

#if STRATA_WITH_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "absl/base/attributes.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "glog/logging.h"
#include "platform/cuda_call.h"
#include "platform/cuda_driver.h"

namespace strata::platform {

using internal::Check;
using internal::CheckDriver;
using internal::Driver;
using internal::FailDriver;
using internal::GetDriver;
using internal::RelaxedCaptureScope;

namespace {

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

}  // namespace strata::platform

#endif  // STRATA_WITH_CUDA
