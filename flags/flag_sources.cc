#include "flags/flag_sources.h"

#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "flags/alloc_conf.h"
#include "flags/flags.h"

namespace strata::flags {
namespace {

// Abseil here has its own string_view type; the public API takes std::string_view.
absl::string_view A(std::string_view s) { return {s.data(), s.size()}; }
std::string_view S(absl::string_view s) { return {s.data(), s.size()}; }

// Writers through this API and Current() hold it, so a snapshot never mixes two updates.
ABSL_CONST_INIT absl::Mutex g_mu(absl::kConstInit);
bool g_env_loaded ABSL_GUARDED_BY(g_mu) = false;

// PYTORCH_CUDA_ALLOC_CONF keys we do not implement: named as such in the error, so a user
// copying a PyTorch config learns that the option is known but unsupported, not misspelled.
constexpr std::string_view kUnsupportedPyTorchKeys[] = {
    "backend",
    "release_lock_on_cudamalloc",
    "pinned_use_cuda_host_register",
    "pinned_num_register_threads",
    "pinned_use_background_threads",
    "pinned_reserve_segment_size_mb",
    "max_non_split_rounding_mb",
    "per_process_memory_fraction",
    "graph_capture_record_stream_reuse",
};

// What a built-in flag type accepts; Abseil's own message only says "Illegal value". Custom types
// (strategy, divisions) explain themselves.
std::string ExpectedSyntax(const absl::CommandLineFlag& flag) {
  if (flag.IsOfType<bool>()) return "; expected true or false (or 1/0, yes/no, t/f, y/n)";
  if (flag.IsOfType<std::uint64_t>()) {
    return absl::StrCat("; expected a non-negative integer (<= ", ~std::uint64_t{0}, ")");
  }
  if (flag.IsOfType<std::int64_t>()) return "; expected an integer";
  if (flag.IsOfType<double>()) return "; expected a decimal number";
  return "";
}

// Flag writes that all stick or, if anything fails (a value, or validation), all revert.
class Transaction {
 public:
  Transaction() = default;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction() {
    if (!committed_) Rollback();
  }

  // `source` says where the value came from, for messages ("environment variable FLAGS_x").
  void Set(absl::string_view name, absl::string_view value, std::string source) {
    absl::CommandLineFlag* flag = IsStrataFlag(S(name)) ? absl::FindCommandLineFlag(name) : nullptr;
    if (flag == nullptr) {
      throw std::invalid_argument(absl::StrCat(source, ": unknown flag '", name,
                                               "'; supported flags: ", SupportedFlagList()));
    }
    std::string old_value = flag->CurrentValue();
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      throw std::invalid_argument(absl::StrCat(source, ": ", error, ExpectedSyntax(*flag)));
    }
    changes_.push_back(Change{flag, std::move(old_value), std::string(value), std::move(source)});
  }

  // Validates the flags as they now are; throws (and so reverts) on any problem.
  void Commit() {
    std::vector<AllocatorFlags::Problem> problems = AllocatorFlags::ReadLive().Problems();
    if (!problems.empty()) {
      std::vector<std::string> messages;
      for (const AllocatorFlags::Problem& problem : problems) {
        std::string message = problem.message;
        // Quote the text as the user wrote it, and where it came from.
        for (const std::string& name : problem.flags) {
          auto it = std::find_if(changes_.rbegin(), changes_.rend(),
                                 [&](const Change& c) { return c.flag->Name() == name; });
          if (it != changes_.rend()) {
            absl::StrAppend(&message, " (", name, " set to '", it->raw_value, "' by ", it->source,
                            ")");
          }
        }
        messages.push_back(std::move(message));
      }
      throw std::invalid_argument(
          absl::StrCat("invalid allocator flags: ", absl::StrJoin(messages, "; ")));
    }
    committed_ = true;
  }

 private:
  struct Change {
    absl::CommandLineFlag* flag;
    std::string old_value;
    std::string raw_value;
    std::string source;
  };

  void Rollback() {
    for (auto it = changes_.rbegin(); it != changes_.rend(); ++it) {
      std::string error;
      // Cannot fail: the old value is the flag's own unparsed text.
      if (!it->flag->ParseFrom(it->old_value, &error)) {
        LOG(ERROR) << "strata flags: could not restore " << it->flag->Name() << "='"
                   << it->old_value << "': " << error;
      }
    }
  }

  std::vector<Change> changes_;
  bool committed_ = false;
};

void ApplyAllocConfTo(Transaction& tx, absl::string_view conf, absl::string_view origin) {
  if (conf.size() > kMaxAllocConfBytes) {
    throw std::invalid_argument(absl::StrCat(origin, ": the config is ", conf.size(),
                                             " bytes long; at most ", kMaxAllocConfBytes,
                                             " are accepted"));
  }
  AllocConf parsed;
  try {
    parsed = AllocConf::Parse(S(conf));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(absl::StrCat(origin, ": ", e.what()));
  }
  for (const AllocConf::Entry& entry : parsed.entries()) {
    if (entry.key == "expandable_segments") {  // PyTorch's spelling of the virtual-memory pool
      tx.Set("use_virtual_memory_auto_growth", entry.value,
             absl::StrCat(origin, " entry '", entry.key, ":", entry.value, "'"));
      continue;
    }
    if (!IsStrataFlag(entry.key)) {
      bool pytorch =
          std::find(std::begin(kUnsupportedPyTorchKeys), std::end(kUnsupportedPyTorchKeys),
                    entry.key) != std::end(kUnsupportedPyTorchKeys);
      throw std::invalid_argument(absl::StrCat(
          origin, ": ",
          pytorch ? absl::StrCat("key '", entry.key,
                                 "' is a PyTorch allocator option that strata does not support")
                  : absl::StrCat("unknown key '", entry.key, "'"),
          " (in entry '", entry.key, ":", entry.value,
          "'); supported keys: ", SupportedFlagList()));
    }
    tx.Set(entry.key, entry.value,
           absl::StrCat(origin, " entry '", entry.key, ":", entry.value, "'"));
  }
}

void LoadFromEnvironmentLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_mu) {
  Transaction tx;
  for (std::string_view name : kFlagNames) {
    std::string variable = absl::StrCat(A(kEnvPrefix), A(name));
    if (const char* value = std::getenv(variable.c_str())) {
      tx.Set(A(name), value, absl::StrCat("environment variable ", variable));
    }
  }
  std::string conf_variable(A(kAllocConfEnv));
  if (const char* conf = std::getenv(conf_variable.c_str())) {
    ApplyAllocConfTo(tx, conf, absl::StrCat("environment variable ", conf_variable));
  }
  tx.Commit();
  g_env_loaded = true;
  VLOG(4) << "strata flags after the environment: " << AllocatorFlags::ReadLive().DebugString();
}

// A glog (gflags) flag that Abseil does not know; gflags' own flags (--help, --flagfile, ...)
// are left to Abseil, which has its own.
bool FindGlogFlag(absl::string_view name, google::CommandLineFlagInfo* info) {
  if (name.empty() || absl::FindCommandLineFlag(name) != nullptr) return false;
  return google::GetCommandLineFlagInfo(std::string(name).c_str(), info) &&
         !absl::StrContains(info->filename, "gflags");
}

// Applies glog's flags from the command line to gflags; returns the other arguments.
std::vector<char*> HandOverGlogFlags(int argc, char** argv) {
  std::vector<char*> rest;
  if (argc > 0) rest.push_back(argv[0]);
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {  // the end of flags: keep it and everything after for Abseil
      rest.insert(rest.end(), argv + i, argv + argc);
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      rest.push_back(argv[i]);
      continue;
    }
    absl::string_view body = arg.substr(arg[1] == '-' ? 2 : 1);
    std::size_t eq = body.find('=');
    absl::string_view name = body.substr(0, eq);
    google::CommandLineFlagInfo info;
    std::string value;
    if (FindGlogFlag(name, &info)) {
      if (eq != absl::string_view::npos) {
        value = std::string(body.substr(eq + 1));
      } else if (info.type == "bool") {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        throw std::invalid_argument(
            absl::StrCat("command line: glog flag --", name, " needs a value"));
      }
    } else if (eq == absl::string_view::npos && absl::StartsWith(name, "no") &&
               FindGlogFlag(name.substr(2), &info) && info.type == "bool") {
      name.remove_prefix(2);
      value = "false";
    } else {
      rest.push_back(argv[i]);
      continue;
    }
    if (google::SetCommandLineOption(std::string(name).c_str(), value.c_str()).empty()) {
      throw std::invalid_argument(absl::StrCat("command line: invalid value '", value,
                                               "' for glog flag --", name, " (type ", info.type,
                                               ")"));
    }
  }
  return rest;
}

}  // namespace

AllocatorFlags Current() {
  AllocatorFlags flags;
  {
    absl::MutexLock lock(&g_mu);
    flags = AllocatorFlags::ReadLive();
  }
  flags.Validate();
  return flags;
}

void SetFlag(std::string_view name_in, std::string_view value_in, std::string_view origin_in) {
  absl::string_view name = A(name_in), value = A(value_in), origin = A(origin_in);
  absl::MutexLock lock(&g_mu);
  Transaction tx;
  tx.Set(name, value, absl::StrCat(origin, " ", name, "=", value));
  tx.Commit();
  VLOG(4) << "strata flags: " << origin << " set " << name << "=" << value;
}

void ApplyAllocConf(std::string_view conf_in, std::string_view origin_in) {
  absl::string_view conf = A(conf_in), origin = A(origin_in);
  absl::MutexLock lock(&g_mu);
  Transaction tx;
  ApplyAllocConfTo(tx, conf, origin);
  tx.Commit();
  VLOG(4) << "strata flags: " << origin << " applied '" << conf << "'";
}

void LoadFromEnvironment() {
  absl::MutexLock lock(&g_mu);
  LoadFromEnvironmentLocked();
}

void EnsureLoadedFromEnvironment() {
  absl::MutexLock lock(&g_mu);
  if (!g_env_loaded) LoadFromEnvironmentLocked();
}

std::vector<char*> ParseCommandLine(int argc, char** argv) {
  EnsureLoadedFromEnvironment();
  std::vector<char*> rest = HandOverGlogFlags(argc, argv);
  std::vector<char*> positional;
  {
    // Held across the parse, so Current() never sees half a command line. Abseil exit()s from in
    // here on a bad value or --help with the lock (and one of its own) held: see tools/tsan.supp.
    absl::MutexLock lock(&g_mu);
    positional = absl::ParseCommandLine(static_cast<int>(rest.size()), rest.data());
  }
  try {
    AllocatorFlags flags = Current();
    VLOG(4) << "strata flags after the command line: " << flags.DebugString();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(absl::StrCat("command line: ", e.what()));
  }
  return positional;
}

}  // namespace strata::flags
