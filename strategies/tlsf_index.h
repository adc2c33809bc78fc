// TlsfIndex: an index of free blocks by size, for best-fit pools (TLSF: two-level segregated fit).
// Blocks live in per-size-class doubly linked lists ("buckets"); a first-level bitmap (one bit per
// power of two) and second-level bitmaps (kSlCount linear steps within each power of two) say
// which buckets are non-empty, so finding the first bucket that can hold a size is two
// find-first-set instructions.
//
// Contract
// - Intrusive: Node derives from TlsfHook<Node> (the list links and the bucket, valid while
//   indexed) and has `std::size_t size() const`. The index never allocates, owns no node and
//   reads a node's size only in Insert, Refile and FindBestFit.
// - Not thread safe: the owner serializes every call.
// - Order: Insert and Refile put the node at the head of its bucket, so among blocks of one
//   bucket the most recently filed is seen first (the owner's placement depends on this order).
// - Throws nothing. Sizes up to 2^64 - 1 are indexable; size 0 maps to the first bucket.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "absl/base/attributes.h"

namespace strata::strategies {

template <typename Node>
struct TlsfHook {
  Node* tlsf_prev = nullptr;  // bucket list links, while indexed
  Node* tlsf_next = nullptr;
  int tlsf_fl = 0;  // the bucket, while indexed
  int tlsf_sl = 0;
};

template <typename Node>
class TlsfIndex {
 public:
  // Geometry: first level = power of two, second level = 2^kSlLog2 linear steps within it.
  static constexpr int kSlLog2 = 5;
  static constexpr int kSlCount = 1 << kSlLog2;
  static constexpr int kFlCount = 64 - kSlLog2 + 1;
  // How many entries of one bucket FindBestFit looks at before moving on to the next bucket
  // (whose blocks all fit). Bounds the search; lists are short in practice.
  static constexpr int kScanLimit = 32;

  struct Bucket {
    int fl, sl;
  };
  // Sizes below kSlCount map linearly to first level 0; otherwise the first level is the power of
  // two and the second level the kSlLog2 bits below the leading one.
  ABSL_ATTRIBUTE_ALWAYS_INLINE static Bucket MapSize(std::size_t s) {
    if (s < static_cast<std::size_t>(kSlCount)) return {0, static_cast<int>(s)};
    const int msb = 63 - __builtin_clzll(s);
    return {msb - kSlLog2 + 1, static_cast<int>(s >> (msb - kSlLog2)) - kSlCount};
  }
  // The smallest size that maps to (fl, sl).
  static std::size_t BucketLow(int fl, int sl) {
    if (fl == 0) return static_cast<std::size_t>(sl);
    return static_cast<std::size_t>(kSlCount + sl) << (fl - 1);
  }

  // Buckets in order: a bucket's ordinal is fl * kSlCount + sl (smaller sizes first).
  static constexpr int kNoBucket = std::numeric_limits<int>::max();
  static int Ordinal(Bucket b) { return b.fl * kSlCount + b.sl; }
  static Bucket BucketOf(const Node* node) { return {node->tlsf_fl, node->tlsf_sl}; }

  bool empty() const { return fl_bitmap_ == 0; }
  // Counts the calls that changed the index: an answer derived from it stays valid while this
  // does not change.
  std::uint64_t changes() const { return changes_; }
  // Whether `node` (indexed) is the only node of its bucket.
  static bool Alone(const Node* node) {
    return node->tlsf_prev == nullptr && node->tlsf_next == nullptr;
  }

  // The ordinal of the first non-empty bucket at or after `b` (whose sl may be kSlCount: the
  // next first level's first bucket); kNoBucket if none.
  int FirstNonEmpty(Bucket b) const { return SeekNonEmpty(&b) ? Ordinal(b) : kNoBucket; }

  // Files `node` (not indexed) under its size.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Insert(Node* node) { Link(node, MapSize(node->size())); }

  // Takes `node` (indexed) out of the index.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Remove(Node* node) {
    Unlink(node);
    node->tlsf_prev = node->tlsf_next = nullptr;
  }

  // `node` (indexed) has changed size: refiles it at the head of its new size's bucket, as a
  // Remove + Insert would, but without touching the bitmaps when the bucket stays the same.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Refile(Node* node) {
    ++changes_;
    const Bucket b = MapSize(node->size());
    if (b.fl != node->tlsf_fl || b.sl != node->tlsf_sl) {
      Unlink(node);
      Link(node, b);
      return;
    }
    Node* prev = node->tlsf_prev;
    if (prev == nullptr) return;  // already the head
    prev->tlsf_next = node->tlsf_next;
    if (node->tlsf_next != nullptr) node->tlsf_next->tlsf_prev = prev;
    Node*& head = heads_[b.fl][b.sl];
    node->tlsf_prev = nullptr;
    node->tlsf_next = head;
    head->tlsf_prev = node;
    head = node;
  }

  // Best fit among blocks of size in [size, max_size]: the smallest such block of the first
  // bucket (from size's own) that holds one, scanning at most kScanLimit entries per bucket;
  // nullptr if none. Buckets above size's own hold only fitting blocks, so this is usually one or
  // two bitmap lookups and a short scan.
  ABSL_ATTRIBUTE_ALWAYS_INLINE Node* FindBestFit(
      std::size_t size, std::size_t max_size = std::numeric_limits<std::size_t>::max()) const {
    Bucket b = MapSize(size);
    while (SeekNonEmpty(&b)) {
      if (BucketLow(b.fl, b.sl) > max_size) return nullptr;
      Node* best = nullptr;
      std::size_t best_size = std::numeric_limits<std::size_t>::max();
      int scanned = 0;
      for (Node* n = heads_[b.fl][b.sl]; n != nullptr && scanned < kScanLimit;
           n = n->tlsf_next, ++scanned) {
        const std::size_t ns = n->size();
        if (ns < size || ns > max_size) continue;
        if (ns < best_size) {
          best = n;
          best_size = ns;
          if (ns == size) break;
        }
      }
      if (best != nullptr) return best;
      ++b.sl;
    }
    return nullptr;
  }

  // Visits up to `limit` indexed blocks of at least `size` bytes, bucket by bucket from size's
  // own (smaller sizes first; within a bucket, head first), until `visit(node)` returns true.
  // For placement that weighs more than size; FindBestFit is the fast path.
  template <typename Visit>
  void VisitFits(std::size_t size, int limit, Visit&& visit) const {
    const Bucket at = MapSize(size);
    for (int ord = FirstNonEmpty(at); ord != kNoBucket && limit > 0;) {
      const int fl = ord / kSlCount, sl = ord % kSlCount;
      for (Node* n = heads_[fl][sl]; n != nullptr && limit > 0; n = n->tlsf_next) {
        if (n->size() < size) continue;
        --limit;
        if (visit(n)) return;
      }
      ord = FirstNonEmpty({fl, sl + 1});
    }
  }

 private:
  static_assert(kSlLog2 <= 5, "second-level bitmaps are 32 bits");

  ABSL_ATTRIBUTE_ALWAYS_INLINE void Link(Node* node, Bucket b) {
    ++changes_;
    Node*& head = heads_[b.fl][b.sl];
    node->tlsf_fl = b.fl;
    node->tlsf_sl = b.sl;
    node->tlsf_prev = nullptr;
    node->tlsf_next = head;
    if (head != nullptr) head->tlsf_prev = node;
    head = node;
    sl_bitmap_[b.fl] |= std::uint32_t{1} << b.sl;
    fl_bitmap_ |= std::uint64_t{1} << b.fl;
  }

  // Moves `b` to the first non-empty bucket at or after it (b->sl may be kSlCount: the next
  // first level's first bucket); false if there is none.
  ABSL_ATTRIBUTE_ALWAYS_INLINE bool SeekNonEmpty(Bucket* b) const {
    if (b->sl == kSlCount) {
      b->sl = 0;
      if (++b->fl == kFlCount) return false;
    }
    std::uint32_t sl_map = sl_bitmap_[b->fl] & (~std::uint32_t{0} << b->sl);
    if (sl_map == 0) {
      const std::uint64_t fl_map =
          b->fl + 1 < 64 ? fl_bitmap_ & (~std::uint64_t{0} << (b->fl + 1)) : 0;
      if (fl_map == 0) return false;
      b->fl = __builtin_ctzll(fl_map);
      sl_map = sl_bitmap_[b->fl];
    }
    b->sl = __builtin_ctz(sl_map);
    return true;
  }

  ABSL_ATTRIBUTE_ALWAYS_INLINE void Unlink(Node* node) {
    ++changes_;
    const int fl = node->tlsf_fl, sl = node->tlsf_sl;
    if (node->tlsf_prev != nullptr) {
      node->tlsf_prev->tlsf_next = node->tlsf_next;
    } else {
      heads_[fl][sl] = node->tlsf_next;
      if (node->tlsf_next == nullptr) {
        sl_bitmap_[fl] &= ~(std::uint32_t{1} << sl);
        if (sl_bitmap_[fl] == 0) fl_bitmap_ &= ~(std::uint64_t{1} << fl);
      }
    }
    if (node->tlsf_next != nullptr) node->tlsf_next->tlsf_prev = node->tlsf_prev;
  }

  std::uint64_t changes_ = 0;
  std::uint64_t fl_bitmap_ = 0;
  std::array<std::uint32_t, kFlCount> sl_bitmap_{};
  std::array<std::array<Node*, kSlCount>, kFlCount> heads_{};
};

}  // namespace strata::strategies
