#include "strategies/auto_growth_best_fit_allocator.h"

#include <mutex>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocation/bad_alloc.h"
#include "glog/logging.h"
#include "reporting/byte_format.h"

namespace strata::strategies {

using allocation::Allocation;
using allocation::BadAlloc;
using allocation::FormatBytes;
using allocation::StatArray;
using allocation::StatPool;

namespace {

constexpr bool IsPowerOfTwo(std::size_t x) { return x != 0 && (x & (x - 1)) == 0; }
// `a` is a power of two; callers keep x below kMaxRequestBytes + a so nothing overflows.
constexpr std::size_t RoundUp(std::size_t x, std::size_t a) { return (x + a - 1) & ~(a - 1); }
constexpr std::size_t RoundDown(std::size_t x, std::size_t a) { return x & ~(a - 1); }
inline int Log2Floor(std::size_t x) { return 63 - __builtin_clzll(x); }

// How many entries of a bucket's list one search looks at before moving on to the next bucket
// (whose blocks all fit). Bounds the search; lists are short in practice.
constexpr int kScanLimit = 32;

void Add(StatArray& stat, StatPool pool, std::int64_t delta) {
  for (StatPool p : {allocation::kAggregate, pool}) {
    if (delta >= 0) {
      stat[p].Increase(delta);
    } else {
      stat[p].Decrease(-delta);
    }
  }
}

void MergeInto(StatArray& to, const StatArray& from) {
  for (int i = 0; i < allocation::kNumStatPools; ++i) to[i].Merge(from[i]);
}

[[noreturn]] ABSL_ATTRIBUTE_NOINLINE void ThrowTooLarge(std::size_t size,
                                                        const platform::Place& place) {
  throw std::invalid_argument(absl::StrCat("strata: cannot allocate ", size, " bytes on ",
                                           place.ToString(), ": requests are limited to ",
                                           AutoGrowthBestFitAllocator::kMaxRequestBytes, " bytes"));
}

std::invalid_argument BadOption(const std::string& name, const std::string& value,
                                const std::string& allowed) {
  return std::invalid_argument(absl::StrCat("strata: AutoGrowthBestFitAllocator option ", name,
                                            " = ", value, " is invalid: ", allowed));
}

// Cold paths kept out of line so that AllocateImpl / FreeImpl stay small.
[[noreturn]] ABSL_ATTRIBUTE_NOINLINE void ThrowBadFree(const platform::Place& place, void* ptr,
                                                       bool foreign) {
  throw std::invalid_argument(
      absl::StrCat("strata: auto_growth_best_fit on ", place.ToString(), " asked to free ",
                   absl::StrFormat("%p", ptr),
                   foreign ? ", which it did not allocate" : ", which is already free"));
}

ABSL_ATTRIBUTE_NOINLINE void LogAllocate(std::size_t size, const Allocation* block) {
  VLOG(10) << "auto_growth_best_fit: allocate " << size << " -> " << block->size() << " at "
           << block->ptr();
}

ABSL_ATTRIBUTE_NOINLINE void LogFree(const Allocation* block) {
  VLOG(10) << "auto_growth_best_fit: free " << block->size() << " at " << block->ptr();
}

}  // namespace

// ---- implementation types ---------------------------------------------------------------------

class AutoGrowthBestFitAllocator::Block : public allocation::Allocation {
 public:
  static constexpr std::uint8_t kLive = 0, kFree = 1, kParked = 2;
  // A free block record covering [ptr, ptr + size) of `chunk`.
  void InitFree(char* ptr, std::size_t size, Chunk* c, const AutoGrowthBestFitAllocator* o) {
    Reset(ptr, nullptr, size, platform::Place());
    prev_addr = next_addr = prev_free = next_free = nullptr;
    chunk = c;
    owner = o;
    state = kLive;
  }
  // Turns the record into the Allocation handed out (clean decorator stack).
  void Hand(void* base, const platform::Place& place) { Reset(ptr(), base, size(), place); }
  void Resize(std::size_t size) { set_size(size); }
  void Move(char* ptr, std::size_t size) {
    set_ptr(ptr);
    set_size(size);
  }
  char* bytes() const { return static_cast<char*>(ptr()); }

  Block* prev_addr = nullptr;  // address-order neighbours within the chunk
  Block* next_addr = nullptr;
  Block* prev_free = nullptr;  // bucket list links, while free
  Block* next_free = nullptr;
  Chunk* chunk = nullptr;
  const AutoGrowthBestFitAllocator* owner = nullptr;
  // kLive: handed out (or being set up); kFree: in a bucket list; kParked: on the quick-reuse
  // stack (in no list, not coalesced).
  std::uint8_t state = kLive;
  int fl = 0, sl = 0;  // bucket, while free
};

struct AutoGrowthBestFitAllocator::Chunk {
  allocation::AllocationPtr device;
  char* base = nullptr;
  std::size_t size = 0;
  Pool* pool = nullptr;
  Block* first = nullptr;  // the block at `base`
  std::size_t live = 0;    // blocks handed out and not freed
  bool idle = false;
  bool oversize = false;
  Chunk* all_prev = nullptr;
  Chunk* all_next = nullptr;
  Chunk* idle_prev = nullptr;
  Chunk* idle_next = nullptr;
};

struct AutoGrowthBestFitAllocator::Pool {
  explicit Pool(bool s) : small(s) {}
  const bool small;
  std::uint64_t fl_bitmap = 0;
  // The last free block found Frontable for a block of front_size bytes; cleared by every change
  // to the lists or to a listed block's size (the answer depends on nothing else).
  const Block* front_next = nullptr;
  std::size_t front_size = 0;
  std::array<std::uint32_t, kFlCount> sl_bitmap{};
  std::array<std::array<Block*, kSlCount>, kFlCount> heads{};
};

namespace {

using Block = AutoGrowthBestFitAllocator::Block;
constexpr int kSlLog2 = AutoGrowthBestFitAllocator::kSlLog2;
constexpr int kSlCount = AutoGrowthBestFitAllocator::kSlCount;
constexpr int kFlCount = AutoGrowthBestFitAllocator::kFlCount;

// TLSF mapping: sizes below kSlCount map linearly to first level 0; otherwise the first level is
// the power of two and the second level the kSlLog2 bits below the leading one.
struct Bucket {
  int fl, sl;
};
ABSL_ATTRIBUTE_ALWAYS_INLINE inline Bucket MapSize(std::size_t s) {
  if (s < static_cast<std::size_t>(kSlCount)) return {0, static_cast<int>(s)};
  const int msb = Log2Floor(s);
  return {msb - kSlLog2 + 1, static_cast<int>(s >> (msb - kSlLog2)) - kSlCount};
}
// The smallest size that maps to (fl, sl).
inline std::size_t BucketLow(int fl, int sl) {
  if (fl == 0) return static_cast<std::size_t>(sl);
  return static_cast<std::size_t>(kSlCount + sl) << (fl - 1);
}

// Bucket list primitives (no flags, no statistics).
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void LinkFree(AutoGrowthBestFitAllocator::Pool& pool,
                                                  Block* block, Bucket b) {
  pool.front_next = nullptr;
  Block*& head = pool.heads[b.fl][b.sl];
  block->fl = b.fl;
  block->sl = b.sl;
  block->prev_free = nullptr;
  block->next_free = head;
  if (head != nullptr) head->prev_free = block;
  head = block;
  pool.sl_bitmap[b.fl] |= std::uint32_t{1} << b.sl;
  pool.fl_bitmap |= std::uint64_t{1} << b.fl;
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void UnlinkFree(AutoGrowthBestFitAllocator::Pool& pool,
                                                    Block* block) {
  pool.front_next = nullptr;
  if (block->prev_free != nullptr) {
    block->prev_free->next_free = block->next_free;
  } else {
    pool.heads[block->fl][block->sl] = block->next_free;
    if (block->next_free == nullptr) {
      pool.sl_bitmap[block->fl] &= ~(std::uint32_t{1} << block->sl);
      if (pool.sl_bitmap[block->fl] == 0) pool.fl_bitmap &= ~(std::uint64_t{1} << block->fl);
    }
  }
  if (block->next_free != nullptr) block->next_free->prev_free = block->prev_free;
}

// Whether a free block counts as an "inactive split": its chunk also holds other blocks. Cannot
// change while the block is free and unresized (free neighbours are always coalesced).
ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool IsSplit(const Block* block) {
  return block->prev_addr != nullptr || block->next_addr != nullptr;
}

inline bool IsUnused(const Block* block) {
  return block != nullptr && block->state != Block::kLive;
}

// The first non-empty bucket at or above (fl, sl), as fl * kSlCount + sl; INT_MAX if none.
inline int FirstNonEmpty(const AutoGrowthBestFitAllocator::Pool& pool, int fl, int sl) {
  if (sl == kSlCount) {
    sl = 0;
    if (++fl == kFlCount) return std::numeric_limits<int>::max();
  }
  std::uint32_t sl_map = pool.sl_bitmap[fl] & (~std::uint32_t{0} << sl);
  if (sl_map == 0) {
    const std::uint64_t fl_map = fl + 1 < 64 ? pool.fl_bitmap & (~std::uint64_t{0} << (fl + 1)) : 0;
    if (fl_map == 0) return std::numeric_limits<int>::max();
    fl = __builtin_ctzll(fl_map);
    sl_map = pool.sl_bitmap[fl];
  }
  return fl * kSlCount + __builtin_ctz(sl_map);
}

}  // namespace

// ---- options ----------------------------------------------------------------------------------

void AutoGrowthBestFitAllocator::ValidateOptions(const Options& o) {
  if (!IsPowerOfTwo(o.growth_granularity) || o.growth_granularity > kMaxRequestBytes) {
    throw BadOption("growth_granularity", std::to_string(o.growth_granularity),
                    "must be a power of two (default 2 MiB)");
  }
  if (!IsPowerOfTwo(o.alignment) || o.alignment > o.growth_granularity) {
    throw BadOption("alignment", std::to_string(o.alignment),
                    absl::StrCat("must be a power of two no larger than growth_granularity (",
                                 o.growth_granularity, ")"));
  }
  if (o.chunk_size > kMaxRequestBytes) {
    throw BadOption("chunk_size", std::to_string(o.chunk_size), "must be at most 2^60 bytes");
  }
  if (o.small_size > 0 &&
      (o.small_chunk_size < o.small_size || o.small_chunk_size % o.growth_granularity != 0 ||
       o.small_chunk_size > kMaxRequestBytes)) {
    throw BadOption(
        "small_chunk_size", std::to_string(o.small_chunk_size),
        absl::StrCat("must be at least small_size (", o.small_size,
                     ") and a multiple of growth_granularity (", o.growth_granularity, ")"));
  }
  if (o.max_split_size != 0 && o.max_split_size <= o.small_size) {
    throw BadOption(
        "max_split_size", std::to_string(o.max_split_size),
        absl::StrCat("must be 0 (unlimited) or larger than small_size (", o.small_size, ")"));
  }
  if (o.max_split_size > kMaxRequestBytes || o.oversize_slack > kMaxRequestBytes) {
    throw BadOption(o.max_split_size > kMaxRequestBytes ? "max_split_size" : "oversize_slack",
                    std::to_string(std::max(o.max_split_size, o.oversize_slack)),
                    "must be at most 2^60 bytes");
  }
  if (o.roundup_power2_divisions.size() > kMaxRoundupIntervals) {
    throw BadOption("roundup_power2_divisions",
                    absl::StrCat(o.roundup_power2_divisions.size(), " entries"),
                    absl::StrCat("has one entry per power-of-two interval from 1 MiB, at most ",
                                 kMaxRoundupIntervals));
  }
  for (std::size_t i = 0; i < o.roundup_power2_divisions.size(); ++i) {
    const std::size_t d = o.roundup_power2_divisions[i];
    if (d != 0 && (!IsPowerOfTwo(d) || d > 65536)) {
      throw BadOption(absl::StrCat("roundup_power2_divisions[", i, "]"), std::to_string(d),
                      "each entry must be 0 or a power of two up to 65536");
    }
  }
  const double t = o.garbage_collection_threshold;
  if (!(t >= 0.0 && t < 1.0)) {
    throw BadOption("garbage_collection_threshold", std::to_string(t),
                    "must be 0 (off) or in (0, 1)");
  }
  if (t > 0.0 && o.memory_limit == 0) {
    throw BadOption("garbage_collection_threshold", std::to_string(t),
                    "needs memory_limit > 0 (the threshold is a fraction of it)");
  }
}

// ---- construction -----------------------------------------------------------------------------

AutoGrowthBestFitAllocator::AutoGrowthBestFitAllocator(
    std::shared_ptr<allocation::Allocator> underlying, const platform::Place& place,
    Options options)
    : underlying_(std::move(underlying)),
      place_(place),
      options_((ValidateOptions(options), std::move(options))),
      gc_target_bytes_(options_.garbage_collection_threshold > 0.0
                           ? static_cast<std::size_t>(options_.garbage_collection_threshold *
                                                      static_cast<double>(options_.memory_limit))
                           : 0),
      plain_rounding_(options_.roundup_power2_divisions.empty()),
      small_pool_(std::make_unique<Pool>(true)),
      large_pool_(std::make_unique<Pool>(false)) {
  if (underlying_ == nullptr) {
    throw std::invalid_argument("strata: AutoGrowthBestFitAllocator needs an underlying allocator");
  }
  VLOG(4) << "auto_growth_best_fit on " << place_ << ": alignment " << options_.alignment
          << ", chunk_size " << options_.chunk_size << ", small_size " << options_.small_size
          << ", small_chunk_size " << options_.small_chunk_size << ", max_split_size "
          << options_.max_split_size << ", roundup intervals "
          << options_.roundup_power2_divisions.size() << ", gc threshold "
          << options_.garbage_collection_threshold << ", memory_limit " << options_.memory_limit
          << ", free_idle_chunk " << options_.free_idle_chunk << ", free_when_no_cache_hit "
          << options_.free_when_no_cache_hit << ", release_idle_before_new_peak "
          << options_.release_idle_before_new_peak;
}

AutoGrowthBestFitAllocator::~AutoGrowthBestFitAllocator() {
  std::lock_guard<platform::SpinLock> lock(mu_);
  FlushQuick();
  std::size_t live_chunks = 0;
  while (all_chunks_ != nullptr) {
    Chunk* c = all_chunks_;
    all_chunks_ = c->all_next;
    if (!c->idle) ++live_chunks;
    for (Block* b = c->first; b != nullptr;) {
      Block* next = b->next_addr;
      // Live blocks keep their records: their owners still hold them (and will misbehave anyway).
      if (b->state == Block::kFree) Recycle(b);
      b = next;
    }
    c->device.reset();
    delete c;
  }
  while (spare_records_ != nullptr) {
    Block* b = spare_records_;
    spare_records_ = b->next_free;
    delete b;
  }
  LOG_IF(ERROR, live_chunks > 0) << "strata: auto_growth_best_fit on " << place_
                                 << " destroyed with " << FormatBytes(allocated_)
                                 << " still allocated in " << live_chunks << " chunks";
}

// ---- sizes and policy -------------------------------------------------------------------------

std::size_t AutoGrowthBestFitAllocator::RoundSize(std::size_t size) const { return Round(size); }

std::size_t AutoGrowthBestFitAllocator::Round(std::size_t size) const {
  if (size > kMaxRequestBytes) [[unlikely]]
    ThrowTooLarge(size, place_);
  if (plain_rounding_) [[likely]] {
    return std::max(RoundUp(size, options_.alignment), options_.alignment);
  }
  return RoundSizeSlow(size);
}

std::size_t AutoGrowthBestFitAllocator::RoundSizeSlow(std::size_t size) const {
  const std::size_t align = options_.alignment;
  const auto& divs = options_.roundup_power2_divisions;
  if (size > 0) {
    const int log = Log2Floor(size);
    const std::size_t index = std::min<std::size_t>(log > 20 ? log - 20 : 0, divs.size() - 1);
    const std::size_t d = divs[index];
    if (d > 1 && size > align * d && !IsPowerOfTwo(size)) {
      // Round up to the next of d equal steps of [2^log, 2^(log+1)).
      const std::size_t floor = std::size_t{1} << log;
      const std::size_t step = floor >> Log2Floor(d);
      size = step == 0 ? floor << 1 : RoundUp(size, step);
    }
  }
  return std::max(RoundUp(size, align), align);
}

AutoGrowthBestFitAllocator::Pool& AutoGrowthBestFitAllocator::PoolFor(std::size_t block_size) {
  return block_size <= options_.small_size ? *small_pool_ : *large_pool_;
}

// The growth policy: how many bytes to ask the underlying allocator for when no free block of
// `size` (already rounded) exists in `pool`.
// - Small pool: a whole small chunk (2 MiB), later packed with small blocks.
// - Oversize request (>= max_split_size): exactly the request rounded to the device granularity,
//   since oversize blocks are never split and any extra would be dead weight.
// - Otherwise the request rounded to the granularity, or chunk_size if larger; but a chunk meant
//   for splitting stays below max_split_size so that its pieces remain splittable/usable by
//   ordinary requests.
std::size_t AutoGrowthBestFitAllocator::GrowthBytes(const Pool& pool, std::size_t size) const {
  const std::size_t gran = options_.growth_granularity;
  if (pool.small) return std::max(options_.small_chunk_size, RoundUp(size, gran));
  const std::size_t minimal = RoundUp(size, gran);
  const std::size_t max_split = options_.max_split_size;
  if (max_split != 0 && size >= max_split) return minimal;
  std::size_t grow = std::max(minimal, RoundUp(options_.chunk_size, gran));
  if (max_split != 0 && grow >= max_split) {
    grow = std::max(minimal, RoundDown(max_split - 1, gran));
  }
  return grow;
}

// The least growth that can serve `size`: used when memory is tight (limit or device OOM).
std::size_t AutoGrowthBestFitAllocator::MinimalGrowthBytes(std::size_t size) const {
  return RoundUp(size, options_.growth_granularity);
}

// Splitting follows PyTorch: small-pool blocks split whenever the rest can hold a minimal block;
// large-pool blocks only for ordinary (< max_split_size) requests.
bool AutoGrowthBestFitAllocator::ShouldSplit(const Pool& pool, std::size_t size,
                                             std::size_t block_size) const {
  if (block_size - size < options_.alignment) return false;
  return pool.small || options_.max_split_size == 0 || size < options_.max_split_size;
}

// ---- free lists -------------------------------------------------------------------------------

// The figures mirror what a remove (SplitOut) and an insert (SplitIn) of the block would record.
void AutoGrowthBestFitAllocator::SplitIn(std::size_t bytes) {
  const StatPool p = allocation::PoolOf(bytes);
  const auto n = static_cast<std::int64_t>(bytes);
  SplitFigure& c = split_count_[p];
  SplitFigure& b = split_bytes_[p];
  ++c.current;
  ++c.increased;
  c.peak = std::max(c.peak, c.current);
  b.current += n;
  b.increased += n;
  b.peak = std::max(b.peak, b.current);
  split_count_[allocation::kAggregate].peak = std::max(
      split_count_[allocation::kAggregate].peak,
      split_count_[allocation::kSmallPool].current + split_count_[allocation::kLargePool].current);
  split_bytes_[allocation::kAggregate].peak = std::max(
      split_bytes_[allocation::kAggregate].peak,
      split_bytes_[allocation::kSmallPool].current + split_bytes_[allocation::kLargePool].current);
}

// As SplitOut(from) + SplitIn(to) for from > to, both splits.
void AutoGrowthBestFitAllocator::SplitShrink(std::size_t from, std::size_t to) {
  if (to > allocation::kSmallSize || from <= allocation::kSmallSize) [[likely]] {
    const StatPool p = allocation::PoolOf(to);
    ++split_count_[p].increased;
    split_bytes_[p].current -= static_cast<std::int64_t>(from - to);
    split_bytes_[p].increased += static_cast<std::int64_t>(to);
  } else {
    SplitOut(from);
    SplitIn(to);
  }
}

// As SplitOut(from) + SplitIn(to) for from < to, both splits.
void AutoGrowthBestFitAllocator::SplitGrow(std::size_t from, std::size_t to) {
  if (from > allocation::kSmallSize || to <= allocation::kSmallSize) [[likely]] {
    const StatPool p = allocation::PoolOf(to);
    SplitFigure& b = split_bytes_[p];
    ++split_count_[p].increased;
    b.current += static_cast<std::int64_t>(to - from);
    b.increased += static_cast<std::int64_t>(to);
    b.peak = std::max(b.peak, b.current);
    split_bytes_[allocation::kAggregate].peak =
        std::max(split_bytes_[allocation::kAggregate].peak,
                 split_bytes_[allocation::kSmallPool].current +
                     split_bytes_[allocation::kLargePool].current);
  } else {
    SplitOut(from);
    SplitIn(to);
  }
}

void AutoGrowthBestFitAllocator::SplitOut(std::size_t bytes) {
  const StatPool p = allocation::PoolOf(bytes);
  --split_count_[p].current;
  split_bytes_[p].current -= static_cast<std::int64_t>(bytes);
}

AutoGrowthBestFitAllocator::Block* AutoGrowthBestFitAllocator::NewRecord() {
  if (Block* b = spare_records_; b != nullptr) [[likely]] {
    spare_records_ = b->next_free;
    --num_spare_records_;
    return b;
  }
  return new Block();
}

void AutoGrowthBestFitAllocator::Recycle(Block* block) {
  block->owner = nullptr;  // so a stale free of this record is caught
  // Bounded, so that a burst of splits does not pin records forever.
  if (num_spare_records_ < 4096) [[likely]] {
    block->next_free = spare_records_;
    spare_records_ = block;
    ++num_spare_records_;
  } else {
    delete block;
  }
}

void AutoGrowthBestFitAllocator::InsertFree(Block* block) {
  LinkFree(*block->chunk->pool, block, MapSize(block->size()));
  block->state = Block::kFree;
  if (IsSplit(block)) SplitIn(block->size());
}

void AutoGrowthBestFitAllocator::RemoveFree(Block* block) {
  UnlinkFree(*block->chunk->pool, block);
  block->prev_free = block->next_free = nullptr;
  block->state = Block::kLive;
  if (IsSplit(block)) SplitOut(block->size());
}

// Refiling only: callers fix the address links and the inactive-split figures.
void AutoGrowthBestFitAllocator::ResizeFree(Block* block, char* ptr, std::size_t size) {
  Pool& pool = *block->chunk->pool;
  const Bucket b = MapSize(size);
  pool.front_next = nullptr;
  if (b.fl == block->fl && b.sl == block->sl) {
    // Same bucket: move to the head (where a remove + insert would put it), bitmaps unchanged.
    if (Block* prev = block->prev_free; prev != nullptr) {
      prev->next_free = block->next_free;
      if (block->next_free != nullptr) block->next_free->prev_free = prev;
      Block*& head = pool.heads[b.fl][b.sl];
      block->prev_free = nullptr;
      block->next_free = head;
      head->prev_free = block;
      head = block;
    }
  } else {
    UnlinkFree(pool, block);
    LinkFree(pool, block, b);
  }
  block->Move(ptr, size);
}

// Best fit among acceptable blocks: the smallest block in [size, max_block] of the first
// non-empty bucket that has one (scanning at most kScanLimit entries per bucket). Buckets above
// the one holding `size` only hold fitting blocks, so in practice this is one or two bitmap
// lookups and a short scan.
AutoGrowthBestFitAllocator::Block* AutoGrowthBestFitAllocator::FindFit(Pool& pool,
                                                                       std::size_t size) {
  std::size_t max_block = std::numeric_limits<std::size_t>::max();
  const std::size_t max_split = options_.max_split_size;
  if (!pool.small && max_split != 0) {
    // Ordinary requests never take oversize blocks; oversize ones take at most slack more.
    max_block = size < max_split ? max_split - 1 : size + options_.oversize_slack;
  }
  Bucket at = MapSize(size);
  int fl = at.fl, sl = at.sl;
  while (true) {
    std::uint32_t sl_map = pool.sl_bitmap[fl] & (~std::uint32_t{0} << sl);
    if (sl_map == 0) {
      const std::uint64_t fl_map =
          fl + 1 < 64 ? pool.fl_bitmap & (~std::uint64_t{0} << (fl + 1)) : 0;
      if (fl_map == 0) return nullptr;
      fl = __builtin_ctzll(fl_map);
      sl_map = pool.sl_bitmap[fl];
    }
    sl = __builtin_ctz(sl_map);
    if (max_split != 0 && BucketLow(fl, sl) > max_block) return nullptr;
    Block* best = nullptr;
    std::size_t best_size = std::numeric_limits<std::size_t>::max();
    int scanned = 0;
    for (Block* b = pool.heads[fl][sl]; b != nullptr && scanned < kScanLimit;
         b = b->next_free, ++scanned) {
      const std::size_t bs = b->size();
      if (bs < size || bs > max_block) continue;
      if (bs < best_size) {
        best = b;
        best_size = bs;
        if (bs == size) break;
      }
    }
    if (best != nullptr) return best;
    if (++sl == kSlCount) {
      sl = 0;
      if (++fl == kFlCount) return nullptr;
    }
  }
}

// Takes free `block` for a request of `size`, splitting off the rest when worth keeping. The
// front is handed out in a new record, and the free record shrinks in place to the rest (usually
// staying in its bucket), which leaves the lists as removing the block and inserting the rest
// would, at a fraction of the cost.
AutoGrowthBestFitAllocator::Block* AutoGrowthBestFitAllocator::TakeBlock(Pool& pool, Block* block,
                                                                         std::size_t size) {
  Chunk* chunk = block->chunk;
  if (chunk->idle) [[unlikely]]
    UnmarkIdle(chunk);
  const std::size_t block_size = block->size();
  if (!ShouldSplit(pool, size, block_size)) {
    RemoveFree(block);
    return block;
  }
  const bool was_split = IsSplit(block);
  Block* taken = NewRecord();
  taken->prev_addr = block->prev_addr;
  taken->next_addr = block;
  (block->prev_addr != nullptr ? block->prev_addr->next_addr : chunk->first) = taken;
  block->prev_addr = taken;
  taken->prev_free = taken->next_free = nullptr;
  taken->chunk = chunk;
  taken->owner = this;
  taken->state = Block::kLive;
  taken->Move(block->bytes(), size);
  const std::size_t rest = block_size - size;
  ResizeFree(block, block->bytes() + size, rest);
  // As RemoveFree(block) + InsertFree(rest) would count (the rest is a split now).
  if (was_split) [[likely]] {
    SplitShrink(block_size, rest);
  } else {
    SplitIn(rest);
  }
  return taken;
}

// ---- chunks -----------------------------------------------------------------------------------

void AutoGrowthBestFitAllocator::MarkIdle(Chunk* chunk) {
  DCHECK(!chunk->idle);
  chunk->idle = true;
  chunk->idle_next = nullptr;
  chunk->idle_prev = idle_tail_;
  if (idle_tail_ != nullptr) {
    idle_tail_->idle_next = chunk;
  } else {
    idle_head_ = chunk;
  }
  idle_tail_ = chunk;
}

void AutoGrowthBestFitAllocator::UnmarkIdle(Chunk* chunk) {
  if (!chunk->idle) return;
  chunk->idle = false;
  (chunk->idle_prev != nullptr ? chunk->idle_prev->idle_next : idle_head_) = chunk->idle_next;
  (chunk->idle_next != nullptr ? chunk->idle_next->idle_prev : idle_tail_) = chunk->idle_prev;
  chunk->idle_prev = chunk->idle_next = nullptr;
}

// Returns an idle chunk to the underlying allocator.
std::size_t AutoGrowthBestFitAllocator::ReleaseChunk(Chunk* chunk) {
  DCHECK(chunk->first->state == Block::kFree && chunk->first->next_addr == nullptr);
  RemoveFree(chunk->first);
  Recycle(chunk->first);
  UnmarkIdle(chunk);
  (chunk->all_prev != nullptr ? chunk->all_prev->all_next : all_chunks_) = chunk->all_next;
  if (chunk->all_next != nullptr) chunk->all_next->all_prev = chunk->all_prev;
  const std::size_t bytes = chunk->size;
  const StatPool pool = chunk->pool->small ? allocation::kSmallPool : allocation::kLargePool;
  Add(segment_, pool, -1);
  Add(reserved_stat_, pool, -static_cast<std::int64_t>(bytes));
  if (chunk->oversize) --oversize_segments_;
  ++num_device_free_;
  --num_chunks_;
  reserved_ -= bytes;
  VLOG(1) << "auto_growth_best_fit on " << place_ << ": released chunk of " << FormatBytes(bytes)
          << " at " << static_cast<void*>(chunk->base) << ", reserved now "
          << FormatBytes(reserved_);
  chunk->device.reset();
  delete chunk;
  return bytes;
}

std::size_t AutoGrowthBestFitAllocator::ReleaseIdleChunks(std::size_t target, std::size_t extra) {
  std::size_t released = 0;
  while (idle_head_ != nullptr && reserved_ + extra > target) released += ReleaseChunk(idle_head_);
  return released;
}

std::size_t AutoGrowthBestFitAllocator::ReleaseAllIdle() {
  std::size_t released = 0;
  while (idle_head_ != nullptr) released += ReleaseChunk(idle_head_);
  return released;
}

// A cache miss: make room per the release options, respect the memory limit, then grow a chunk
// and return its (free, indexed) single block.
AutoGrowthBestFitAllocator::Block* AutoGrowthBestFitAllocator::Grow(Pool& pool, std::size_t size) {
  if (options_.free_when_no_cache_hit) ReleaseAllIdle();
  std::size_t grow = GrowthBytes(pool, size);
  if (options_.release_idle_before_new_peak && reserved_ + grow > high_water_) {
    ReleaseIdleChunks(high_water_, grow);
  }
  const std::size_t minimal = MinimalGrowthBytes(size);
  if (gc_target_bytes_ != 0 && reserved_ + grow > gc_target_bytes_) {
    const std::size_t freed = ReleaseIdleChunks(gc_target_bytes_, grow);
    VLOG_IF(1, freed > 0) << "auto_growth_best_fit on " << place_ << ": garbage collection freed "
                          << FormatBytes(freed);
  }
  const std::size_t limit = options_.memory_limit;
  if (limit != 0 && reserved_ + grow > limit) {
    grow = minimal;
    if (reserved_ + grow > limit) ReleaseAllIdle();
    if (reserved_ + grow > limit) {
      throw BadAlloc(place_, size)
          .set_pool_usage(allocated_, reserved_)
          .set_memory_limit(limit, reserved_);
    }
  }

  allocation::AllocationPtr device;
  try {
    device = underlying_->Allocate(grow);
  } catch (const BadAlloc&) {
    VLOG(1) << "auto_growth_best_fit on " << place_ << ": growing by " << FormatBytes(grow)
            << " failed; releasing idle chunks and retrying with " << FormatBytes(minimal);
  }
  if (device == nullptr) {
    ReleaseAllIdle();
    grow = minimal;
    try {
      device = underlying_->Allocate(grow);
    } catch (BadAlloc& e) {
      e.set_pool_usage(allocated_, reserved_);
      const std::size_t unallocated = reserved_ - allocated_;
      if (unallocated >= size || unallocated * 4 >= reserved_) {
        e.set_hint(absl::StrCat(
            FormatBytes(unallocated),
            " is reserved but unallocated (fragmentation): if that is large, try setting "
            "max_split_size_mb to avoid fragmentation."));
      }
      throw;
    }
  }

  auto* chunk = new Chunk();
  chunk->size = std::max(grow, RoundDown(device->size(), options_.alignment));
  chunk->base = static_cast<char*>(device->ptr());
  chunk->device = std::move(device);
  chunk->pool = &pool;
  chunk->oversize = options_.max_split_size != 0 && chunk->size >= options_.max_split_size;
  chunk->all_next = all_chunks_;
  if (all_chunks_ != nullptr) all_chunks_->all_prev = chunk;
  all_chunks_ = chunk;
  ++num_chunks_;
  reserved_ += chunk->size;
  high_water_ = std::max(high_water_, reserved_);
  const StatPool stat_pool = pool.small ? allocation::kSmallPool : allocation::kLargePool;
  Add(segment_, stat_pool, 1);
  Add(reserved_stat_, stat_pool, static_cast<std::int64_t>(chunk->size));
  if (chunk->oversize) ++oversize_segments_;
  ++num_device_alloc_;

  Block* block = NewRecord();
  block->InitFree(chunk->base, chunk->size, chunk, this);
  chunk->first = block;
  InsertFree(block);
  VLOG(1) << "auto_growth_best_fit on " << place_ << ": grew " << (pool.small ? "small" : "large")
          << " pool by " << FormatBytes(chunk->size) << " for " << FormatBytes(size)
          << ", reserved now " << FormatBytes(reserved_);
  return block;
}

// ---- Allocator --------------------------------------------------------------------------------

// ---- quick reuse ------------------------------------------------------------------------------
//
// A parked block stands for the free block that coalescing it would have made, and the figures
// already count that block, so parking, taking back and flushing reproduce the normal paths:
// - "alone" (both neighbours live): the free block is the parked block itself, of exactly the
//   requested size, so best fit would take an exact fit too;
// - "front" (previous live, next free): the free block is parked + next. Parked only when best
//   fit would pick that range for the parked block's size (Frontable), and only onto an empty
//   stack; since the lists do not change while anything is parked (every other path flushes
//   first), that stays true until it is taken back from the top or flushed.
// A block after a free or parked block is never parked (taking it back would cut a range in
// the middle).
//
// Last live block: a chunk's last live block is parked too (unless free_idle_chunk, which must
// release the chunk at once), since a free + allocate of one size in an otherwise empty chunk is
// the commonest loop of all. The coalesced block it stands for is then the whole chunk (it is
// "alone" with no neighbours, or "front" at the chunk's start with the free rest after it), which
// counts as no split. The chunk is not marked idle while the block is parked: everything that
// looks at idle chunks (any search other than a quick hit, hence growth, free_when_no_cache_hit,
// release_idle_before_new_peak and garbage collection; Release; destruction) flushes the stack
// first, and the flush marks the chunk idle. Every free that does not park flushes too, and the
// stack flushes in free order, so the idle list keeps exactly the order of the frees that made
// the chunks idle (it records an order, no time). The one difference: a chunk whose last block
// is taken back by a quick hit never goes idle, where it used to go idle and come back at once.

// Whether `block` (previous live, `next` free, the stack empty) may be parked as "front": best
// fit for block's size would take the range block + next, i.e. next is alone in its bucket and
// no other bucket from the size's up to the range's holds anything.
bool AutoGrowthBestFitAllocator::Frontable(const Pool& pool, std::size_t size,
                                           const Block* next) const {
  if (next->prev_free != nullptr || next->next_free != nullptr || next->chunk->oversize) {
    return false;
  }
  const int at = next->fl * kSlCount + next->sl;
  const Bucket s = MapSize(size);
  if (FirstNonEmpty(pool, s.fl, s.sl) != at) return false;
  const Bucket r = MapSize(size + next->size());
  const int range = r.fl * kSlCount + r.sl;
  return range == at || FirstNonEmpty(pool, next->fl, next->sl + 1) > range;
}

// Turns a parked block into the free block it stands for (already counted). When that is the
// whole chunk (the chunk's last live block was parked), the chunk goes idle now, as FreeBlock
// would have made it at the free: see "last live block" above.
void AutoGrowthBestFitAllocator::Unpark(Block* block) {
  block->state = Block::kLive;
  Block* next = block->next_addr;
  if (next != nullptr && next->state == Block::kFree) {
    next->prev_addr = block->prev_addr;
    (block->prev_addr != nullptr ? block->prev_addr->next_addr : block->chunk->first) = next;
    ResizeFree(next, block->bytes(), block->size() + next->size());
    Recycle(block);
    block = next;
  } else {
    LinkFree(*block->chunk->pool, block, MapSize(block->size()));
    block->state = Block::kFree;
  }
  if (block->prev_addr == nullptr && block->next_addr == nullptr) [[unlikely]]
    ChunkFree(block->chunk);
}

// Takes parked `block` back for a request of its size, counting what TakeBlock would: the free
// block it stands for is block (+ next), a split unless it spans the whole chunk. It does
// exactly when its chunk has no live block (`empty`): a parked block's previous block stays
// live (or absent) and its next live, absent or free (the lists do not change while it is
// parked), and freeing a chunk's last other live block while it is parked flushes it first.
void AutoGrowthBestFitAllocator::Unpark(Block* block, std::size_t size, bool empty) {
  block->state = Block::kLive;
  Block* next = block->next_addr;
  if (next != nullptr && next->state == Block::kFree) {
    DCHECK_EQ(empty, block->prev_addr == nullptr && next->next_addr == nullptr);
    if (!empty) [[likely]] {
      SplitShrink(size + next->size(), next->size());
    } else {
      SplitIn(next->size());  // the whole chunk, split now
    }
  } else {
    DCHECK_EQ(empty, !IsSplit(block));
    if (!empty) [[likely]]
      SplitOut(size);
  }
}

// Counts parking `block` as "front" (merged into free `next`) as FreeBlock's merge would; with
// `empty` (no live block left in the chunk) the merged block is the whole chunk: no split.
void AutoGrowthBestFitAllocator::CountFrontPark(const Block* block, const Block* next, bool empty) {
  DCHECK_EQ(empty, block->prev_addr == nullptr && next->next_addr == nullptr);
  const std::size_t next_size = next->size();
  if (!empty) [[likely]] {
    SplitGrow(next_size, next_size + block->size());
  } else {
    SplitOut(next_size);
  }
}

void AutoGrowthBestFitAllocator::FlushQuick() {
  for (int i = 0; i < num_quick_; ++i) Unpark(quick_[i]);
  quick_credit_ -= num_quick_;  // parked for nothing
  num_quick_ = 0;
}

AutoGrowthBestFitAllocator::Block* AutoGrowthBestFitAllocator::Search(std::size_t size) {
  if (num_quick_ != 0) {
    // Below the top, only "alone" blocks: best fit would take an exact fit whatever else is
    // parked.
    for (int i = num_quick_ - 1; i >= 0; --i) {
      Block* block = quick_[i];
      if (quick_size_[i] == size &&
          (block->next_addr == nullptr || block->next_addr->state != Block::kFree)) {
        for (int j = i + 1; j < num_quick_; ++j) {
          quick_[j - 1] = quick_[j];
          quick_size_[j - 1] = quick_size_[j];
        }
        --num_quick_;
        Unpark(block, size, block->chunk->live == 0);
        quick_credit_ = std::min(quick_credit_ + kQuickHitCredit, kQuickMaxCredit);
        return block;
      }
    }
    FlushQuick();
  }
  // While parking is off, a request for the size just freed is a hit it would have had.
  if (size == last_free_size_) [[unlikely]] {
    quick_credit_ = std::min(quick_credit_ + 1, kQuickMaxCredit);
  }
  last_free_size_ = 0;
  Pool& pool = PoolFor(size);
  Block* block = FindFit(pool, size);
  if (block == nullptr) block = Grow(pool, size);
  return TakeBlock(pool, block, size);
}

// The hot paths lock and unlock by hand so that everything past the quick paths is one out-of-line
// call (which takes over the held lock), keeping the quick paths small.
Allocation* AutoGrowthBestFitAllocator::AllocateImpl(std::size_t size) {
  const std::size_t rounded = Round(size);
  mu_.lock();
  if (num_quick_ != 0 && quick_size_[num_quick_ - 1] == rounded) [[likely]] {
    Block* block = quick_[--num_quick_];
    Chunk* chunk = block->chunk;
    Unpark(block, rounded, chunk->live == 0);
    quick_credit_ = std::min(quick_credit_ + kQuickHitCredit, kQuickMaxCredit);
    ++chunk->live;
    allocated_ += rounded;
    // Still as handed out last time (pointer, size, base, place), and every layer above has
    // popped itself on the way down; only what an upper layer may have set needs clearing.
    block->set_requested_size(0);
    mu_.unlock();
    if (VLOG_IS_ON(10)) [[unlikely]]
      LogAllocate(size, block);
    return block;
  }
  return AllocateSlow(size, rounded);
}

Allocation* AutoGrowthBestFitAllocator::AllocateSlow(std::size_t size, std::size_t rounded) {
  Block* block;
  {
    std::lock_guard<platform::SpinLock> lock(mu_, std::adopt_lock);
    block = Search(rounded);
    ++block->chunk->live;
    allocated_ += block->size();
    block->Hand(block->chunk->base, place_);
  }
  if (VLOG_IS_ON(10)) [[unlikely]]
    LogAllocate(size, block);
  return block;
}

void AutoGrowthBestFitAllocator::FreeImpl(Allocation* allocation) {
  auto* block = static_cast<Block*>(allocation);
  mu_.lock();
  if (block->owner != this || block->state != Block::kLive) [[unlikely]] {
    mu_.unlock();
    ThrowBadFree(place_, block->ptr(), block->owner != this);
  }
  const std::size_t size = block->size();
  allocated_ -= size;
  Chunk* chunk = block->chunk;
  const bool empty = --chunk->live == 0;
  if ((!empty || !options_.free_idle_chunk) && num_quick_ != kQuickCapacity && quick_credit_ > 0 &&
      !IsUnused(block->prev_addr)) [[likely]] {
    Block* next = block->next_addr;
    if (!IsUnused(next)) {
      // As InsertFree(block); with no live block left it is the whole chunk: no split.
      if (!empty) [[likely]]
        SplitIn(size);
    } else if (next->state == Block::kFree && num_quick_ == 0 && chunk->pool->front_next == next &&
               chunk->pool->front_size == size) {
      CountFrontPark(block, next, empty);
    } else {
      return FreeSlow(block);
    }
    block->state = Block::kParked;
    quick_[num_quick_] = block;
    quick_size_[num_quick_] = size;
    ++num_quick_;
    mu_.unlock();
    if (VLOG_IS_ON(10)) [[unlikely]]
      LogFree(block);
    return;
  }
  FreeSlow(block);
}

void AutoGrowthBestFitAllocator::FreeSlow(Block* block) {
  std::lock_guard<platform::SpinLock> lock(mu_, std::adopt_lock);
  if (VLOG_IS_ON(10)) [[unlikely]]
    LogFree(block);
  const std::size_t size = block->size();
  Block* next = block->next_addr;
  if ((block->chunk->live != 0 || !options_.free_idle_chunk) && num_quick_ == 0 &&
      quick_credit_ > 0 && !IsUnused(block->prev_addr) && next != nullptr &&
      next->state == Block::kFree) {
    Pool& pool = *next->chunk->pool;
    if (Frontable(pool, size, next)) {
      pool.front_next = next;  // FreeImpl parks the next such free without asking again
      pool.front_size = size;
      CountFrontPark(block, next, block->chunk->live == 0);
      block->state = Block::kParked;
      quick_[0] = block;
      quick_size_[0] = size;
      num_quick_ = 1;
      return;
    }
  }
  last_free_size_ = size;
  // Coalesce what is parked (the lists may change now, and chunks parked empty go idle first),
  // then free normally; for the chunk's last live block this idles (or releases) the chunk.
  if (num_quick_ != 0) FlushQuick();
  FreeBlock(block);
}

void AutoGrowthBestFitAllocator::FreeBlock(Block* block) {
  const std::size_t size = block->size();
  Block* prev = block->prev_addr;
  Block* next = block->next_addr;
  const bool prev_free = prev != nullptr && prev->state == Block::kFree;
  if (next != nullptr && next->state == Block::kFree && !prev_free) [[likely]] {
    // The free next block grows down over this one, in place: the lists end as removing it and
    // inserting the merged block would leave them.
    const std::size_t next_size = next->size();  // a split: this block is its neighbour
    next->prev_addr = prev;
    (prev != nullptr ? prev->next_addr : block->chunk->first) = next;
    ResizeFree(next, block->bytes(), size + next_size);
    Recycle(block);
    block = next;
    const std::size_t merged = size + next_size;
    if (IsSplit(next)) [[likely]] {
      SplitGrow(next_size, merged);
    } else {
      SplitOut(next_size);
      if (IsSplit(next)) SplitIn(merged);
    }
  } else if (prev_free) {
    if (next != nullptr && next->state == Block::kFree) {
      RemoveFree(next);
      block->Resize(size + next->size());
      block->next_addr = next->next_addr;
      if (next->next_addr != nullptr) next->next_addr->prev_addr = block;
      Recycle(next);
    }
    // The free previous block grows over this one, in place.
    const std::size_t prev_size = prev->size();  // a split: this block is its neighbour
    const std::size_t merged = prev_size + block->size();
    prev->next_addr = block->next_addr;
    if (block->next_addr != nullptr) block->next_addr->prev_addr = prev;
    Recycle(block);
    block = prev;
    ResizeFree(prev, prev->bytes(), merged);
    SplitOut(prev_size);
    if (IsSplit(prev)) SplitIn(merged);
  } else {
    InsertFree(block);
  }
  if (block->prev_addr == nullptr && block->next_addr == nullptr) [[unlikely]]
    ChunkFree(block->chunk);
}

void AutoGrowthBestFitAllocator::ChunkFree(Chunk* chunk) {
  if (options_.free_idle_chunk) {
    ReleaseChunk(chunk);
  } else {
    MarkIdle(chunk);
  }
}

std::uint64_t AutoGrowthBestFitAllocator::ReleaseImpl(const platform::Place& place) {
  if (place != place_) return 0;
  std::lock_guard<platform::SpinLock> lock(mu_);
  FlushQuick();
  const std::size_t released = ReleaseAllIdle();
  VLOG(1) << "auto_growth_best_fit on " << place_ << ": Release freed " << FormatBytes(released);
  return released;
}

// ---- statistics and accessors -----------------------------------------------------------------

void AutoGrowthBestFitAllocator::CollectStats(allocation::MemoryStats* stats) const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  MergeInto(stats->segment, segment_);
  MergeInto(stats->reserved_bytes, reserved_stat_);
  for (auto [figures, to] : {std::pair{&split_count_, &stats->inactive_split},
                             std::pair{&split_bytes_, &stats->inactive_split_bytes}}) {
    allocation::StatValue total;
    for (StatPool p : {allocation::kSmallPool, allocation::kLargePool}) {
      const SplitFigure& f = (*figures)[p];
      allocation::StatValue v;
      v.current = f.current;
      v.peak = f.peak;
      v.allocated = f.increased;
      v.freed = f.increased - f.current + f.base;
      (*to)[p].Merge(v);
      total.current += v.current;
      total.allocated += v.allocated;
      total.freed += v.freed;
    }
    total.peak = (*figures)[allocation::kAggregate].peak;
    (*to)[allocation::kAggregate].Merge(total);
  }
  stats->num_device_alloc += num_device_alloc_;
  stats->num_device_free += num_device_free_;
  stats->oversize_segments.current += oversize_segments_;
  stats->oversize_segments.peak += oversize_segments_;
  // A configuration value, not a quantity: report it rather than add it.
  stats->max_split_size = std::max<std::int64_t>(stats->max_split_size, options_.max_split_size);
}

void AutoGrowthBestFitAllocator::ResetPeakStats() {
  std::lock_guard<platform::SpinLock> lock(mu_);
  for (StatArray* s : {&segment_, &reserved_stat_}) {
    for (auto& v : *s) v.ResetPeak();
  }
  for (auto* figures : {&split_count_, &split_bytes_}) {
    auto& f = *figures;
    f[allocation::kSmallPool].peak = f[allocation::kSmallPool].current;
    f[allocation::kLargePool].peak = f[allocation::kLargePool].current;
    f[allocation::kAggregate].peak =
        f[allocation::kSmallPool].current + f[allocation::kLargePool].current;
  }
}

void AutoGrowthBestFitAllocator::ResetAccumulatedStats() {
  std::lock_guard<platform::SpinLock> lock(mu_);
  for (StatArray* s : {&segment_, &reserved_stat_}) {
    for (auto& v : *s) v.ResetAccumulated();
  }
  for (auto* figures : {&split_count_, &split_bytes_}) {
    for (SplitFigure& f : *figures) {
      f.increased = 0;
      f.base = f.current;
    }
  }
  num_device_alloc_ = 0;
  num_device_free_ = 0;
}

std::size_t AutoGrowthBestFitAllocator::reserved_bytes() const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  return reserved_;
}

std::size_t AutoGrowthBestFitAllocator::allocated_bytes() const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  return allocated_;
}

std::size_t AutoGrowthBestFitAllocator::num_chunks() const {
  std::lock_guard<platform::SpinLock> lock(mu_);
  return num_chunks_;
}

}  // namespace strata::strategies
