// strata-demo: exercises an allocator chain on the emulated device (no GPU needed) and prints
// what each step did.
#include <cstdio>
#include <vector>

#include "allocation/byte_format.h"
#include "allocation/device_allocator.h"
#include "platform/emulated_runtime.h"

using strata::allocation::AllocationPtr;
using strata::allocation::FormatBytes;

int main() {
  strata::platform::EmulatedRuntime runtime({.device_count = 1, .capacity_bytes = 1ull << 30});
  strata::allocation::DeviceAllocator device(&runtime, 0);
  std::vector<AllocationPtr> live;
  for (std::size_t size : {1000u, 3u << 20, 100u << 20}) {
    live.push_back(device.Allocate(size));
    std::printf("allocated %-12s at %p  reserved %s\n", FormatBytes(size).c_str(),
                live.back()->ptr(), FormatBytes(device.reserved_bytes()).c_str());
  }
  try {
    device.Allocate(2ull << 30);
  } catch (const std::bad_alloc& e) {
    std::printf("as expected: %s\n", e.what());
  }
  live.clear();
  std::printf("freed all: device mallocs %lld, frees %lld, reserved %s\n",
              static_cast<long long>(device.device_mallocs()),
              static_cast<long long>(device.device_frees()),
              FormatBytes(device.reserved_bytes()).c_str());
  return 0;
}
