// The device's memory calls, timed through a DeviceRuntime (strata-bench registers these): what a
// pool pays when it grows, stitches or gives memory back.
//
//   BM_DeviceCalls/vmm_cycle/<pages>   create a physical allocation of <pages> VMM pages, map it
//                                      (with access), unmap, release: one pool growth and release
//   BM_DeviceCalls/vmm_remap/<pages>   map (with access) and unmap an existing allocation:
//                                      what stitching a page into another range costs
//   BM_DeviceCalls/vmm_grow/<pages>/real_time/threads:<t>
//                                      create and map (with access) <pages> pages, one physical
//                                      allocation each, in each of <t> threads: a growth, and
//                                      whether the driver serves several threads at once
//                                      (items_per_second: pages, all threads together)
//   BM_DeviceCalls/malloc/<pages>      device malloc + free of the same bytes (cudaFree waits
//                                      for the device)
//   BM_DeviceCalls/vmm_cycle_busy/1, vmm_remap_busy/1
//                                      the same for one page while a kernel runs on another
//                                      stream (CUDA only): counter busy = the fraction of
//                                      iterations whose kernel still ran after the calls
//   BM_DeviceCalls/event_fence, event_query, event_wait
//                                      a capture check and event record on a stream (a pool's
//                                      fence), a query of a completed event, a device-side wait
//                                      of one stream on another's event: the warm path's calls
// Counter ns_per_page: the time of one iteration over <pages>. Skipped (with the reason) where
// the runtime has no virtual memory.
//
// Thread-compatible: registration once, from the benchmark's main thread.
#pragma once

#include "platform/device_runtime.h"

namespace strata::tools {

// `runtime` must outlive the benchmarks; they use `device`. `cuda`: the runtime is CUDA's (the
// busy variants launch kernels).
void RegisterDeviceCallBenchmarks(platform::DeviceRuntime* runtime, int device, bool cuda);

}  // namespace strata::tools
