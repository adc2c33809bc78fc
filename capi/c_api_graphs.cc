// The C ABI's CUDA graph-pool family (strata/c_api.h, "CUDA graph pools"): PyTorch's
// CUDAPluggableAllocator hooks, with its exact C++ types, over facade/graph_pools.h.
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "capi/device_call.h"
#include "facade/allocator_facade.h"
#include "facade/graph_pools.h"
#include "platform/place.h"
#include "platform/stream.h"
#include "strata/c_api.h"

namespace strata::capi {
namespace {

// `op(facade, place, pool)` on CUDA device `device`; failures are logged (these hooks return
// nothing).
template <typename Op>
void PoolOp(const char* fn, int device, const strata_pool_id& pool, Op&& op) {
  OnDevice(
      device,
      [&] {
        return absl::StrCat(fn, "(device=", device, ", pool=(", pool.first, ", ", pool.second,
                            "))");
      },
      /*log=*/true,
      [&](facade::AllocatorFacade& f, const platform::Place& place) {
        op(f, place, facade::GraphPools::PoolId{pool.first, pool.second});
        return STRATA_OK;
      });
}

}  // namespace
}  // namespace strata::capi

using strata::capi::PoolOp;
using strata::facade::AllocatorFacade;
using strata::facade::GraphPools;
using strata::platform::Place;

extern "C" {

void strata_begin_allocate_to_pool(int device, strata_pool_id pool,
                                   std::function<bool(CUstream_st*)> filter) {
  PoolOp("strata_begin_allocate_to_pool", device, pool,
         [&](AllocatorFacade& f, const Place& place, GraphPools::PoolId id) {
           f.BeginAllocateToPool(place, id,
                                 [filter = std::move(filter)](strata::platform::Stream s) {
                                   return filter(static_cast<CUstream_st*>(s.handle));
                                 });
         });
}

void strata_end_allocate_to_pool(int device, strata_pool_id pool) {
  PoolOp("strata_end_allocate_to_pool", device, pool,
         [](AllocatorFacade& f, const Place& place, GraphPools::PoolId id) {
           f.EndAllocateToPool(place, id);
         });
}

void strata_release_pool(int device, strata_pool_id pool) {
  PoolOp("strata_release_pool", device, pool,
         [](AllocatorFacade& f, const Place& place, GraphPools::PoolId id) {
           f.ReleasePool(place, id);
         });
}

}  // extern "C"
