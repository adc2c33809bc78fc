// DeviceReserved: what the pools of one device hold together, for the policies PyTorch applies
// per device while strata's default chains (auto_growth, one chain per stream) keep one pool per
// stream (garbage_collection_threshold).
//
// Each auto-growth pool of the device adds its chunks' bytes as it grows and subtracts them as it
// gives chunks back. A pool whose growth finds the device past its garbage-collection target,
// after releasing its own idle chunks, raises `collect`; the facade then releases the idle
// memory of every pool of the device (outside any pool's lock) and clears it.
//
// Thread-safe: atomics only.
#pragma once

#include <atomic>
#include <cstdint>

namespace strata::strategies {

struct DeviceReserved {
  std::atomic<std::int64_t> bytes{0};
  std::atomic<bool> collect{false};
};

}  // namespace strata::strategies
