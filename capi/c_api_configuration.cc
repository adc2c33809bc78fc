// The C ABI's configuration family (strata/c_api.h, "configuration" and "emulated device"):
// flags, the last error, and the runtime (the emulated device and its streams, for tests without
// a GPU). Reconfiguration rules: capi/library_state.h.
#include <cstddef>
#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"
#include "capi/guard.h"
#include "capi/library_state.h"
#include "flags/flag_sources.h"
#include "glog/logging.h"
#include "platform/emulated_runtime.h"
#include "platform/stream.h"
#include "strata/c_api.h"

using strata::capi::Guard;
using strata::capi::Library;
using strata::capi::PointerText;
using strata::platform::Stream;

extern "C" {

int strata_set_flags(const char* config) {
  return Guard(
      [&] {
        if (config == nullptr) throw std::invalid_argument("config is NULL");
        // The flag layer names the origin in its messages ("strata_set_flags config: unknown key").
        Library().Reconfigure("strata_set_flags", [&] {
          // The origin names the call, not the config: each entry's message quotes its entry,
          // and quoting the whole config in each would make a long one quadratic.
          strata::flags::ApplyAllocConf(config, "strata_set_flags config");
        });
        VLOG(4) << "strata_set_flags('" << config << "') applied";
        return STRATA_OK;
      },
      [&] { return std::string("strata_set_flags"); },
      /*log=*/false);
}

const char* strata_last_error(void) { return strata::capi::LastError(); }

int strata_use_emulated_device(int device_count, size_t capacity_bytes) {
  return Guard(
      [&] {
        if (device_count < 0) {
          throw std::invalid_argument(absl::StrCat("negative device_count ", device_count));
        }
        if (device_count > 0 && capacity_bytes == 0) {
          throw std::invalid_argument("capacity_bytes must be > 0");
        }
        // Checked before anything is reconfigured (the runtime checks them again).
        using strata::platform::EmulatedRuntime;
        if (device_count > EmulatedRuntime::kMaxDevices) {
          throw std::invalid_argument(
              absl::StrCat("device_count must be at most ", EmulatedRuntime::kMaxDevices));
        }
        if (capacity_bytes > EmulatedRuntime::kMaxCapacityBytes) {
          throw std::invalid_argument(absl::StrCat(
              "capacity_bytes must be at most ", EmulatedRuntime::kMaxCapacityBytes, " (16 TiB)"));
        }
        Library().UseEmulatedDevice(device_count, capacity_bytes);
        return STRATA_OK;
      },
      [&] {
        return absl::StrCat("strata_use_emulated_device(device_count=", device_count,
                            ", capacity_bytes=", capacity_bytes, ")");
      },
      /*log=*/false);
}

int strata_emulated_stream_create(int device, void** stream) {
  return Guard(
      [&] {
        if (stream == nullptr) throw std::invalid_argument("stream is NULL");
        *stream = Library().Emulated().CreateStream(device).handle;
        return STRATA_OK;
      },
      [&] { return absl::StrCat("strata_emulated_stream_create(device=", device, ")"); },
      /*log=*/false);
}

int strata_emulated_stream_destroy(void* stream) {
  return Guard(
      [&] {
        if (stream == nullptr)
          throw std::invalid_argument("the default stream cannot be destroyed");
        Library().Resume(Stream{stream}, /*synchronize=*/false);
        Library().Emulated().DestroyStream(Stream{stream});
        return STRATA_OK;
      },
      [&] { return absl::StrCat("strata_emulated_stream_destroy(", PointerText(stream), ")"); },
      /*log=*/false);
}

int strata_emulated_stream_pause(void* stream) {
  return Guard(
      [&] {
        Library().Pause(Stream{stream});
        return STRATA_OK;
      },
      [&] { return absl::StrCat("strata_emulated_stream_pause(", PointerText(stream), ")"); },
      /*log=*/false);
}

int strata_emulated_stream_resume(void* stream) {
  return Guard(
      [&] {
        Library().Resume(Stream{stream}, /*synchronize=*/true);
        return STRATA_OK;
      },
      [&] { return absl::StrCat("strata_emulated_stream_resume(", PointerText(stream), ")"); },
      /*log=*/false);
}

}  // extern "C"
