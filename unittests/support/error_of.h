// ErrorOf: the message of the exception a test expects a call to throw, for tests that check
// what the message says.
#pragma once

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace strata::testing {

// The what() of the E that `f` throws. When `f` throws nothing the test fails, and the result is
// "no error", which no expected message contains.
template <typename E = std::invalid_argument, typename F>
std::string ErrorOf(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception thrown";
  return "no error";
}

}  // namespace strata::testing
