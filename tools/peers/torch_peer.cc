// The PyTorch peer of strata-bench: PyTorch's CUDA caching allocator
// (c10::cuda::CUDACachingAllocator) behind the plain C interface of peer_api.h.
//
// Built on the GPU machine against the installed PyTorch by build_torch_peer.sh, never by our
// CMake (it needs PyTorch's headers and libc10_cuda; strata needs Abseil and glog, which the GPU
// machine lacks — the C interface keeps the two apart).
//
// - peer_alloc / peer_free are raw_alloc_with_stream / raw_delete: exactly the caching allocator's
//   malloc and free, without a Tensor or a DataPtr around them.
// - peer_record_stream (compiled with STRATA_PEER_RECORD_STREAM) is the allocator's recordStream.
//   That call takes a DataPtr whose deleter is the allocator's own: we learn that deleter from one
//   DataPtr the allocator hands out at init, wrap the raw pointer in a DataPtr with it for the
//   call, and release the DataPtr's ownership afterwards so nothing is freed twice.
// - Exceptions (c10::Error, OutOfMemoryError) never cross the C boundary: they become nullptr /
//   an error code and peer_last_error().
#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>
#include <exception>
#include <string>

#include "tools/peers/peer_api.h"

namespace {

namespace alloc = c10::cuda::CUDACachingAllocator;

thread_local std::string last_error;

#ifdef STRATA_PEER_RECORD_STREAM
c10::DeleterFnPtr torch_deleter = nullptr;
#endif

void Remember(const char* what, const std::exception& e) {
  last_error = std::string(what) + ": " + e.what();
}

}  // namespace

extern "C" {

int peer_init(void) {
  try {
    const int devices = static_cast<int>(c10::cuda::device_count());
    if (devices <= 0) {
      last_error = "peer_init: PyTorch sees no CUDA device";
      return 1;
    }
    if (!alloc::get()->initialized()) alloc::get()->init(devices);
    c10::cuda::set_device(0);
#ifdef STRATA_PEER_RECORD_STREAM
    {
      c10::DataPtr probe = alloc::get()->allocate(1);
      torch_deleter = probe.get_deleter();
    }
#endif
    return 0;
  } catch (const std::exception& e) {
    Remember("peer_init", e);
    return 1;
  }
}

const char* peer_name(void) { return "torch"; }

const char* peer_last_error(void) { return last_error.c_str(); }

void* peer_alloc(size_t bytes, void* stream) {
  try {
    return alloc::get()->raw_alloc_with_stream(bytes, static_cast<cudaStream_t>(stream));
  } catch (const std::exception& e) {
    Remember("raw_alloc_with_stream", e);
    return nullptr;
  }
}

void peer_free(void* ptr) {
  try {
    alloc::get()->raw_delete(ptr);
  } catch (const std::exception& e) {
    Remember("raw_delete", e);
  }
}

#ifdef STRATA_PEER_RECORD_STREAM
int peer_record_stream(void* ptr, void* stream) {
  try {
    if (torch_deleter == nullptr) {
      last_error = "peer_record_stream: the allocator's deleter is unknown";
      return 1;
    }
    const c10::cuda::CUDAStream s =
        stream == nullptr ? c10::cuda::getDefaultCUDAStream(0)
                          : c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(stream), 0);
    c10::DataPtr view(ptr, ptr, torch_deleter, c10::Device(c10::DeviceType::CUDA, 0));
    alloc::get()->recordStream(view, s);
    (void)view.release_context();  // the block stays owned by the caller
    return 0;
  } catch (const std::exception& e) {
    Remember("recordStream", e);
    return 1;
  }
}
#endif

void peer_release(void) {
  try {
    c10::cuda::device_synchronize();
    alloc::get()->emptyCache();
  } catch (const std::exception& e) {
    Remember("emptyCache", e);
  }
}

void peer_reset_peak(void) {
  try {
    alloc::get()->resetPeakStats(0);
  } catch (const std::exception& e) {
    Remember("resetPeakStats", e);
  }
}

uint64_t peer_peak_reserved(void) {
  try {
    const auto stats = alloc::get()->getDeviceStats(0);
    return static_cast<uint64_t>(stats.reserved_bytes[0].peak);
  } catch (const std::exception& e) {
    Remember("getDeviceStats", e);
    return 0;
  }
}

}  // extern "C"
