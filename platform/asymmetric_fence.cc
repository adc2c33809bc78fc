#include "platform/asymmetric_fence.h"

#include <atomic>

#include "glog/logging.h"

#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace strata::platform {
namespace {

#if defined(__linux__) && defined(__NR_membarrier)
long Membarrier(int cmd) { return syscall(__NR_membarrier, cmd, 0, 0); }

bool Register() {
  const long supported = Membarrier(MEMBARRIER_CMD_QUERY);
  if (supported < 0 || (supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0 ||
      (supported & MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0) {
    VLOG(4) << "asymmetric fence: membarrier private expedited not available";
    return false;
  }
  if (Membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0) {
    VLOG(4) << "asymmetric fence: membarrier registration refused";
    return false;
  }
  VLOG(4) << "asymmetric fence: membarrier private expedited";
  return true;
}
#else
bool Register() { return false; }
#endif

}  // namespace

bool AsymmetricFenceAvailable() {
  static const bool available = Register();
  return available;
}

bool HeavyFence() {
#if defined(__linux__) && defined(__NR_membarrier)
  if (Membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return true;
  // Registration is per address space: a process forked from a registered one may need its own.
  if (Membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
      Membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) {
    return true;
  }
  LOG_FIRST_N(WARNING, 1) << "membarrier failed after registration; threads' caches are left "
                             "to their own threads";
#endif
  return false;
}

}  // namespace strata::platform
