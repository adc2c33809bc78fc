#include "support/test_paths.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace strata::testing {

namespace {

namespace fs = std::filesystem;

std::string FindRootFrom(fs::path dir) {
  std::error_code ec;
  while (!dir.empty()) {
    if (fs::is_directory(dir / "tools" / "traces", ec)) return dir.string();
    if (dir == dir.root_path()) break;
    dir = dir.parent_path();
  }
  return "";
}

}  // namespace

const std::string& RepoRoot() {
  static const std::string root = [] {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      std::string r = FindRootFrom(exe.parent_path());
      if (!r.empty()) return r;
    }
    const fs::path cwd = fs::current_path(ec);
    return ec ? std::string() : FindRootFrom(cwd);
  }();
  return root;
}

std::string BundledTracesDir() {
  return RepoRoot().empty() ? std::string() : RepoRoot() + "/tools/traces";
}

std::string SharedTracesDir(std::string* why) {
  std::error_code ec;
  if (const char* env = std::getenv("STRATA_TRACE_DIR"); env != nullptr && *env != '\0') {
    if (fs::is_directory(env, ec)) return env;
    if (why) *why = absl::StrCat("STRATA_TRACE_DIR=", env, " is not a directory");
    return "";
  }
  if (RepoRoot().empty()) {
    if (why) *why = "repository root (a directory holding tools/traces) not found";
    return "";
  }
  for (const char* rel : {"/../shared/traces", "/shared/traces"}) {
    const fs::path dir = fs::path(RepoRoot() + rel).lexically_normal();
    if (fs::is_directory(dir, ec)) return dir.string();
  }
  if (why) {
    *why = absl::StrCat("no shared traces in ", RepoRoot(), "/../shared/traces or ", RepoRoot(),
                        "/shared/traces (set STRATA_TRACE_DIR)");
  }
  return "";
}

}  // namespace strata::testing
