// Flag sources: how the allocator flags (flags.h) get their values, and how to read them.
//
// Precedence, later wins:
//   1. the defaults in flags.cc;
//   2. environment variables FLAGS_<name>=<value>, as in Paddle (only our flags' names are read);
//   3. the environment variable STRATA_ALLOC_CONF="key:value,key:value", PyTorch's
//      PYTORCH_CUDA_ALLOC_CONF syntax (alloc_conf.h); keys are our flag names, e.g.
//      "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:8]";
//   4. the embedding program's command line, --<name>=<value>, through ParseCommandLine().
// ApplyAllocConf / SetFlag (e.g. from the C ABI) may change values later; they win over all.
//
// Typical use
//   main():   strata::flags::ParseCommandLine(argc, argv);   // env + conf + command line
//   facade:   strata::flags::EnsureLoadedFromEnvironment();  // no-op if already loaded
//             strata::flags::AllocatorFlags f = strata::flags::Current();
//
// Errors: an invalid value, an unknown or unsupported key, or values breaking a constraint
// (AllocatorFlags::Validate) throw std::invalid_argument naming the source, the flag, the value
// and what is allowed; nothing is ever silently ignored. Each call is all-or-nothing: when it
// throws, every flag keeps the value it had before the call. (The command line itself is
// parsed by absl::ParseCommandLine, which reports a bad value and exits, as usual; values that
// parse but break a constraint make ParseCommandLine throw, and they stay set.)
//
// Thread safety: every function here may be called from any thread; writers and Current() share
// one lock, so Current() never sees half of an ApplyAllocConf. Writes made around this API
// (absl::SetFlag) are not covered by the lock, but Current() still validates what it reads.
// glog's own flags (--v, --vmodule, --logtostderr, ...) are gflags, not Abseil flags: on the
// command line ParseCommandLine hands them to gflags; in the environment use GLOG_<name>.
#pragma once

#include <string_view>
#include <vector>

#include "flags/allocator_flags.h"

namespace strata::flags {

inline constexpr std::string_view kEnvPrefix = "FLAGS_";
inline constexpr std::string_view kAllocConfEnv = "STRATA_ALLOC_CONF";
// The longest allocator config accepted (every flag set, with room to spare): longer ones are
// refused with std::invalid_argument before they are parsed.
inline constexpr std::size_t kMaxAllocConfBytes = 64 * 1024;

// A validated snapshot of every flag. Throws std::invalid_argument if the live values break a
// constraint (only possible when they were set around this API).
AllocatorFlags Current();

// Sets flag `name` (one of kFlagNames) from text, then validates. `origin` names the source in
// error messages (e.g. "strata_set_flags").
void SetFlag(std::string_view name, std::string_view value, std::string_view origin = "SetFlag");

// Applies a "key:value,key:value" string (AllocConf syntax). Keys are our flag names; PyTorch
// keys we do not implement (expandable_segments, backend, ...) and unknown keys are errors that
// list the supported keys. Entries apply in order (a repeated key: the later wins).
void ApplyAllocConf(std::string_view conf, std::string_view origin = "allocator config");

// Applies FLAGS_<name> for every set variable naming one of our flags, then STRATA_ALLOC_CONF,
// then validates, all in one all-or-nothing step. Every call re-reads the environment (and so
// overrides values set since); see EnsureLoadedFromEnvironment.
void LoadFromEnvironment();

// LoadFromEnvironment() until it first succeeds in this process; a no-op afterwards, so the
// facade can call it without undoing the command line or later SetFlag calls.
void EnsureLoadedFromEnvironment();

// For the embedding program's main(): EnsureLoadedFromEnvironment(), then the command line with
// absl::ParseCommandLine (so it wins), then Current() to validate the result. glog's gflags on
// the command line (--v=2, --logtostderr, --vmodule=...) are applied to gflags and removed
// first, since Abseil would reject them as unknown. Returns the positional arguments (argv[0]
// first), as absl::ParseCommandLine does. Throws std::invalid_argument as described above.
std::vector<char*> ParseCommandLine(int argc, char** argv);

}  // namespace strata::flags
