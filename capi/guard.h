// The C ABI's error contract (strata/c_api.h, "Contract"): every exception stops at Guard(),
// which maps it to an error code and sets the calling thread's message. Not installed; for
// capi/ only.
//
// Thread safety: the last-error message is per thread; everything here may run on any thread.
// Nothing here throws, with one exception that must pass: a thread's forced unwind
// (abi::__forced_unwind: pthread_exit or cancellation inside a user callback, as when Python ends
// a daemon thread that calls back into it at exit). Swallowing it aborts the process, and a
// noexcept frame in its way terminates it, so Guard() is not noexcept and rethrows it.
#pragma once

#include <cxxabi.h>

#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "allocation/bad_alloc.h"
#include "capi/in_flight.h"
#include "platform/device_runtime.h"
#include "strata/c_api.h"

namespace strata::capi {

// A failure that already knows its C error code.
class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// Makes `message` the calling thread's last error; logs it at ERROR when `log` (callers that
// cannot see an error code, such as PyTorch's free_fn or an unchecked NULL, still get it).
// May throw std::bad_alloc.
void SetLastError(std::string message, bool log);

// The calling thread's last error ("" if none); valid until its next failing call.
const char* LastError() noexcept;

// "%p" of `p`, for messages.
std::string PointerText(const void* p);

// Sets the thread's message "<where()>: <what>" (and logs it when `log`); returns `code`.
template <typename Where>
int Fail(int code, Where& where, const char* what, bool log) noexcept {
  try {
    SetLastError(absl::StrCat(where(), ": ", what), log);
  } catch (...) {
    // Out of host memory while reporting: the code still tells the caller.
  }
  return code;
}

// Runs `body` (returning the call's int result) counted in flight (capi/in_flight.h), turning
// every exception into an error code. `where` builds the message prefix, only on failure.
template <typename Body, typename Where>
int Guard(Body&& body, Where&& where, bool log) {
  try {
    const InFlight in_flight;
    return std::forward<Body>(body)();
  } catch (abi::__forced_unwind&) {
    throw;  // the thread is ending: let it
  } catch (const Error& e) {
    return Fail(e.code(), where, e.what(), log);
  } catch (const allocation::BadAlloc& e) {
    return Fail(STRATA_ERROR_OUT_OF_MEMORY, where, e.what(), log);
  } catch (const std::bad_alloc&) {
    return Fail(STRATA_ERROR_OUT_OF_MEMORY, where, "host out of memory (std::bad_alloc)", log);
  } catch (const std::invalid_argument& e) {
    return Fail(STRATA_ERROR_INVALID_ARGUMENT, where, e.what(), log);
  } catch (const platform::RuntimeError& e) {
    return Fail(STRATA_ERROR_RUNTIME, where, e.what(), log);
  } catch (const std::exception& e) {
    return Fail(STRATA_ERROR_INTERNAL, where, e.what(), log);
  } catch (...) {
    return Fail(STRATA_ERROR_INTERNAL, where, "unknown exception", log);
  }
}

}  // namespace strata::capi
