// The CUDA driver API entry points the CUDA backend uses (for virtual memory), as a table of
// function pointers looked up at first use, and the reporting of a failed driver call
// (FailDriver, CheckDriver). Separate from the code that makes the calls (cuda_vmm.cc): loading
// the table is a mechanism of its own, process-wide and done once, that knows nothing of what the
// calls are for. Internal to the CUDA backend; empty when strata is built without CUDA.
#pragma once

#if STRATA_WITH_CUDA
// <cuda.h> only declares the driver API: its functions are looked up at run time (GetDriver).
#include <cuda.h>

#include <string>

namespace strata::platform::internal {

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

// The table, loaded once (cuda_driver.cc); a failed load throws and is tried again by the next
// call.
const Driver& GetDriver();

// Throws RuntimeError naming `call` and the CUresult's name and text.
[[noreturn]] void FailDriver(CUresult result, const std::string& call);

// `describe` builds the call's description only on failure, as Check does (cuda_call.h).
template <typename Describe>
inline void CheckDriver(CUresult result, Describe&& describe) {
  if (result != CUDA_SUCCESS) [[unlikely]] {
    FailDriver(result, describe());
  }
}

}  // namespace strata::platform::internal

#endif  // STRATA_WITH_CUDA
