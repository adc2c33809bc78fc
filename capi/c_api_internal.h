// The C ABI's error handling, for the files of capi/ other than c_api.cc (which holds the
// library's state): every exception becomes an error code and the calling thread's message
// (strata/c_api.h, "Contract"). Not installed; not for use outside capi/.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "facade/allocator_facade.h"
#include "platform/place.h"

namespace strata::capi {

using PlaceOp = std::function<int(facade::AllocatorFacade&, const platform::Place&)>;
using TextOp = std::function<std::string(facade::AllocatorFacade&, const platform::Place&)>;

// Runs `body`; an exception becomes an error code, with `where` (built only on failure) as the
// message's prefix, logged at ERROR when `log`.
int GuardCall(const std::function<int()>& body, const std::function<std::string()>& where,
              bool log) noexcept;
// `op` on CUDA device `device` of the current allocator, under GuardCall (a bad device is an
// error).
int OnDeviceCall(int device, const std::function<std::string()>& where, bool log,
                 const PlaceOp& op) noexcept;
// A strata_*(device, buf, len) text function: `text` copied out with snprintf's rules.
int TextCall(const char* fn, int device, char* buf, std::size_t len, const TextOp& text) noexcept;
// The current allocator (built on first use); call inside GuardCall.
facade::AllocatorFacade& CurrentFacade();

}  // namespace strata::capi
