// C ABI calls on one CUDA device of the current allocator, and the text functions' copy-out
// (snprintf's rules). Not installed; for capi/ only.
//
// Thread-safe; nothing here throws (the calls run under Guard(), capi/guard.h, which lets only a
// thread's forced unwind through).
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "capi/guard.h"
#include "capi/library_state.h"
#include "facade/allocator_facade.h"
#include "platform/place.h"
#include "strata/c_api.h"

namespace strata::capi {

// snprintf-style copy of `text` into buf[len]; returns text's length. Throws
// std::invalid_argument for a NULL buf with len > 0 and for text longer than INT_MAX.
int CopyOut(const std::string& text, char* buf, std::size_t len);

// A Guard `where` for the call `fn(args...)`: builds "fn(<args joined>)" when called, e.g.
// CallText("strata_empty_cache", "device=", 0)() is "strata_empty_cache(device=0)". Holds copies
// of `args` (numbers and C strings).
template <typename... Args>
auto CallText(const char* fn, const Args&... args) {
  return [fn, args...] { return absl::StrCat(fn, "(", args..., ")"); };
}

// `op(facade, place)` on CUDA device `device`, under Guard with `where` as the message prefix (a
// bad device is an error). Returns op's int result, or STRATA_OK when op returns nothing.
template <typename Op, typename Where>
int OnDevice(int device, Where&& where, bool log, Op&& op) {
  return Guard(
      [&] {
        facade::AllocatorFacade& f = Library().Facade();
        Library().CheckDevice(f, device);
        const platform::CUDAPlace place(device);
        if constexpr (std::is_void_v<decltype(op(f, place))>) {
          op(f, place);
          return STRATA_OK;
        } else {
          return op(f, place);
        }
      },
      where, log);
}

// A strata_*(device, buf, len) text function: `text(facade, place)` copied out.
template <typename Text>
int TextOut(const char* fn, int device, char* buf, std::size_t len, Text&& text) {
  return OnDevice(device, CallText(fn, "device=", device, ", len=", len), /*log=*/false,
                  [&](facade::AllocatorFacade& f, const platform::Place& place) {
                    return CopyOut(text(f, place), buf, len);
                  });
}

}  // namespace strata::capi
