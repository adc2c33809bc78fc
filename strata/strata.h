// strata: the public API, one header.
//
//   #include <strata/strata.h>
//   strata::flags::ParseCommandLine(argc, argv);          // optional: --<flag>=<value>
//   auto buf = strata::Alloc(strata::CUDAPlace(0), n, stream);
//   strata::RecordStream(*buf, other_stream);             // used on another stream too
//   buf.reset();                                          // freed when that work is done
//   std::cout << strata::MemorySummary(strata::CUDAPlace(0));
//
// Every call goes to the process-wide AllocatorFacade (facade/allocator_facade.h), built on first
// use from the flags (flags/flags.h: defaults < FLAGS_<name> environment < STRATA_ALLOC_CONF <
// command line). See that header for the chains, thread safety and errors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "allocation/allocation.h"
#include "allocation/bad_alloc.h"
#include "allocation/memory_stats.h"
#include "facade/allocator_facade.h"
#include "facade/cache_scope.h"
#include "flags/flag_sources.h"
#include "platform/place.h"
#include "platform/stream.h"

namespace strata {

using allocation::AllocationPtr;
using allocation::BadAlloc;
using allocation::MemoryStats;
using allocation::SharedAllocation;
using facade::AllocatorFacade;
using facade::CacheScope;
using platform::CPUPlace;
using platform::CUDAPinnedPlace;
using platform::CUDAPlace;
using platform::Place;
using platform::Stream;

inline AllocationPtr Alloc(const Place& place, std::size_t size) {
  return AllocatorFacade::Instance().Alloc(place, size);
}
inline AllocationPtr Alloc(const Place& place, std::size_t size, Stream stream) {
  return AllocatorFacade::Instance().Alloc(place, size, stream);
}
inline SharedAllocation AllocShared(const Place& place, std::size_t size) {
  return AllocatorFacade::Instance().AllocShared(place, size);
}
inline SharedAllocation AllocShared(const Place& place, std::size_t size, Stream stream) {
  return AllocatorFacade::Instance().AllocShared(place, size, stream);
}
inline std::uint64_t Release(const Place& place) {
  return AllocatorFacade::Instance().Release(place);
}
inline std::uint64_t Release(const Place& place, Stream stream) {
  return AllocatorFacade::Instance().Release(place, stream);
}
inline bool RecordStream(const allocation::Allocation& allocation, Stream stream) {
  return AllocatorFacade::Instance().RecordStream(allocation, stream);
}
// Before destroying `stream` (see AllocatorFacade::EndStream).
inline void EndStream(const Place& place, Stream stream) {
  AllocatorFacade::Instance().EndStream(place, stream);
}
inline Stream GetStream(const allocation::Allocation& allocation) {
  return AllocatorFacade::Instance().GetStream(allocation);
}
inline bool InSameStream(const allocation::Allocation& allocation, Stream stream) {
  return AllocatorFacade::Instance().InSameStream(allocation, stream);
}
inline void SetDefaultStream(const Place& place, Stream stream) {
  AllocatorFacade::Instance().SetDefaultStream(place, stream);
}
inline std::uint64_t EmptyCache(const Place& place) {
  return AllocatorFacade::Instance().EmptyCache(place);
}
inline MemoryStats GetMemoryStats(const Place& place) {
  return AllocatorFacade::Instance().GetMemoryStats(place);
}
inline std::string MemorySummary(const Place& place, bool abbreviated = false) {
  return AllocatorFacade::Instance().MemorySummary(place, abbreviated);
}
inline std::string MemoryStatsJson(const Place& place) {
  return AllocatorFacade::Instance().MemoryStatsJson(place);
}
inline std::uint64_t InvalidateCache(const Place& place, std::string_view name) {
  return AllocatorFacade::Instance().InvalidateCache(place, name);
}

}  // namespace strata
