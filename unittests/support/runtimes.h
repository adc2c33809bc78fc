// Runtimes for suites written once and run against both the emulated and the CUDA runtime.
// GetRuntime returns nullptr (with the reason in *why) when the kind is not usable here, and
// the suite then skips.
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "platform/device_runtime.h"

namespace strata::testing {

enum class RuntimeKind { kEmulated, kCuda };

inline void PrintTo(RuntimeKind kind, std::ostream* os) {
  *os << (kind == RuntimeKind::kCuda ? "cuda" : "emulated");
}

// Process-wide instances: the emulated one has 2 devices of 8 GiB (address space only).
platform::DeviceRuntime* GetRuntime(RuntimeKind kind, std::string* why);

// Base of CUDA-only suites (name them CUDA...): skips with the reason when no GPU is usable.
class CUDAFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    runtime_ = GetRuntime(RuntimeKind::kCuda, &why);
    if (runtime_ == nullptr) GTEST_SKIP() << why;
  }
  platform::DeviceRuntime* runtime_ = nullptr;
};

}  // namespace strata::testing
