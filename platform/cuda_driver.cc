// Loading the CUDA driver API's entry points through the runtime (cuda_driver.h says why).
#include "platform/cuda_driver.h"

#if STRATA_WITH_CUDA
#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "platform/cuda_call.h"
#include "platform/device_runtime.h"

namespace strata::platform::internal {

namespace {

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

}  // namespace

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

}  // namespace strata::platform::internal

#endif  // STRATA_WITH_CUDA
