// EmulatedRuntime, virtual memory: address reservations, physical allocations, and mapping one
// onto the other, with host mappings standing in for the device's (the contract's "Virtual
// memory" in emulated_runtime.h). Separate from Malloc (emulated_runtime.cc) because it keeps
// state of its own under its own lock (reservations_, physical_); the one thing it shares with
// Malloc is the device's capacity, which it takes and gives back through ChargeCapacity and
// RefundCapacity.
#include "platform/emulated_runtime.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"

namespace strata::platform {

void EmulatedRuntime::CheckGranular(const char* call, const char* what, std::size_t value,
                                    bool nonzero) const {
  if ((nonzero && value == 0) || value % options_.granularity != 0) {
    throw RuntimeError(absl::StrCat("strata emulated runtime: ", call, ": ", what, " ", value,
                                    " is not a ", nonzero ? "non-zero " : "",
                                    "multiple of the granularity ", options_.granularity));
  }
}

std::size_t EmulatedRuntime::VmmGranularity(int device) {
  CheckDevice(device);
  return options_.granularity;
}

void* EmulatedRuntime::ReserveAddress(int device, std::size_t size) {
  CheckDevice(device);
  CheckGranular("ReserveAddress", "size", size, /*nonzero=*/true);
  const std::size_t g = options_.granularity;
  if (size > SIZE_MAX - g) {
    throw RuntimeError(absl::StrCat("strata emulated runtime: ReserveAddress(", size,
                                    ") on device ", device, ": size too large"));
  }
  // One granule more than asked, trimmed to a g-aligned range of `size` bytes.
  void* raw =
      mmap(nullptr, size + g, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {
    const int err = errno;
    throw RuntimeError(absl::StrCat("strata emulated runtime: ReserveAddress(", size,
                                    ") on device ", device, ": mmap failed: ", std::strerror(err)));
  }
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t base = (start + g - 1) & ~(std::uintptr_t{g} - 1);
  if (base > start) munmap(raw, base - start);
  const std::uintptr_t end = start + size + g;
  if (end > base + size) munmap(reinterpret_cast<void*>(base + size), end - (base + size));
  absl::MutexLock lock(&vmm_mu_);
  reservations_.emplace(base, Reservation{.size = size, .device = device, .mappings = {}});
  return reinterpret_cast<void*>(base);
}

void EmulatedRuntime::FreeAddress(void* ptr, std::size_t size) {
  {
    absl::MutexLock lock(&vmm_mu_);
    auto it = reservations_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == reservations_.end() || it->second.size != size) {
      throw RuntimeError(absl::StrFormat(
          "strata emulated runtime: FreeAddress(%p, %d): not a reserved range (a reservation is "
          "freed whole, with the pointer and size ReserveAddress gave)",
          ptr, size));
    }
    if (!it->second.mappings.empty()) {
      throw RuntimeError(
          absl::StrFormat("strata emulated runtime: FreeAddress(%p, %d): %d range(s) still mapped",
                          ptr, size, it->second.mappings.size()));
    }
    reservations_.erase(it);
  }
  // The range stays mapped (inaccessible) until here, so no other reservation can get it first.
  munmap(ptr, size);
}

PhysicalMemory EmulatedRuntime::CreatePhysical(int device, std::size_t size) {
  CheckDevice(device);
  CheckGranular("CreatePhysical", "size", size, /*nonzero=*/true);
  if (!ChargeCapacity(device, size)) return PhysicalMemory{};
  absl::MutexLock lock(&vmm_mu_);
  // The next range of the runtime's memory file; its pages exist once touched.
  if (memory_fd_ < 0) memory_fd_ = memfd_create("strata-emulated-device", MFD_CLOEXEC);
  if (memory_fd_ < 0 || size > UINT64_MAX / 2 - memory_fd_size_ ||
      ftruncate(memory_fd_, static_cast<off_t>(memory_fd_size_ + size)) != 0) {
    RefundCapacity(device, size);
    return PhysicalMemory{};
  }
  const std::uint64_t handle = next_physical_++;
  physical_.emplace(handle,
                    PhysicalState{.device = device, .size = size, .file_offset = memory_fd_size_});
  memory_fd_size_ += size;
  return PhysicalMemory{handle};
}

void EmulatedRuntime::MaybeDropPhysicalLocked(std::uint64_t handle) {
  auto it = physical_.find(handle);
  if (it == physical_.end() || !it->second.released || it->second.mappings > 0) return;
  // The pages go back to the host; the file keeps its length (the range is not reused).
  (void)fallocate(memory_fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  static_cast<off_t>(it->second.file_offset), static_cast<off_t>(it->second.size));
  RefundCapacity(it->second.device, it->second.size);
  physical_.erase(it);
}

void EmulatedRuntime::ReleasePhysical(PhysicalMemory mem) {
  absl::MutexLock lock(&vmm_mu_);
  auto it = physical_.find(mem.handle);
  if (it == physical_.end() || it->second.released) {
    throw RuntimeError(absl::StrCat("strata emulated runtime: ReleasePhysical(handle ", mem.handle,
                                    "): unknown physical handle"));
  }
  // Pages still mapped somewhere stay alive until their last mapping is gone.
  it->second.released = true;
  MaybeDropPhysicalLocked(mem.handle);
}

void EmulatedRuntime::Map(void* ptr, std::size_t size, PhysicalMemory mem, std::size_t offset,
                          int device) {
  CheckDevice(device);
  CheckGranular("Map", "size", size, /*nonzero=*/true);
  CheckGranular("Map", "offset", offset, /*nonzero=*/false);
  if (offset != 0) {
    throw RuntimeError(absl::StrFormat(
        "strata emulated runtime: Map(%p, %d, handle %d, offset %d): the offset must be 0, as on "
        "CUDA",
        ptr, size, mem.handle, offset));
  }
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  auto fail = [&](const std::string& why) {
    return RuntimeError(
        absl::StrFormat("strata emulated runtime: Map(%p, %d, handle %d, offset %d, device %d): %s",
                        ptr, size, mem.handle, offset, device, why));
  };
  if (addr % options_.granularity != 0) {
    throw fail(
        absl::StrCat("the address is not a multiple of the granularity ", options_.granularity));
  }
  absl::MutexLock lock(&vmm_mu_);
  auto pit = physical_.find(mem.handle);
  if (pit == physical_.end() || pit->second.released) throw fail("unknown physical handle");
  PhysicalState& p = pit->second;
  if (p.device != device) {
    throw fail(absl::StrCat("the memory belongs to device ", p.device,
                            " (peer mappings are not emulated)"));
  }
  if (size != p.size) {
    throw fail(absl::StrCat("the physical allocation has ", p.size,
                            " bytes: a map covers a whole physical allocation, as on CUDA"));
  }
  auto rit = reservations_.upper_bound(addr);
  if (rit == reservations_.begin()) throw fail("not inside a reserved range");
  --rit;
  Reservation& r = rit->second;
  if (addr - rit->first > r.size || size > r.size - (addr - rit->first)) {
    throw fail("not inside a reserved range");
  }
  auto next = r.mappings.upper_bound(addr);
  if (next != r.mappings.end() && next->first < addr + size) {
    throw fail(absl::StrFormat("overlaps the mapped range [%#x, %#x)", next->first,
                               next->first + next->second.size));
  }
  if (next != r.mappings.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > addr) {
      throw fail(absl::StrFormat("overlaps the mapped range [%#x, %#x)", prev->first,
                                 prev->first + prev->second.size));
    }
  }
  // The handle's range of the memory file, replacing the inaccessible reservation there.
  void* got = mmap(ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, memory_fd_,
                   static_cast<off_t>(p.file_offset + offset));
  if (got == MAP_FAILED) {
    const int err = errno;
    throw fail(absl::StrCat("mmap failed: ", std::strerror(err)));
  }
  r.mappings.emplace(addr, Mapping{.size = size, .physical = mem.handle, .offset = offset});
  ++p.mappings;
}

void EmulatedRuntime::Unmap(void* ptr, std::size_t size) {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  absl::MutexLock lock(&vmm_mu_);
  auto not_mapped = [&] {
    return RuntimeError(absl::StrFormat(
        "strata emulated runtime: Unmap(%p, %d): not a mapped range (Unmap takes the pointer "
        "and size of one Map)",
        ptr, size));
  };
  auto rit = reservations_.upper_bound(addr);
  if (rit == reservations_.begin()) throw not_mapped();
  std::map<std::uintptr_t, Mapping>& mappings = std::prev(rit)->second.mappings;
  auto mit = mappings.find(addr);
  if (mit == mappings.end() || mit->second.size != size) throw not_mapped();
  void* got =
      mmap(ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (got == MAP_FAILED) {
    const int err = errno;
    throw RuntimeError(absl::StrFormat("strata emulated runtime: Unmap(%p, %d): mmap failed: %s",
                                       ptr, size, std::strerror(err)));
  }
  const std::uint64_t handle = mit->second.physical;
  mappings.erase(mit);
  --physical_[handle].mappings;
  MaybeDropPhysicalLocked(handle);
}

std::size_t EmulatedRuntime::live_physical() {
  absl::MutexLock lock(&vmm_mu_);
  return physical_.size();
}

std::size_t EmulatedRuntime::mapped_ranges() {
  absl::MutexLock lock(&vmm_mu_);
  std::size_t n = 0;
  for (const auto& [base, r] : reservations_) n += r.mappings.size();
  return n;
}

}  // namespace strata::platform
