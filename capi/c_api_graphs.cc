// The C ABI's CUDA graph-pool family (strata/c_api.h, "CUDA graph pools"): PyTorch's
// CUDAPluggableAllocator hooks, with its exact C++ types, over facade/graph_pools.h.
#include <functional>
#include <utility>

#include "capi/device_call.h"
#include "facade/allocator_facade.h"
#include "facade/graph_pools.h"
#include "platform/place.h"
#include "platform/stream.h"
#include "strata/c_api.h"

namespace strata::capi {
namespace {

// `op(facade, place, pool)` on CUDA device `device` (a facade member or a callable); failures
// are logged (these hooks return nothing).
template <typename Op>
void PoolOp(const char* fn, int device, const strata_pool_id& pool, Op&& op) {
  OnDevice(device, CallText(fn, "device=", device, ", pool=(", pool.first, ", ", pool.second, ")"),
           /*log=*/true, [&](facade::AllocatorFacade& f, const platform::Place& place) {
             std::invoke(op, f, place, facade::GraphPools::PoolId{pool.first, pool.second});
           });
}

}  // namespace
}  // namespace strata::capi

using strata::capi::PoolOp;
using strata::facade::AllocatorFacade;

extern "C" {

void strata_begin_allocate_to_pool(int device, strata_pool_id pool,
                                   std::function<bool(CUstream_st*)> filter) {
  PoolOp("strata_begin_allocate_to_pool", device, pool,
         [&](AllocatorFacade& f, const strata::platform::Place& place,
             strata::facade::GraphPools::PoolId id) {
           f.BeginAllocateToPool(place, id,
                                 [filter = std::move(filter)](strata::platform::Stream s) {
                                   return filter(static_cast<CUstream_st*>(s.handle));
                                 });
         });
}

void strata_end_allocate_to_pool(int device, strata_pool_id pool) {
  PoolOp("strata_end_allocate_to_pool", device, pool, &AllocatorFacade::EndAllocateToPool);
}

void strata_release_pool(int device, strata_pool_id pool) {
  PoolOp("strata_release_pool", device, pool, &AllocatorFacade::ReleasePool);
}

}  // extern "C"
