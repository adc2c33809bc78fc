// The C ABI's allocation family (strata/c_api.h, "allocation" and "streams"): strata_malloc and
// the frees, PyTorch's CUDAPluggableAllocator signatures, strata_record_stream and
// strata_end_stream.
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "allocation/allocation.h"
#include "capi/guard.h"
#include "capi/library_state.h"
#include "facade/allocator_facade.h"
#include "glog/logging.h"
#include "platform/place.h"
#include "platform/stream.h"
#include "strata/c_api.h"

namespace strata::capi {
namespace {

int FreeImpl(void* ptr, const char* fn, ssize_t size, int device, void* stream) {
  if (ptr == nullptr) return STRATA_OK;
  // The whole free runs under Guard's in-flight count, from before the registry take until the
  // allocation is back in its pool: a reconfiguration that finds the pointer gone must also find
  // this call in flight, or it would retire the allocator under the free.
  return Guard(
      [&] {
        allocation::AllocationPtr a = Library().registry().Take(ptr);
        if (a == nullptr) {
          throw Error(STRATA_ERROR_UNKNOWN_POINTER,
                      "unknown pointer: not allocated by strata_malloc, or already freed");
        }
        VLOG(10) << "strata_free " << ptr << " (" << a->size() << " bytes, " << a->place() << ")";
        a.reset();  // back to the pool of the stream it was allocated on
        return STRATA_OK;
      },
      [&] {
        return absl::StrCat(fn, "(ptr=", PointerText(ptr), ", size=", size, ", device=", device,
                            ", stream=", PointerText(stream), ")");
      },
      /*log=*/true);
}

}  // namespace
}  // namespace strata::capi

using strata::capi::Guard;
using strata::capi::Library;
using strata::capi::PointerText;

extern "C" {

void* strata_malloc(ssize_t size, int device, void* stream) {
  if (size == 0) return nullptr;  // PyTorch never frees what a 0-byte request returns
  void* result = nullptr;
  Guard(
      [&] {
        if (size < 0) {
          throw std::invalid_argument(absl::StrCat("negative size ", size));
        }
        strata::facade::AllocatorFacade& f = Library().Facade();
        Library().CheckDevice(f, device);
        const strata::platform::CUDAPlace place(device);
        const std::size_t bytes = static_cast<std::size_t>(size);
        // The default stream's chain is reached without a lock.
        strata::allocation::AllocationPtr a =
            stream == nullptr ? f.Alloc(place, bytes)
                              : f.Alloc(place, bytes, strata::platform::Stream{stream});
        result = a->ptr();
        VLOG(10) << "strata_malloc " << size << " bytes on " << place << " stream " << stream
                 << " -> " << result;
        Library().registry().Insert(result, std::move(a));
        return STRATA_OK;
      },
      [&] {
        return absl::StrCat("strata_malloc(size=", size, ", device=", device,
                            ", stream=", PointerText(stream), ")");
      },
      /*log=*/true);
  return result;
}

void* strata_malloc_or_throw(ssize_t size, int device, void* stream) {
  void* result = strata_malloc(size, device, stream);
  if (result == nullptr && size != 0) throw std::runtime_error(strata_last_error());
  return result;
}

void strata_free(void* ptr, ssize_t size, int device, void* stream) {
  (void)strata::capi::FreeImpl(ptr, "strata_free", size, device, stream);
}

int strata_free_checked(void* ptr) {
  return strata::capi::FreeImpl(ptr, "strata_free_checked", -1, -1, nullptr);
}

int strata_record_stream(void* ptr, void* stream) {
  return Guard(
      [&] {
        strata::facade::AllocatorFacade* f = Library().FacadeIfBuilt();
        bool recorded = false;
        const bool known = f != nullptr && Library().registry().With(ptr, [&](auto& allocation) {
          recorded = f->RecordStream(allocation, strata::platform::Stream{stream});
        });
        if (!known) {
          throw strata::capi::Error(
              STRATA_ERROR_UNKNOWN_POINTER,
              "unknown pointer: not allocated by strata_malloc (pass the pointer it returned, "
              "not an offset into it), or already freed");
        }
        return recorded ? 1 : 0;
      },
      [&] {
        return absl::StrCat("strata_record_stream(ptr=", PointerText(ptr),
                            ", stream=", PointerText(stream), ")");
      },
      /*log=*/false);
}

int strata_end_stream(int device, void* stream) {
  return Guard(
      [&] {
        strata::facade::AllocatorFacade& f = Library().Facade();
        Library().CheckDevice(f, device);
        f.EndStream(strata::platform::CUDAPlace(device), strata::platform::Stream{stream});
        return STRATA_OK;
      },
      [&] {
        return absl::StrCat("strata_end_stream(device=", device, ", stream=", PointerText(stream),
                            ")");
      },
      /*log=*/true);
}

}  // extern "C"
