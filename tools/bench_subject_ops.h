// The subjects' operations, one adapter type per kind of subject, so that one template drives
// every subject in a benchmark family: a strata facade (FacadeOps) and the peers, PyTorch's
// caching allocator (TorchOps) and cudaMallocAsync (CUDAAsyncOps). Each offers
//   Handle Alloc(bytes, stream); void Free(Handle&, owner); void FreeUsedOn(Handle&, owner, used);
//   void Release(); void ResetPeak(); uint64 PeakReserved().
// RegisterPeerBenchmarks registers a family's benchmark for each peer loaded.
//
// Thread safety: as the allocator behind the adapter (the facade and the peers are thread-safe).
// The peer adapters need env's peer loaded (tools/bench_env.h).
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocation/allocation.h"
#include "facade/allocator_facade.h"
#include "flags/allocator_flags.h"
#include "platform/stream.h"
#include "tools/bench_common.h"
#include "tools/bench_env.h"
#include "tools/cuda_malloc_async_peer.h"
#include "tools/peer_library.h"

namespace strata::tools::bench {

class FacadeOps {
 public:
  using Handle = allocation::AllocationPtr;
  explicit FacadeOps(const flags::AllocatorFlags& flags) : facade_(env->runtime, flags) {}

  Handle Alloc(std::size_t bytes, platform::Stream s) {
    return s.is_default() ? facade_.Alloc(kPlace, bytes) : facade_.Alloc(kPlace, bytes, s);
  }
  void Free(Handle& h, platform::Stream) { h.reset(); }
  void FreeUsedOn(Handle& h, platform::Stream owner, platform::Stream used_on) {
    // Strategies without the stream-safe layer share one pool across streams: a replay of
    // their memory behaviour has nothing to record.
    if (used_on != owner && facade_.HonoursRecordStream(kPlace)) facade_.RecordStream(*h, used_on);
    h.reset();
  }
  void Release() { facade_.Release(kPlace); }
  void ResetPeak() { facade_.ResetPeakStats(kPlace); }
  std::uint64_t PeakReserved() {
    const auto s = facade_.GetMemoryStats(kPlace);
    return static_cast<std::uint64_t>(s.reserved_bytes[allocation::kAggregate].peak);
  }
  strata::facade::AllocatorFacade& facade() { return facade_; }

 private:
  strata::facade::AllocatorFacade facade_;
};

// What the two peers' adapters share: allocation on a stream (a null handle for 0 bytes, no
// call), releasing the cache and the peak. They differ in how a block is freed.
template <typename Peer>
class PeerOps {
 public:
  using Handle = void*;

  Handle Alloc(std::size_t bytes, platform::Stream s) {
    return bytes == 0 ? nullptr : peer_.Alloc(bytes, s.handle);
  }
  void Release() { peer_.Release(); }
  void ResetPeak() { peer_.ResetPeak(); }
  std::uint64_t PeakReserved() { return peer_.PeakReserved(); }

 protected:
  explicit PeerOps(Peer& peer) : peer_(peer) {}
  Peer& peer() { return peer_; }

 private:
  Peer& peer_;
};

class TorchOps : public PeerOps<PeerLibrary> {
 public:
  TorchOps() : PeerOps(*env->torch) {}

  void Free(Handle& h, platform::Stream) {
    if (h != nullptr) peer().Free(h);
    h = nullptr;
  }
  void FreeUsedOn(Handle& h, platform::Stream owner, platform::Stream used_on) {
    if (h != nullptr && used_on != owner) peer().RecordStream(h, used_on.handle);
    Free(h, owner);
  }
};

// cudaMallocAsync frees on a stream: the owner's, or after the user's work where another
// stream used the block.
class CUDAAsyncOps : public PeerOps<CUDAMallocAsyncPeer> {
 public:
  CUDAAsyncOps() : PeerOps(*env->cuda_async) {}

  void Free(Handle& h, platform::Stream owner) {
    if (h != nullptr) peer().Free(h, owner.handle);
    h = nullptr;
  }
  void FreeUsedOn(Handle& h, platform::Stream owner, platform::Stream used_on) {
    if (h != nullptr && used_on != owner) {
      peer().FreeUsedOn(h, owner.handle, used_on.handle);
      h = nullptr;
      return;
    }
    Free(h, owner);
  }
};

// Registers the benchmark "<family>/<peer>/<suffix>" for each peer loaded (the torch peer only
// where `torch`), running `run(state, std::type_identity<Ops>())` with that peer's adapter type.
// Returns the benchmarks registered, in that order.
template <typename Run>
std::vector<benchmark::internal::Benchmark*> RegisterPeerBenchmarks(const std::string& family,
                                                                    const std::string& suffix,
                                                                    bool torch, Run run) {
  std::vector<benchmark::internal::Benchmark*> registered;
  if (torch && env->torch) {
    registered.push_back(benchmark::RegisterBenchmark(
        absl::StrCat(family, "/", env->torch_name, "/", suffix).c_str(),
        [run](benchmark::State& s) { run(s, std::type_identity<TorchOps>()); }));
  }
  if (env->cuda_async) {
    registered.push_back(benchmark::RegisterBenchmark(
        absl::StrCat(family, "/cuda_malloc_async/", suffix).c_str(),
        [run](benchmark::State& s) { run(s, std::type_identity<CUDAAsyncOps>()); }));
  }
  return registered;
}

}  // namespace strata::tools::bench
