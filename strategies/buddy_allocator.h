// BuddyAllocator: Paddle-style buddy pool over chunks obtained from an underlying allocator
// (normally the raw device allocator). It is a helper of the naive_best_fit and thread_local
// strategies, not an Allocator itself.
//
// Algorithm
// - The pool grows by "refills": whole chunks taken from the underlying allocator. Requests are
//   rounded up to `min_block_bytes`; the smallest free block that fits (lowest address among
//   equals) is taken and split, the rest staying free. "Buddies" are, as in Paddle, the
//   physically adjacent blocks of the same chunk: a freed block merges with a free left and/or
//   right neighbour, so freeing every block of a chunk leaves it one free block again.
// - Refill sizing (Paddle's): the first refill is `initial_bytes`, or `fraction` x
//   available_bytes() when that is 0; later refills `reallocate_bytes`, or `fraction` x
//   available_bytes() when that is 0. A refill is never smaller than the request and is rounded
//   up to `chunk_granularity`. If a refill larger than the request fails with BadAlloc, one
//   refill of just the (rounded) request is tried before giving up.
// - Requests above the maximum chunk size bypass the pool: they are allocated from the
//   underlying allocator and freed straight back. The maximum chunk size is `max_chunk_bytes`,
//   or, when 0, max(first refill, reallocate_bytes, chunk_granularity), fixed on first use.
// - Release() returns the chunks that have no live block ("untouched" since their last block
//   was freed) to the underlying allocator. Metadata lives on the host: device memory is never
//   read or written, so the pool works for GPU memory.
//
// Contract
// - Thread safety: none; callers serialize (NaiveBestFitAllocator holds a mutex,
//   ThreadLocalAllocator one pool per thread, each with its own mutex).
// - Streams: none; blocks are reusable as soon as they are freed.
// - Throws: std::invalid_argument for invalid Options (naming the option, its value and what
//   is allowed), for requests whose rounded size overflows, and for Free of a pointer this pool
//   did not hand out (or already freed); allocation::BadAlloc when the underlying allocator is
//   exhausted (with this pool's allocated/reserved bytes filled in); whatever available_bytes
//   throws.
// - Steady state (no refill) performs almost no heap allocation: block metadata is recycled,
//   and the best-fit index is a B-tree (many blocks per node), which allocates only when a node
//   splits. About 65 ns per alloc/free pair through ThreadLocalAllocator on one core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "allocation/allocator.h"
#include "allocation/memory_stats.h"

namespace strata::strategies {

class BuddyAllocator {
 public:
  struct Options {
    // Allocation granularity: every block size is a multiple of it. A power of two.
    std::size_t min_block_bytes = 256;
    // Requests above this bypass the pool; 0 derives it on first use (see above).
    std::size_t max_chunk_bytes = 0;
    // Refill sizes are rounded up to this (the raw device allocator rounds to 2 MiB, so
    // anything smaller would be wasted). A power of two; 1 disables rounding.
    std::size_t chunk_granularity = std::size_t{2} << 20;
    // Fraction of available_bytes() per refill, used where initial_bytes / reallocate_bytes
    // are 0. In (0, 1]. GPU pools use fraction_of_gpu_memory_to_use; the facade passes the CPU
    // and pinned fractions for those places.
    double fraction = 0.92;
    std::size_t initial_bytes = 0;     // first refill; 0: fraction x available_bytes()
    std::size_t reallocate_bytes = 0;  // later refills; 0: fraction x available_bytes()
    // Memory still available on the device (the facade passes the device's free memory).
    // Required unless both initial_bytes and reallocate_bytes are set.
    std::function<std::size_t()> available_bytes;
  };

  // A block handed out: `ptr`, its usable (rounded) size, and the start of the underlying
  // allocation it was carved from.
  struct Span {
    void* ptr = nullptr;
    std::size_t size = 0;
    void* base = nullptr;
  };

  // Throws std::invalid_argument when `options` are invalid.
  static void ValidateOptions(const Options& options);

  BuddyAllocator(std::shared_ptr<allocation::Allocator> underlying, Options options);
  ~BuddyAllocator();
  BuddyAllocator(const BuddyAllocator&) = delete;
  BuddyAllocator& operator=(const BuddyAllocator&) = delete;

  // A size of 0 gets a minimum block (a unique pointer).
  void* Alloc(std::size_t size) { return AllocSpan(size).ptr; }
  Span AllocSpan(std::size_t size);
  void Free(void* ptr);
  // Returns every chunk without a live block to the underlying allocator; returns the bytes.
  std::uint64_t Release();
  // Every chunk as a segment (pooled ones and requests that bypassed the pool) with its blocks.
  void Snapshot(allocation::MemorySnapshot* snapshot) const;

  // Bytes of live blocks (rounded sizes, bypassing requests included).
  std::size_t allocated_bytes() const { return allocated_; }
  // Bytes held from the underlying allocator (chunks and bypassing requests). Known under-count:
  // a request above max_chunk_bytes (bypassing the pool) counts at its size rounded to
  // min_block_bytes, but the device allocator below rounds it up to 2 MiB (refills are rounded to
  // chunk_granularity, bypasses are not), so the device holds up to 2 MiB - 256 B more per such
  // block (5 MiB + 1 B counts 5 MiB + 256 B; the device holds 6 MiB). CollectStats' reserved_bytes
  // is this figure.
  std::size_t reserved_bytes() const { return reserved_; }
  std::size_t NumChunks() const { return chunks_.size(); }  // pooled chunks only
  std::size_t NumLiveBlocks() const { return live_.size(); }
  std::size_t NumFreeBlocks() const { return free_.size() - 1; }  // less the sentinel
  // 0 until the first allocation when derived.
  std::size_t max_chunk_bytes() const { return max_chunk_bytes_; }
  const Options& options() const { return options_; }

  // Adds segment, reserved_bytes, inactive_split(_bytes), num_device_alloc/free to `stats`.
  // Segments (and the inactive split blocks inside them) are classed small/large by the
  // segment's size.
  void CollectStats(allocation::MemoryStats* stats) const;
  void ResetPeakStats();
  void ResetAccumulatedStats();

 private:
  struct Chunk;
  struct Block {
    char* ptr = nullptr;
    std::size_t size = 0;
    std::size_t requested = 0;  // what the live block was asked for (snapshots)
    bool free = false;
    Chunk* chunk = nullptr;
    Block* prev = nullptr;  // physical neighbours within the chunk
    Block* next = nullptr;  // (also links the spare list)
  };
  struct Chunk {
    allocation::AllocationPtr memory;
    char* base = nullptr;
    std::size_t size = 0;
    bool bypass = false;  // a request above max_chunk_bytes, not pooled
    Block* first = nullptr;
  };
  // Best fit: smallest size, then lowest address. Transparent so lower_bound takes a size.
  struct BestFitOrder {
    using is_transparent = void;
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
    bool operator()(const Block* a, std::size_t n) const { return a->size < n; }
    bool operator()(std::size_t n, const Block* b) const { return n < b->size; }
  };

  void SizeOnFirstUse();
  std::size_t PlannedRefillBytes() const;
  std::size_t FractionOfAvailable() const;
  void Refill(std::size_t n);
  Span AllocBypass(std::size_t n, std::size_t requested);
  allocation::AllocationPtr AllocateUnderlying(std::size_t bytes);
  Chunk* AddChunk(allocation::AllocationPtr memory, bool bypass);
  void DropChunkMemory(Chunk* chunk);
  void InsertFree(Block* block);
  void EraseFree(Block* block);
  Block* NewBlock();
  void RecycleBlock(Block* block);
  // Grows `left` over `right`, the block after it in its chunk, and recycles right's record.
  void Join(Block* left, Block* right);

  std::shared_ptr<allocation::Allocator> underlying_;
  const Options options_;
  const std::size_t refill_unit_;  // max(chunk_granularity, min_block_bytes)
  bool sized_ = false;
  std::size_t first_refill_bytes_ = 0;
  std::size_t max_chunk_bytes_ = 0;
  std::size_t num_refills_ = 0;

  std::vector<std::unique_ptr<Chunk>> chunks_;  // pooled chunks
  // A B-tree: many blocks per node, so inserts and erases rarely allocate. It always holds
  // `sentinel_` (size 0, never a best fit): an emptied B-tree frees its root node, which would
  // cost a heap allocation per call in the common one-free-block state.
  absl::btree_set<Block*, BestFitOrder> free_;
  Block sentinel_;
  absl::flat_hash_map<const void*, Block*> live_;
  Block* spare_blocks_ = nullptr;

  std::size_t allocated_ = 0;
  std::size_t reserved_ = 0;
  allocation::StatArray segment_{}, reserved_bytes_{}, inactive_split_{}, inactive_split_bytes_{};
  std::int64_t num_device_alloc_ = 0, num_device_free_ = 0;
};

}  // namespace strata::strategies
