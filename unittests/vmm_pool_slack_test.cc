// The virtual-memory pool's adaptive stitching slack: a workload that keeps remapping pages at a
// steady live peak earns slack until it stops; one that does not remap keeps the first slack.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "allocation/memory_stats.h"
#include "platform/emulated_runtime.h"
#include "platform/stream.h"
#include "strategies/vmm_pool.h"
#include "support/vmm_pool_fixture.h"

namespace strata::strategies {
namespace {

using allocation::Allocation;
using platform::Stream;
using vmm_test::kMiB;
using vmm_test::kPlace;
using vmm_test::PageOptions;
using vmm_test::Stats;
using vmm_test::VirtualMemoryPoolTest;

struct Calls {
  std::int64_t maps = 0, unmaps = 0, creates = 0;
};
Calls CallsOf(const VirtualMemoryPool& pool) {
  const allocation::MemoryStats s = Stats(pool);
  return {s.num_device_map, s.num_device_unmap, s.num_device_alloc};
}

// A decoder's KV cache grown by concatenation, for `prompts` prompts a step: `caches` tensors,
// each replaced every token by one a little larger (the new one is allocated before the old one
// goes), from `first` to `last` bytes; all of them freed at the end of the step. The same step
// repeats exactly, yet with a tight slack the new tensors land where other tensors' pages went:
// pages move every step.
struct Decode {
  int caches;
  std::size_t first, last, grow;
  int prompts = 1;
};
void DecodeStep(VirtualMemoryPool* pool, const Decode& d) {
  std::vector<Allocation*> kv(static_cast<std::size_t>(d.caches), nullptr);
  for (int prompt = 0; prompt < d.prompts; ++prompt) {
    for (std::size_t size = d.first; size <= d.last; size += d.grow) {
      for (Allocation*& t : kv) {
        Allocation* bigger = pool->Allocate(size, Stream{});
        if (t != nullptr) pool->Free(t);
        t = bigger;
      }
    }
  }
  for (Allocation* t : kv) pool->Free(t);
}

// Runs `steps` steps of DecodeStep; `steps_until_quiet` is the first that made no device call
// (-1: none). Returns the calls of the last step run.
Calls RunDecodeSteps(VirtualMemoryPool* pool, const Decode& d, int steps, int* steps_until_quiet) {
  *steps_until_quiet = -1;
  Calls last;
  for (int i = 0; i < steps; ++i) {
    const Calls before = CallsOf(*pool);
    DecodeStep(pool, d);
    const Calls after = CallsOf(*pool);
    last = {after.maps - before.maps, after.unmaps - before.unmaps, after.creates - before.creates};
    if (last.maps == 0 && last.unmaps == 0 && last.creates == 0 && *steps_until_quiet < 0) {
      *steps_until_quiet = i;
    }
  }
  return last;
}

class VmmPoolSlackTest : public VirtualMemoryPoolTest {
 protected:
  // Steps of tensors of 6-19 MiB.
  Calls RunSteps(int steps, int* steps_until_quiet) {
    return RunDecodeSteps(pool_.get(), {8, 6 * kMiB, 19 * kMiB, 256 * 1024}, steps,
                          steps_until_quiet);
  }
};

TEST_F(VmmPoolSlackTest, AStepThatKeepsRemappingEarnsSlackUntilItStops) {
  // Without adaptation (the ceiling at the first slack) the repeating step remaps every time.
  VirtualMemoryPool::Options fixed = PageOptions();
  fixed.max_stitch_slack_permille = fixed.stitch_slack_permille;
  MakePool(fixed);
  int quiet = 0;
  const Calls fixed_last = RunSteps(12, &quiet);
  EXPECT_GT(fixed_last.maps + fixed_last.unmaps, 0) << "the pattern remaps under a fixed slack";
  const std::size_t fixed_reserved = pool_->reserved_bytes();

  MakePool(PageOptions());
  const Calls adaptive_last = RunSteps(12, &quiet);
  EXPECT_EQ(adaptive_last.maps, 0);
  EXPECT_EQ(adaptive_last.unmaps, 0);
  EXPECT_EQ(adaptive_last.creates, 0);
  EXPECT_GE(quiet, 1) << "the first step grows the pool";
  // The memory it earned stays well below the ceiling: at most the live peak (8 tensors of 19 MiB,
  // plus the one allocated before the old one goes, each on whole pages) times 1 + 12.5 %, plus
  // two pages.
  const std::size_t g = pool_->page_bytes();
  const std::size_t pages_per_tensor = (19 * kMiB + 2 * g - 1) / g + 1;  // may straddle a page
  const std::size_t live_peak = 9 * pages_per_tensor * g;
  EXPECT_LE(pool_->reserved_bytes(), live_peak + live_peak / 1000 * 125 + 2 * g);
  EXPECT_GE(pool_->reserved_bytes(), fixed_reserved) << "slack is memory";
}

TEST_F(VmmPoolSlackTest, CachesGrownFromOneRowAtALargeBatchSettle) {
  // Eight KV caches of a large batch, each grown from one row to 256 rows of 256 KiB (64 MiB), for
  // four prompts a step: each token's tensors outgrow the holes the last ones left. Such a step
  // settles at about 300 permille of slack: under a ceiling of 250 it remapped 328 pages a step
  // for good. A device of 2 GiB (the fixture's 256 MiB is too small; emulated pages take no host
  // memory until touched).
  platform::EmulatedRuntime device(vmm_test::Small(2048 * kMiB));
  VirtualMemoryPool pool(&device, kPlace, PageOptions());
  constexpr std::size_t kRow = 256 * 1024;
  constexpr int kCaches = 8, kRows = 256;
  int quiet = 0;
  const Calls last =
      RunDecodeSteps(&pool, {kCaches, kRow, kRows * kRow, kRow, /*prompts=*/4}, 16, &quiet);
  EXPECT_EQ(last.maps + last.unmaps + last.creates, 0) << "still remapping after 16 steps";
  EXPECT_GE(quiet, 1);
  // Within the ceiling: the live peak (nine tensors of up to 64 MiB, each on whole pages, one
  // more where it straddles a page) times 1 + 35 %, plus two pages.
  const VirtualMemoryPool::Options defaults;
  const std::size_t g = pool.page_bytes();
  const std::size_t live_peak = (kCaches + 1) * (kRows * kRow / g + 1) * g;
  EXPECT_LE(pool.reserved_bytes(),
            live_peak + live_peak / 1000 * defaults.max_stitch_slack_permille + 2 * g);
}

TEST_F(VmmPoolSlackTest, AStepThatDoesNotRemapKeepsTheFirstSlack) {
  // The same tensor sizes every token: every new tensor fits where an old one was.
  MakePool(PageOptions());
  std::vector<Allocation*> kv(8, nullptr);
  for (int token = 0; token < 64; ++token) {
    for (Allocation*& t : kv) {
      Allocation* next = pool_->Allocate(8 * kMiB, Stream{});
      if (t != nullptr) pool_->Free(t);
      t = next;
    }
  }
  // Nine tensors of four pages live at most: no more physical memory than that.
  EXPECT_EQ(pool_->reserved_bytes(), 9 * 8 * kMiB);
  for (Allocation* t : kv) pool_->Free(t);
}

TEST_F(VmmPoolSlackTest, RefusesAZeroWindow) {
  VirtualMemoryPool::Options o = PageOptions();
  o.slack_window_turnover = 0;
  EXPECT_THROW(VirtualMemoryPool(&faults_, kPlace, o), std::invalid_argument);
}

}  // namespace
}  // namespace strata::strategies
