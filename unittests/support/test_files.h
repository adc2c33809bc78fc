// Scratch files for tests: a path in the test temporary directory, and a file written or read
// whole.
#pragma once

#include <string>

namespace strata::testing {

// <::testing::TempDir()>/strata_test_<pid>_<name>: the process id keeps test binaries that run
// at the same time apart.
std::string TempPath(const std::string& name);

// Writes `text` as the whole file (binary); fails the test when it cannot.
void WriteFile(const std::string& path, const std::string& text);

// The whole file (binary); "" when it cannot be opened.
std::string ReadFile(const std::string& path);

}  // namespace strata::testing
