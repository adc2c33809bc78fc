// Asymmetric memory barriers: a Dekker-style handshake between a hot side that runs often and
// must stay cheap, and a cold side that runs rarely and may pay a system call.
//
//   hot side:  write A; LightFence(); read B
//   cold side: write B; HeavyFence(); read A
//
// Either the hot side reads the cold side's B, or the cold side reads the hot side's A (or
// both): the pair orders as if both sides had issued a full fence, while the hot side pays only
// a compiler barrier. HeavyFence makes every running thread of this process execute a full memory
// barrier (Linux membarrier(2), private expedited), a few microseconds.
//
// Contract
// - Thread safety: every function may be called from any thread.
// - HeavyFence() may be called only when AsymmetricFenceAvailable() returned true; callers keep
//   a symmetric path (a read-modify-write on the hot side) for when it is not: kernels before
//   4.14, seccomp filters refusing the call.
// - HeavyFence() returns false when the kernel refused it after all (it logs a warning once):
//   nothing was ordered, and the caller must not rely on the handshake.
// - Never throws.
#pragma once

#include <atomic>

namespace strata::platform {

// Whether HeavyFence works here. The first call registers the process with the kernel; later
// calls return the cached answer.
bool AsymmetricFenceAvailable();

// The cold side's full barrier on every thread of the process; false: none happened.
[[nodiscard]] bool HeavyFence();

// The hot side's barrier: orders the compiler only; HeavyFence supplies the processor's.
inline void LightFence() { std::atomic_signal_fence(std::memory_order_seq_cst); }

}  // namespace strata::platform
