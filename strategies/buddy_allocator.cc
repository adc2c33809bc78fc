#include "strategies/buddy_allocator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocation/bad_alloc.h"
#include "allocation/byte_format.h"
#include "glog/logging.h"

namespace strata::strategies {
namespace {

bool IsPowerOfTwo(std::size_t n) { return n != 0 && (n & (n - 1)) == 0; }

// Rounds `n` up to a multiple of `unit` (a power of two); false on overflow.
bool RoundUp(std::size_t n, std::size_t unit, std::size_t* out) {
  if (n > std::numeric_limits<std::size_t>::max() - (unit - 1)) return false;
  *out = (n + unit - 1) & ~(unit - 1);
  return true;
}

void Bump(allocation::StatArray& stat, std::size_t segment_bytes, std::int64_t delta) {
  const allocation::StatPool pool = allocation::PoolOf(segment_bytes);
  if (delta >= 0) {
    stat[allocation::kAggregate].Increase(delta);
    stat[pool].Increase(delta);
  } else {
    stat[allocation::kAggregate].Decrease(-delta);
    stat[pool].Decrease(-delta);
  }
}

[[noreturn]] void InvalidOption(const char* name, const std::string& value, const char* allowed) {
  throw std::invalid_argument(absl::StrCat("strata: BuddyAllocator option ", name, " = ", value,
                                           " is invalid; allowed: ", allowed));
}

}  // namespace

void BuddyAllocator::ValidateOptions(const Options& o) {
  constexpr std::size_t kMaxMinBlock = std::size_t{1} << 30;
  if (!IsPowerOfTwo(o.min_block_bytes) || o.min_block_bytes > kMaxMinBlock) {
    InvalidOption("min_block_bytes", absl::StrCat(o.min_block_bytes),
                  "a power of two between 1 and 1 GiB");
  }
  if (!IsPowerOfTwo(o.chunk_granularity) || o.chunk_granularity > kMaxMinBlock) {
    InvalidOption("chunk_granularity", absl::StrCat(o.chunk_granularity),
                  "a power of two between 1 and 1 GiB");
  }
  if (o.max_chunk_bytes != 0 && o.max_chunk_bytes < o.min_block_bytes) {
    InvalidOption("max_chunk_bytes", absl::StrCat(o.max_chunk_bytes),
                  "0 (derived) or at least min_block_bytes");
  }
  // Written so that NaN fails too.
  if (!(o.fraction > 0.0 && o.fraction <= 1.0)) {
    InvalidOption("fraction", absl::StrCat(o.fraction), "a value in (0, 1]");
  }
  if ((o.initial_bytes == 0 || o.reallocate_bytes == 0) && !o.available_bytes) {
    InvalidOption("available_bytes", "<empty>",
                  "a callback; it is required unless both initial_bytes and reallocate_bytes "
                  "are non-zero");
  }
}

BuddyAllocator::BuddyAllocator(std::shared_ptr<allocation::Allocator> underlying, Options options)
    : underlying_(std::move(underlying)),
      options_((ValidateOptions(options), std::move(options))),
      refill_unit_(std::max(options_.chunk_granularity, options_.min_block_bytes)) {
  if (underlying_ == nullptr) {
    throw std::invalid_argument("strata: BuddyAllocator needs an underlying allocator");
  }
  free_.insert(&sentinel_);
  VLOG(4) << "BuddyAllocator over " << underlying_->Name()
          << ": min_block_bytes=" << options_.min_block_bytes
          << " max_chunk_bytes=" << options_.max_chunk_bytes
          << " chunk_granularity=" << options_.chunk_granularity
          << " fraction=" << options_.fraction << " initial_bytes=" << options_.initial_bytes
          << " reallocate_bytes=" << options_.reallocate_bytes;
}

BuddyAllocator::~BuddyAllocator() {
  if (!live_.empty()) {
    LOG(WARNING) << "strata: BuddyAllocator destroyed with " << live_.size() << " live blocks ("
                 << allocation::FormatBytes(allocated_)
                 << "); their memory goes back to the underlying allocator";
  }
  free_.clear();
  for (auto& [ptr, block] : live_) {
    if (block->chunk->bypass) {
      delete block->chunk;
      delete block;
    }
  }
  live_.clear();
  for (auto& chunk : chunks_) {
    for (Block* b = chunk->first; b != nullptr;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
  chunks_.clear();  // frees the chunks' memory
  while (spare_blocks_ != nullptr) {
    Block* next = spare_blocks_->next;
    delete spare_blocks_;
    spare_blocks_ = next;
  }
}

std::size_t BuddyAllocator::FractionOfAvailable() const {
  const double bytes = options_.fraction * static_cast<double>(options_.available_bytes());
  return static_cast<std::size_t>(bytes);
}

void BuddyAllocator::SizeOnFirstUse() {
  first_refill_bytes_ =
      options_.initial_bytes != 0 ? options_.initial_bytes : FractionOfAvailable();
  max_chunk_bytes_ = options_.max_chunk_bytes;
  if (max_chunk_bytes_ == 0) {
    max_chunk_bytes_ = std::max({first_refill_bytes_, options_.reallocate_bytes,
                                 options_.chunk_granularity, options_.min_block_bytes});
  }
  sized_ = true;
  VLOG(4) << "BuddyAllocator sized: first refill " << first_refill_bytes_ << " B, max chunk "
          << max_chunk_bytes_ << " B";
}

std::size_t BuddyAllocator::PlannedRefillBytes() const {
  if (num_refills_ == 0) return first_refill_bytes_;
  return options_.reallocate_bytes != 0 ? options_.reallocate_bytes : FractionOfAvailable();
}

allocation::AllocationPtr BuddyAllocator::AllocateUnderlying(std::size_t bytes) {
  try {
    return underlying_->Allocate(bytes);
  } catch (allocation::BadAlloc& e) {
    e.set_pool_usage(allocated_, reserved_);
    throw;
  }
}

BuddyAllocator::Chunk* BuddyAllocator::AddChunk(allocation::AllocationPtr memory, bool bypass) {
  auto chunk = std::make_unique<Chunk>();
  chunk->base = static_cast<char*>(memory->ptr());
  // Use everything the underlying allocator gave (it may round up), in whole blocks.
  chunk->size = memory->size() & ~(options_.min_block_bytes - 1);
  chunk->bypass = bypass;
  chunk->memory = std::move(memory);
  reserved_ += chunk->size;
  ++num_device_alloc_;
  Bump(segment_, chunk->size, 1);
  Bump(reserved_bytes_, chunk->size, static_cast<std::int64_t>(chunk->size));
  Chunk* raw = chunk.get();
  if (bypass) {
    static_cast<void>(chunk.release());  // owned by its single block until freed
  } else {
    chunks_.push_back(std::move(chunk));
  }
  return raw;
}

void BuddyAllocator::DropChunkMemory(Chunk* chunk) {
  reserved_ -= chunk->size;
  ++num_device_free_;
  Bump(segment_, chunk->size, -1);
  Bump(reserved_bytes_, chunk->size, -static_cast<std::int64_t>(chunk->size));
  chunk->memory.reset();
}

void BuddyAllocator::Refill(std::size_t n) {
  std::size_t needed = 0, planned = 0;
  // n <= max_chunk_bytes_, so rounding `needed` cannot overflow; `planned` may.
  RoundUp(n, refill_unit_, &needed);
  if (!RoundUp(std::max(PlannedRefillBytes(), needed), refill_unit_, &planned)) planned = needed;
  allocation::AllocationPtr memory;
  try {
    memory = underlying_->Allocate(planned);
  } catch (allocation::BadAlloc& e) {
    if (planned == needed) {
      e.set_pool_usage(allocated_, reserved_);
      throw;
    }
    VLOG(1) << "BuddyAllocator refill of " << planned << " B failed; retrying with " << needed
            << " B";
  }
  if (memory == nullptr) memory = AllocateUnderlying(needed);
  ++num_refills_;
  Chunk* chunk = AddChunk(std::move(memory), /*bypass=*/false);
  Block* block = NewBlock();
  block->ptr = chunk->base;
  block->size = chunk->size;
  block->chunk = chunk;
  chunk->first = block;
  InsertFree(block);
  VLOG(1) << "BuddyAllocator refill #" << num_refills_ << ": " << chunk->size << " B (reserved "
          << reserved_ << " B)";
}

BuddyAllocator::Span BuddyAllocator::AllocBypass(std::size_t n, std::size_t requested) {
  Chunk* chunk = AddChunk(AllocateUnderlying(n), /*bypass=*/true);
  Block* block = NewBlock();
  block->ptr = chunk->base;
  block->size = chunk->size;
  block->requested = requested;
  block->chunk = chunk;
  chunk->first = block;
  live_.emplace(block->ptr, block);
  allocated_ += block->size;
  VLOG(6) << "BuddyAllocator: " << n << " B above max chunk " << max_chunk_bytes_
          << " B bypasses the pool";
  return {block->ptr, block->size, chunk->base};
}

BuddyAllocator::Span BuddyAllocator::AllocSpan(std::size_t size) {
  std::size_t n = 0;
  if (!RoundUp(std::max<std::size_t>(size, 1), options_.min_block_bytes, &n)) {
    throw std::invalid_argument(absl::StrCat("strata: BuddyAllocator cannot allocate ", size,
                                             " bytes: the size overflows when rounded to ",
                                             options_.min_block_bytes));
  }
  if (!sized_) SizeOnFirstUse();
  if (n > max_chunk_bytes_) return AllocBypass(n, size);

  auto it = free_.lower_bound(n);
  if (it == free_.end()) {
    Refill(n);
    it = free_.lower_bound(n);
    if (it == free_.end()) {
      throw std::logic_error(absl::StrCat("strata: BuddyAllocator: the underlying allocator ",
                                          underlying_->Name(), " returned less than the ", n,
                                          " bytes requested"));
    }
  }
  Block* block = *it;
  EraseFree(block);
  if (block->size > n) {
    Block* rest = NewBlock();
    rest->ptr = block->ptr + n;
    rest->size = block->size - n;
    rest->chunk = block->chunk;
    rest->prev = block;
    rest->next = block->next;
    if (block->next != nullptr) block->next->prev = rest;
    block->next = rest;
    block->size = n;
    InsertFree(rest);
  }
  block->free = false;
  block->requested = size;
  live_.emplace(block->ptr, block);
  allocated_ += n;
  VLOG(10) << "BuddyAllocator alloc " << size << " -> " << static_cast<void*>(block->ptr) << " ("
           << n << " B)";
  return {block->ptr, n, block->chunk->base};
}

void BuddyAllocator::Free(void* ptr) {
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    throw std::invalid_argument(absl::StrFormat(
        "strata: BuddyAllocator::Free(%p): the pointer was not allocated by this pool or was "
        "already freed",
        ptr));
  }
  Block* block = it->second;
  live_.erase(it);
  allocated_ -= block->size;
  VLOG(10) << "BuddyAllocator free " << ptr << " (" << block->size << " B)";
  if (block->chunk->bypass) {
    DropChunkMemory(block->chunk);
    delete block->chunk;
    RecycleBlock(block);
    return;
  }
  block->free = true;
  if (block->prev != nullptr && block->prev->free) {
    Block* left = block->prev;
    EraseFree(left);
    Join(left, block);
    block = left;
  }
  if (block->next != nullptr && block->next->free) {
    EraseFree(block->next);
    Join(block, block->next);
  }
  InsertFree(block);
}

std::uint64_t BuddyAllocator::Release() {
  std::uint64_t released = 0;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < chunks_.size(); ++i) {
    Chunk* chunk = chunks_[i].get();
    Block* first = chunk->first;
    if (first->free && first->size == chunk->size) {
      EraseFree(first);
      RecycleBlock(first);
      released += chunk->size;
      DropChunkMemory(chunk);
      chunks_[i].reset();
    } else {
      chunks_[kept++] = std::move(chunks_[i]);
    }
  }
  chunks_.resize(kept);
  if (released != 0) {
    VLOG(1) << "BuddyAllocator released " << released << " B; " << kept << " chunks kept";
  }
  return released;
}

void BuddyAllocator::InsertFree(Block* block) {
  block->free = true;
  free_.insert(block);
  if (block->size != block->chunk->size) {
    Bump(inactive_split_, block->chunk->size, 1);
    Bump(inactive_split_bytes_, block->chunk->size, static_cast<std::int64_t>(block->size));
  }
}

void BuddyAllocator::EraseFree(Block* block) {
  free_.erase(block);
  if (block->size != block->chunk->size) {
    Bump(inactive_split_, block->chunk->size, -1);
    Bump(inactive_split_bytes_, block->chunk->size, -static_cast<std::int64_t>(block->size));
  }
}

BuddyAllocator::Block* BuddyAllocator::NewBlock() {
  Block* block = spare_blocks_;
  if (block == nullptr) return new Block();
  spare_blocks_ = block->next;
  *block = Block();
  return block;
}

void BuddyAllocator::Join(Block* left, Block* right) {
  left->size += right->size;
  left->next = right->next;
  if (right->next != nullptr) right->next->prev = left;
  RecycleBlock(right);
}

void BuddyAllocator::RecycleBlock(Block* block) {
  block->next = spare_blocks_;
  spare_blocks_ = block;
}

void BuddyAllocator::CollectStats(allocation::MemoryStats* stats) const {
  for (int i = 0; i < allocation::kNumStatPools; ++i) {
    stats->segment[i].Merge(segment_[i]);
    stats->reserved_bytes[i].Merge(reserved_bytes_[i]);
    stats->inactive_split[i].Merge(inactive_split_[i]);
    stats->inactive_split_bytes[i].Merge(inactive_split_bytes_[i]);
  }
  stats->num_device_alloc += num_device_alloc_;
  stats->num_device_free += num_device_free_;
}

void BuddyAllocator::ResetPeakStats() {
  for (auto* array : {&segment_, &reserved_bytes_, &inactive_split_, &inactive_split_bytes_}) {
    for (auto& value : *array) value.ResetPeak();
  }
}

void BuddyAllocator::ResetAccumulatedStats() {
  for (auto* array : {&segment_, &reserved_bytes_, &inactive_split_, &inactive_split_bytes_}) {
    for (auto& value : *array) value.ResetAccumulated();
  }
  num_device_alloc_ = num_device_free_ = 0;
}

void BuddyAllocator::Snapshot(allocation::MemorySnapshot* snapshot) const {
  auto add = [snapshot](const Chunk& c) {
    allocation::SnapshotSegment s;
    s.address = reinterpret_cast<std::uintptr_t>(c.base);
    s.size = s.mapped_bytes = c.size;
    for (const Block* b = c.first; b != nullptr; b = b->next) {
      s.blocks.push_back(
          {reinterpret_cast<std::uintptr_t>(b->ptr), b->size, b->free ? 0 : b->requested,
           b->free ? allocation::BlockState::kFree : allocation::BlockState::kAllocated});
    }
    snapshot->AddSegment(std::move(s));
  };
  for (const auto& c : chunks_) add(*c);
  for (const auto& [ptr, block] : live_) {
    if (block->chunk->bypass) add(*block->chunk);
  }
}

}  // namespace strata::strategies
