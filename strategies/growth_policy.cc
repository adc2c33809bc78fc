#include "strategies/growth_policy.h"

#include <algorithm>

namespace strata::strategies {

namespace {

constexpr std::size_t RoundUp(std::size_t x, std::size_t a) { return (x + a - 1) & ~(a - 1); }
constexpr std::size_t RoundDown(std::size_t x, std::size_t a) { return x & ~(a - 1); }

}  // namespace

std::size_t GrowthBytes(const AutoGrowthOptions& o, bool small_pool, std::size_t size) {
  const std::size_t gran = o.growth_granularity;
  const std::size_t minimal = RoundUp(size, gran);
  if (small_pool) return std::max(o.small_chunk_size, minimal);
  const std::size_t max_split = o.max_split_size;
  if (max_split != 0 && size >= max_split) return minimal;
  std::size_t grow = std::max(minimal, RoundUp(o.chunk_size, gran));
  if (max_split != 0 && grow >= max_split) grow = std::max(minimal, RoundDown(max_split - 1, gran));
  return grow;
}

std::size_t MinimalGrowthBytes(const AutoGrowthOptions& o, std::size_t size) {
  return RoundUp(size, o.growth_granularity);
}

// Releasing only lowers `reserved`, so a rule that does not fire before any release never does.
bool MayReleaseIdle(const AutoGrowthOptions& o, const GrowthRequest& r) {
  if (o.free_when_no_cache_hit) return true;
  const std::size_t after = r.reserved + GrowthBytes(o, r.small_pool, r.size);
  const std::size_t gc_target = GcTargetBytes(o);
  return (o.release_idle_before_new_peak && after > r.high_water) ||
         (gc_target != 0 && r.others + after > gc_target) ||
         (o.memory_limit != 0 && after > o.memory_limit);
}

GrowthPlan PlanGrowth(const AutoGrowthOptions& o, const GrowthRequest& r,
                      std::span<const std::size_t> idle_sizes) {
  GrowthPlan plan;
  std::size_t reserved = r.reserved;
  // Releases idle chunks while reserved + extra > target; returns the bytes released.
  auto release_until = [&](std::size_t target, std::size_t extra) {
    std::size_t freed = 0;
    while (plan.release_idle < idle_sizes.size() && reserved + extra > target) {
      const std::size_t bytes = idle_sizes[plan.release_idle++];
      reserved -= bytes;
      freed += bytes;
    }
    return freed;
  };
  auto release_all = [&] { release_until(0, 1); };

  if (o.free_when_no_cache_hit) release_all();
  plan.grow = GrowthBytes(o, r.small_pool, r.size);
  if (o.release_idle_before_new_peak && reserved + plan.grow > r.high_water) {
    release_until(r.high_water, plan.grow);
  }
  const std::size_t gc_target = GcTargetBytes(o);
  if (gc_target != 0 && r.others + reserved + plan.grow > gc_target) {
    // The target is the device's: what the other pools hold counts against it.
    const std::size_t own_target = gc_target > r.others ? gc_target - r.others : 0;
    plan.gc_bytes = release_until(own_target, plan.grow);
    plan.collect_elsewhere = r.others + reserved + plan.grow > gc_target && r.others > 0;
  }
  const std::size_t limit = o.memory_limit;
  if (limit != 0 && reserved + plan.grow > limit) {
    plan.grow = MinimalGrowthBytes(o, r.size);
    if (reserved + plan.grow > limit) release_all();
    plan.over_limit = reserved + plan.grow > limit;
  }
  return plan;
}

}  // namespace strata::strategies
