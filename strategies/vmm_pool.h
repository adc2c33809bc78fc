// VirtualMemoryPool: one pool per device on virtual memory, shared by every stream (Paddle's
// virtual-memory auto-growth, PyTorch's expandable segments, GMLake's stitching).
//
// How it works
// - Address space: one range of Options::reserve_bytes is reserved at the first allocation.
//   Blocks are carved out of it with split and merge, as in the auto-growth pool, but nothing
//   behind an address is physical until a block needs it. Requests up to 1 MiB are placed in
//   the range's first eighth, larger ones in the rest, so small blocks pack into pages of their
//   own instead of pinning pages between large ones.
// - Placement: the best fit (TlsfIndex), unless it needs pages mapped; then, of a bounded scan
//   of larger free blocks, the one with the fewest pages to map; if every fit starts on a
//   mapping that cannot go yet, the fit's first offset clear of them. (Also avoiding blocks whose
//   last user is another stream with pending work cost more memory on real multi-stream models
//   than the device-side waits it saved.)
// - Pages: the range is cut into pages of the device's VMM granularity (2 MiB on H100). A page
//   of address space is mapped to a physical page when a live block first touches it, and counts
//   the blocks that touch it (live ones, and free ones still held, below). A physical page with
//   none is "idle".
// - Stitching (GMLake's): when a block needs pages mapped, physical pages come from the
//   spare list (created, mapped nowhere) first; then, when creating more would hold more than
//   Options::stitch_slack_permille above the most pages live blocks ever touched at once, or pass
//   the memory limit, idle physical pages from anywhere in the pool are mapped into this block's
//   range as well. Only then is new physical memory created. Their old mappings stay: a physical
//   page may be mapped at several addresses, of which at most one has live blocks. A range whose
//   page is in use through another address gets a page of its own, after unmapping that one
//   (once the work through that address is done: each page of address space records the last
//   free through it). In a repeating workload the ranges take their pages back without driver
//   calls after a step or two.
// - Streams: a block freed by stream A is reused by A at once (stream order). Another stream B
//   may take it without waiting when a fence recorded on A after that free has completed (a
//   query); otherwise B waits on the device (StreamWaitEvent) for the oldest fence after the
//   free, recording one if there is none. The same holds per physical page taken through
//   another address than the one last freed, also for a block that only shares such a page with
//   a neighbouring block (a cut inside the page). Stitching takes idle pages whose work is done or
//   was on the requesting stream first; then, rather than creating memory, pages of pending work
//   on other streams, with one device-side wait per such stream. A stream records a fence every
//   kFenceEvery frees (a ring of recent ones is kept; with a single stream, only at frees of
//   page-sized blocks, keeping small frees off the driver), so B waits for A's work up to about
//   the free, not for everything A queued since, and work long done is seen as done although the
//   host runs far ahead of the device. The host never waits. Free neighbours merge when last
//   used on one stream, or once the other stream's use is seen done (a query), so that the free
//   space is not split by stream; a request that finds no mapped fit also merges neighbours of
//   pending work on two streams (the block keeps up to two streams' last uses, or "every
//   stream" beyond, and its next user waits for them on the device).
// - Releasing pages: an idle physical page is unmapped (from every address) only once a fence
//   recorded after its last free, on the stream that freed it, has completed (queries only). A
//   page freed by two streams is "mixed" and unmapped only once fences on every stream used in
//   the pool have completed. Release() unmaps every idle page that is safe now, records fences
//   for the others (a later Release or growth gets them), and gives every spare physical page
//   back to the device. Nothing here synchronizes or frees device memory with an implied
//   synchronization.
// - Extents: before the first free of a block of a page or more (a model's set-up), when growth
//   may create every page a block lacks (no spare pages, below the stitching threshold), each
//   run of at least two unmapped pages gets one physical allocation of up to
//   Options::max_extent_pages pages, mapped in one call. CUDA maps a physical allocation only
//   whole, so an extent lives at one address: its pages serve any block placed there, but it is
//   never stitched elsewhere page by page. When stitching is short of pages, or the device or the
//   limit is full, an extent with no live block whose work is done is unmapped and given back, so
//   that pages can be created in its stead (memory stays within the threshold).
// - Holds: a freed block, once filed, keeps its pages counted as if live ("held"), so that a block
//   carved from it again (the usual case in a repeating workload) does no per-page work: its
//   pages are mapped to it and nobody else used them. Holds are released, the oldest first, when
//   idle pages are needed (stitching, a refused growth, Release, teardown), when a placement
//   meets a page used through another range (it may be a held block's), and when a held block
//   merges with a free neighbour that has none. Only then do its pages go idle and get its last
//   uses. The stitching threshold counts pages of live blocks only (at block granularity).
// - Quick reuse: a freed block is parked as it is; an allocation of exactly its size on its stream
//   takes it back at once (a free + allocate of one size in a loop does no block or page work).
//   Any other allocation files the parked blocks first, in free order.
//
// Files: vmm_pool.cc (blocks, allocate, free, release, statistics), vmm_pool_pages.cc (pages,
// the idle list, mapping, stitching), vmm_pool_holds.cc (holds, the live-page count),
// vmm_pool_extents.cc (extents), vmm_pool_streams.cc (fences, cross-stream ordering).
//
// Contract
// - Thread-safe: one platform::SpinLock guards all state. Allocate/Free of a block carved from a
//   held free block do constant work under it (a block needing page work: one step per page).
// - Throws: std::invalid_argument for sizes above kMaxRequestBytes, freeing a block that is not
//   live here, or a device without VMM (VmmGranularity 0: the chain builder falls back to the
//   auto-growth pool before that); allocation::BadAlloc when physical memory or address space
//   cannot be had (the physical memory limit, or the device, after idle pages were reclaimed);
//   platform::RuntimeError from the runtime. A failed Allocate leaves the pool as it was, but
//   for pages it mapped (idle now) and physical pages it created (spare now).
// - Statistics: reserved bytes and segments are physical allocations (pages and extents, created
//   and not released), in the large pool; device alloc / free count physical creates / releases;
//   num_device_map / num_device_unmap count map and unmap calls; num_stream_waits the
//   cross-stream waits.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "allocation/allocation.h"
#include "allocation/memory_snapshot.h"
#include "allocation/memory_stats.h"
#include "platform/device_runtime.h"
#include "platform/physical_memory.h"
#include "platform/place.h"
#include "platform/spin_lock.h"
#include "platform/stream.h"
#include "strategies/tlsf_index.h"

namespace strata::strategies {

class VirtualMemoryPool {
 public:
  static constexpr std::size_t kMaxRequestBytes = std::size_t{1} << 50;

  struct Options {
    // Every block size is a multiple of this, and every block starts at a multiple of it.
    std::size_t alignment = 512;
    // Address space reserved (rounded up to the granularity); 0: 4x the device's memory.
    std::size_t reserve_bytes = 0;
    // Physical bytes the pool may hold (0: no limit beyond the device's).
    std::size_t memory_limit = 0;
    // Physical memory may exceed the most pages live blocks touched at once by this many
    // thousandths (plus two pages) before idle pages are remapped rather than more created.
    std::size_t stitch_slack_permille = 31;
    // Growth before the first free of a page-sized block creates a run of up to this many unmapped
    // pages of one block as one physical allocation (an extent): one create, map and set-access
    // instead of one per page, which the device charges per call (tens of microseconds each). 1:
    // one physical allocation per page.
    std::size_t max_extent_pages = 16;
  };

  struct Block;

  // Throws std::invalid_argument for a null runtime, a bad alignment, or a device without VMM.
  VirtualMemoryPool(platform::DeviceRuntime* runtime, const platform::Place& place,
                    Options options);
  ~VirtualMemoryPool();
  VirtualMemoryPool(const VirtualMemoryPool&) = delete;
  VirtualMemoryPool& operator=(const VirtualMemoryPool&) = delete;

  // A block of at least `size` bytes for work on `stream`.
  allocation::Allocation* Allocate(std::size_t size, platform::Stream stream);
  // Gives back a block from Allocate (its stream is the one it was allocated on).
  void Free(allocation::Allocation* allocation);
  // Unmaps idle pages that are safe now and releases every spare physical page; returns the
  // physical bytes given back to the device. Queries only: pages whose last work is pending stay.
  std::uint64_t Release();
  // Changes Options::memory_limit (0: none). Physical memory above a lowered limit stays until
  // idle and released; growth is refused meanwhile.
  void SetMemoryLimit(std::size_t bytes);
  std::size_t memory_limit() const;
  // Waits (host) until the work of every stream that freed blocks here so far has completed, so
  // that a following Release gives back every idle page. For an explicit EmptyCache only.
  void WaitForStreams();

  void CollectStats(allocation::MemoryStats* stats) const;
  // Segments: the runs of mapped address pages (mapped_bytes: the physical memory behind them);
  // blocks: the live and free blocks within them (free ones clipped to the run).
  void Snapshot(allocation::MemorySnapshot* snapshot) const;
  void ResetPeakStats();
  void ResetAccumulatedStats();

  const platform::Place& place() const { return place_; }
  std::size_t granularity() const { return page_; }
  std::size_t reserved_bytes() const;   // physical bytes held (mapped + spare)
  std::size_t mapped_bytes() const;     // address space mapped (a page mapped twice counts twice)
  std::size_t allocated_bytes() const;  // bytes of live blocks (rounded sizes)
  std::int64_t num_stream_waits() const;

 private:
  struct Page;
  struct PhysPage;
  struct StreamState;

  std::size_t Round(std::size_t size) const {
    if (size > kMaxRequestBytes) [[unlikely]]
      ThrowTooLarge(size);
    const std::size_t mask = options_.alignment - 1;  // a power of two
    return (std::max<std::size_t>(size, 1) + mask) & ~mask;
  }
  [[noreturn, gnu::cold]] void ThrowTooLarge(std::size_t size) const;
  void ReserveAddressSpace() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Block* NewBlock(char* addr, std::size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives every parked (freed and numbered) block back to the pool, in the order they were freed:
  // its pages' live counts dropped, merged with free neighbours.
  void FlushParked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Carve(Block* block, std::size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns the block filed (`block`, or the free neighbour before it that absorbed it).
  Block* InsertFree(Block* block, bool join_pending = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Files again, with join_pending, the free blocks InsertFree left apart from a free neighbour
  // (uses pending on two streams); returns whether there were any. For a request that found no
  // mapped fit: merging them makes its stream wait for that work on the device instead.
  bool RetryMerges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops free block `b`'s last uses whose work is done (queries).
  void DropDoneUses(Block* b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The free block to carve `size` bytes from: the best fit, unless it needs pages mapped; then
  // the one of a bounded scan of larger blocks with the fewest pages to map (then the smallest).
  // nullptr if none fits; else `*missing` is the pages of the chosen range to map.
  // `*offset`: where in the block to carve from (not 0 only when the start of every fit has a
  // mapping that cannot go yet).
  Block* Place(std::size_t size, std::size_t* missing, std::size_t* offset)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Block* SplitOff(Block* block, std::size_t offset) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Block* Split(Block* block, std::size_t at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr std::size_t kBlocked = ~std::size_t{0};
  // Pages of [addr, addr + size) to map: not mapped, or mapped to a physical page another range
  // uses. kBlocked if such a mapping cannot be removed yet (work through it may be pending).
  std::size_t Missing(const char* addr, std::size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first page-aligned offset in free block `b` from which `size` bytes cross no mapping
  // that cannot go yet; kBlocked if there is none.
  std::size_t ClearOffset(const Block& b, std::size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes `stream` safe to use memory whose last free was free number `epoch` of `last`.
  void OrderAfter(platform::Stream last, std::uint64_t epoch, platform::Stream stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The same for physical page `x`, which `stream` takes through another mapping than the one
  // its last users may have used.
  void OrderAfterPhys(const PhysPage& x, platform::Stream stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After every other stream's frees so far (memory freed on several streams).
  void OrderAfterAllStreams(platform::Stream stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Maps the `missing` (Place's count) pages of [addr, addr + size) that need a physical page,
  // whose pages AddLive pinned; throws BadAlloc when physical pages cannot be had.
  void MapRange(char* addr, std::size_t size, std::size_t request, std::size_t missing,
                platform::Stream stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The BadAlloc of a growth of `pages` pages that the device or the limit refused.
  [[noreturn]] void ThrowOutOfMemory(std::size_t request, std::size_t pages)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `count` physical pages for new mappings on `stream` (indices into phys_), from spares, idle
  // pages borrowed (they keep their old mappings; idle extents make room when there are too
  // few) or the device. Returns false, having put back what it took, when fewer could be had.
  bool TakePhysical(std::size_t count, platform::Stream stream, std::vector<std::int32_t>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives back pages TakePhysical returned and MapRange did not map.
  void PutBack(const std::vector<std::int32_t>& taken) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct ReclaimScan {  // one AllStreamsDone answer per scan, for pages of several streams
    bool mixed_checked = false;
    bool mixed_done = false;
  };
  // Whether the work of a last free (`stream`, `epoch`, `mixed`: freed on several streams) is
  // complete (queries; fences the streams otherwise, so that a later query can say yes).
  bool UseDone(platform::Stream stream, std::uint64_t epoch, bool mixed, ReclaimScan* scan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether every free recorded on physical page `x` (through any mapping) is complete.
  bool PhysDone(const PhysPage& x, ReclaimScan* scan) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the work through the mapping at address page `i` is complete: what removing that
  // mapping needs (work through the physical page's other mappings does not matter).
  bool PageDone(std::size_t i, ReclaimScan* scan) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes up to `count` idle physical pages off the idle list, mappings kept: those whose work
  // is done, and those last freed on `stream` (stream order covers their work); then, if still
  // short, those of pending work on other streams (BorrowPending).
  std::size_t Borrow(std::size_t count, platform::Stream stream, std::vector<std::int32_t>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Borrow's second choice: up to `count` idle physical pages whose last work (on other
  // streams) is pending, `stream` made to wait for that work on the device.
  std::size_t BorrowPending(std::size_t count, platform::Stream stream,
                            std::vector<std::int32_t>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unmaps every mapping of up to `count` idle physical pages whose work is done, into the spare
  // list (extents are given back to the device); records fences for those that are not done
  // yet. Returns how many were unmapped.
  std::size_t ReclaimIdle(std::size_t count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether physical page `x` is also mapped at an address page in [first, i).
  bool MappedBelow(const PhysPage& x, std::size_t first, std::size_t i) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MapAt(std::size_t page, std::int32_t phys) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the mapping of address page `page` (work through it must be complete).
  void Unmap(std::size_t page) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new physical allocation of `pages` pages (not mapped); -1 when the limit or the device
  // refuses it.
  std::int32_t CreatePhys(std::size_t pages = 1) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives physical allocation `y` (mapped nowhere) back to the device.
  void ReleasePhys(std::int32_t y) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `need` more bytes of physical memory would pass the limit or the stitching threshold
  // (Options::stitch_slack_permille above the most pages live blocks touched at once).
  bool ShouldStitch(std::size_t need) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Maps each run of at least two unmapped pages of [first, last] to a new extent; returns the
  // pages mapped (fewer when the device or the limit refuses one: the rest map page by page).
  std::size_t MapExtents(std::size_t first, std::size_t last) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unmaps and gives back idle extents whose work is done, up to `pages` pages or more (the
  // longest idle first); returns the pages given back.
  std::size_t DissolveExtents(std::size_t pages) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnmapExtent(std::int32_t y) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts a block on each page it touches (Page::live), taking idle pages off the idle list and
  // ordering `stream` after work through other mappings of them.
  void AddLive(char* addr, std::size_t size, platform::Stream stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Undoes AddLive for a block that never became live (its mapping failed).
  void UndoLive(char* addr, std::size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Holds (vmm_pool_holds.cc). Hold lists a free block whose pages still count it, after
  // `after` (as old: a part split off it) or as the newest; Unhold unlists it (its pages still
  // count it: it goes live, or the caller uncounts them).
  void Hold(Block* b, Block* after = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unhold(Block* b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unlists held block `b` and uncounts it on its pages, which get its last uses; pages no block
  // counts any more go idle.
  void ReleaseHold(Block* b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases every hold, the oldest first (so that the idle list stays in free order); returns
  // whether there was any. Before anything that needs idle pages: stitching, a growth the device
  // or the limit refused, Release, teardown; and when a placement meets a page that another range
  // may hold (Missing, ClearOffset).
  bool DropHolds() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts [addr, addr + size) as a live block in live_pages_ (the stitching threshold's base):
  // pages strictly inside a block are touched by it alone, so only its first and last pages
  // need a count (Page::active). Constant work, whatever the block's size.
  void Activate(const char* addr, std::size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Deactivate(const char* addr, std::size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LinkIdle(std::int32_t phys) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnlinkIdle(std::int32_t phys) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  StreamState& StateOf(platform::Stream stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a fence on `stream` covering free number `epoch` has completed (query only).
  bool Done(platform::Stream stream, std::uint64_t epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A fence on `stream` covering every free so far (recorded now unless one already does).
  platform::Event Fence(platform::Stream stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a new fence on `stream` (whose state is `s`) covering every free so far.
  platform::Event RecordFence(platform::Stream stream, StreamState& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AllStreamsDone() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  platform::DeviceRuntime* const runtime_;
  const platform::Place place_;
  const Options options_;
  const std::size_t page_;  // the device's VMM granularity (a power of two)
  const int page_shift_;    // log2(page_): page numbers by shift on the hot path
  // The address page holding `addr` (within the reservation).
  std::size_t PageOf(const char* addr) const {
    return static_cast<std::size_t>(addr - base_) >> page_shift_;
  }

  mutable platform::SpinLock mu_;
  char* base_ ABSL_GUARDED_BY(mu_) = nullptr;  // the reservation, once made
  // The block at base_: merges keep the lower block, so it lives as long as the pool.
  Block* first_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::size_t reserved_address_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Page> pages_ ABSL_GUARDED_BY(mu_);
  std::vector<PhysPage> phys_ ABSL_GUARDED_BY(mu_);
  std::vector<std::int32_t> free_phys_ ABSL_GUARDED_BY(mu_);  // unused slots of phys_
  // Idle physical pages (mapped, no live block), the longest idle first; indices into phys_.
  std::int32_t idle_head_ ABSL_GUARDED_BY(mu_) = -1;
  std::int32_t idle_tail_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<std::int32_t> spare_ ABSL_GUARDED_BY(mu_);  // created, mapped nowhere
  std::vector<std::int32_t> taken_ ABSL_GUARDED_BY(mu_);  // MapRange's scratch list
  // Free blocks per region: requests up to kSmallBytes are placed in the first eighth of the
  // address space, larger ones in the rest.
  static constexpr std::uint8_t kSmallRegion = 0, kLargeRegion = 1;
  static constexpr std::size_t kSmallBytes = std::size_t{1} << 20;
  static std::uint8_t RegionFor(std::size_t size) {
    return size <= kSmallBytes ? kSmallRegion : kLargeRegion;
  }
  TlsfIndex<Block> index_[2] ABSL_GUARDED_BY(mu_);
  // Node storage: StateOf's one-entry cache holds a pointer into it.
  absl::node_hash_map<platform::Stream, StreamState> streams_ ABSL_GUARDED_BY(mu_);
  platform::Stream last_stream_ ABSL_GUARDED_BY(mu_);
  StreamState* last_state_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<Block*> spare_records_ ABSL_GUARDED_BY(mu_);
  // Free blocks InsertFree left apart from their next free neighbour (uses pending on two
  // streams), the newest last; bounded (the oldest go: they are the likeliest to merge unaided).
  static constexpr std::size_t kMaxUnmerged = 64;
  std::vector<Block*> unmerged_ ABSL_GUARDED_BY(mu_);
  // Quick reuse: freed blocks parked as they are (not merged, their pages still counted live),
  // the latest last. An allocation of exactly a parked block's size on that block's stream takes
  // the latest such block back with no search, split, merge or page work: stream order covers
  // its last use, and its pages are mapped. Every other allocation, Release, WaitForStreams and
  // teardown file them first (FlushParked), so searches and growth see coalesced blocks.
  static constexpr int kParkCapacity = 16;
  std::array<Block*, kParkCapacity> parked_ ABSL_GUARDED_BY(mu_){};
  int num_parked_ ABSL_GUARDED_BY(mu_) = 0;

  // Free blocks Place weighs beyond the best fit.
  static constexpr int kPlacementScan = 64;
  static constexpr std::uint64_t kFenceEvery = 32;
  std::size_t memory_limit_ ABSL_GUARDED_BY(mu_) = 0;  // Options::memory_limit, or as set
  bool freed_large_ ABSL_GUARDED_BY(mu_) = false;      // a block of a page or more was freed
  std::size_t physical_ ABSL_GUARDED_BY(mu_) = 0;      // bytes created and not released
  std::size_t live_pages_ ABSL_GUARDED_BY(mu_) = 0;    // pages touched by live blocks
  Block* held_head_ ABSL_GUARDED_BY(mu_) = nullptr;    // held free blocks, the oldest first
  Block* held_tail_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Set by Missing and ClearOffset on meeting a page used through another range while blocks
  // are held (the user may be a held free block, whose hold must go for the page to move).
  bool held_conflict_ ABSL_GUARDED_BY(mu_) = false;
  std::size_t live_pages_peak_ ABSL_GUARDED_BY(mu_) = 0;
  std::size_t mapped_ ABSL_GUARDED_BY(mu_) = 0;  // bytes of address space mapped
  std::size_t allocated_ ABSL_GUARDED_BY(mu_) = 0;
  allocation::StatValue segment_ ABSL_GUARDED_BY(mu_){};
  allocation::StatValue reserved_stat_ ABSL_GUARDED_BY(mu_){};
  std::int64_t num_creates_ ABSL_GUARDED_BY(mu_) = 0;
  std::int64_t num_releases_ ABSL_GUARDED_BY(mu_) = 0;
  std::int64_t num_maps_ ABSL_GUARDED_BY(mu_) = 0;
  std::int64_t num_unmaps_ ABSL_GUARDED_BY(mu_) = 0;
  std::int64_t num_waits_ ABSL_GUARDED_BY(mu_) = 0;
  std::int64_t num_sync_all_ ABSL_GUARDED_BY(mu_) = 0;  // WaitForStreams calls that waited
};

}  // namespace strata::strategies
