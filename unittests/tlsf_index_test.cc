#include "strategies/tlsf_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <utility>
#include <vector>

namespace strata::strategies {
namespace {

struct Node : TlsfHook<Node> {
  explicit Node(std::size_t s) : bytes(s) {}
  std::size_t size() const { return bytes; }
  std::size_t bytes;
};

using Index = TlsfIndex<Node>;

TEST(TlsfIndexTest, MapSizeIsMonotonicAndBucketLowIsItsInverse) {
  EXPECT_EQ(Index::Ordinal(Index::MapSize(0)), 0);
  int last = -1;
  for (std::size_t s :
       {std::size_t{0}, std::size_t{1}, std::size_t{31}, std::size_t{32}, std::size_t{33},
        std::size_t{63}, std::size_t{64}, std::size_t{512}, std::size_t{1000}, std::size_t{4096},
        std::size_t{1} << 20, (std::size_t{1} << 20) + 1, std::size_t{20} << 20,
        std::size_t{1} << 60, std::numeric_limits<std::size_t>::max()}) {
    const Index::Bucket b = Index::MapSize(s);
    ASSERT_GE(b.fl, 0);
    ASSERT_LT(b.fl, Index::kFlCount);
    ASSERT_GE(b.sl, 0);
    ASSERT_LT(b.sl, Index::kSlCount);
    EXPECT_GE(Index::Ordinal(b), last) << s;
    last = Index::Ordinal(b);
    EXPECT_LE(Index::BucketLow(b.fl, b.sl), s) << s;
    // BucketLow is the first size of the bucket.
    const std::size_t low = Index::BucketLow(b.fl, b.sl);
    EXPECT_EQ(Index::Ordinal(Index::MapSize(low)), Index::Ordinal(b)) << s;
    if (low > 0) {
      EXPECT_LT(Index::Ordinal(Index::MapSize(low - 1)), Index::Ordinal(b)) << s;
    }
  }
  // Second level: 32 linear steps per power of two.
  EXPECT_EQ(Index::Ordinal(Index::MapSize(1024 + 32)), Index::Ordinal(Index::MapSize(1024)) + 1);
  EXPECT_EQ(Index::Ordinal(Index::MapSize(1024 + 31)), Index::Ordinal(Index::MapSize(1024)));
}

TEST(TlsfIndexTest, FindsTheSmallestFittingBlock) {
  Index index;
  EXPECT_TRUE(index.empty());
  EXPECT_EQ(index.FindBestFit(1), nullptr);
  Node a(4096), b(1 << 20), c(8192), d(5000);
  for (Node* n : {&a, &b, &c, &d}) index.Insert(n);
  EXPECT_FALSE(index.empty());
  EXPECT_EQ(index.FindBestFit(1), &a);
  EXPECT_EQ(index.FindBestFit(4096), &a);
  EXPECT_EQ(index.FindBestFit(4097), &d);  // 5000 shares a bucket with nothing smaller
  EXPECT_EQ(index.FindBestFit(5001), &c);
  EXPECT_EQ(index.FindBestFit(8193), &b);
  EXPECT_EQ(index.FindBestFit((1 << 20) + 1), nullptr);
  // max_size: nothing in [4097, 4999].
  EXPECT_EQ(index.FindBestFit(4097, 4999), nullptr);
  EXPECT_EQ(index.FindBestFit(4097, 8192), &d);
  index.Remove(&d);
  EXPECT_EQ(index.FindBestFit(4097), &c);
  for (Node* n : {&a, &b, &c}) index.Remove(n);
  EXPECT_TRUE(index.empty());
  EXPECT_EQ(index.FindBestFit(1), nullptr);
}

TEST(TlsfIndexTest, BestFitWithinOneBucketAndHeadFirstOrder) {
  Index index;
  // 1024 .. 1055 share a bucket (step 32 above 1024).
  Node big(1050), exact(1030), small(1025), other(1030);
  for (Node* n : {&big, &exact, &small}) index.Insert(n);
  EXPECT_EQ(index.FindBestFit(1026), &exact);
  EXPECT_EQ(index.FindBestFit(1024), &small);
  index.Insert(&other);  // same size, filed later: seen first
  EXPECT_EQ(index.FindBestFit(1030), &other);
  EXPECT_TRUE(Index::Alone(&big) == false);
  EXPECT_EQ(index.FirstNonEmpty(Index::MapSize(1)), Index::Ordinal(Index::BucketOf(&big)));
}

TEST(TlsfIndexTest, RefileMovesToTheNewBucketOrToTheHead) {
  Index index;
  Node a(1024), b(1030), c(1 << 16);
  for (Node* n : {&a, &b, &c}) index.Insert(n);  // bucket of 1024: b, a
  EXPECT_EQ(index.FindBestFit(1024), &a);
  const auto changes = index.changes();
  // Same bucket: a moves to the head, so among equal sizes it is seen first.
  a.bytes = 1030;
  index.Refile(&a);
  EXPECT_GT(index.changes(), changes);
  EXPECT_EQ(index.FindBestFit(1030), &a);
  // Another bucket: the old one keeps b only, the new one holds a.
  a.bytes = 1 << 15;
  index.Refile(&a);
  EXPECT_EQ(index.FindBestFit(1024), &b);
  b.bytes = 2;
  index.Refile(&b);
  EXPECT_EQ(index.FindBestFit(3), &a);
  EXPECT_EQ(index.FindBestFit(2), &b);
  EXPECT_TRUE(Index::Alone(&a));
  for (Node* n : {&a, &b, &c}) index.Remove(n);
  EXPECT_TRUE(index.empty());
}

TEST(TlsfIndexTest, FirstNonEmpty) {
  Index index;
  EXPECT_EQ(index.FirstNonEmpty({0, 0}), Index::kNoBucket);
  Node a(4096), b(1 << 20);
  index.Insert(&a);
  index.Insert(&b);
  const int at_a = Index::Ordinal(Index::BucketOf(&a));
  const int at_b = Index::Ordinal(Index::BucketOf(&b));
  EXPECT_EQ(index.FirstNonEmpty({0, 0}), at_a);
  EXPECT_EQ(index.FirstNonEmpty(Index::BucketOf(&a)), at_a);
  EXPECT_EQ(index.FirstNonEmpty({a.tlsf_fl, a.tlsf_sl + 1}), at_b);
  EXPECT_EQ(index.FirstNonEmpty({a.tlsf_fl, Index::kSlCount}), at_b);  // the next first level
  EXPECT_EQ(index.FirstNonEmpty({b.tlsf_fl, b.tlsf_sl + 1}), Index::kNoBucket);
}

// Against a sorted model: with at most kScanLimit blocks indexed (so per bucket), FindBestFit is
// exact best fit (the smallest block >= size, if that is <= max_size).
TEST(TlsfIndexTest, RandomizedAgainstModel) {
  std::mt19937_64 rng(7);
  std::vector<std::unique_ptr<Node>> nodes;
  std::multiset<std::size_t> model;
  std::vector<Node*> indexed;
  Index index;
  auto random_size = [&] { return std::size_t{1} << (rng() % 24) | (rng() % 4096); };
  for (int step = 0; step < 20000; ++step) {
    int op = static_cast<int>(rng() % 4);
    if (op == 0 && indexed.size() == Index::kScanLimit) op = 1;
    if (op == 0 || indexed.empty()) {
      nodes.push_back(std::make_unique<Node>(random_size()));
      index.Insert(nodes.back().get());
      indexed.push_back(nodes.back().get());
      model.insert(nodes.back()->bytes);
    } else if (op == 1) {
      const std::size_t k = rng() % indexed.size();
      model.erase(model.find(indexed[k]->bytes));
      index.Remove(indexed[k]);
      std::swap(indexed[k], indexed.back());
      indexed.pop_back();
    } else if (op == 2) {
      Node* n = indexed[rng() % indexed.size()];
      model.erase(model.find(n->bytes));
      n->bytes = random_size();
      model.insert(n->bytes);
      index.Refile(n);
    } else {
      const std::size_t size = random_size();
      const std::size_t max_size =
          rng() % 2 ? std::numeric_limits<std::size_t>::max() : size + rng() % (size + 1);
      Node* found = index.FindBestFit(size, max_size);
      auto it = model.lower_bound(size);
      if (it == model.end() || *it > max_size) {
        ASSERT_EQ(found, nullptr) << step;
      } else {
        ASSERT_NE(found, nullptr) << step;
        ASSERT_EQ(found->bytes, *it) << step;
      }
    }
    ASSERT_EQ(index.empty(), model.empty());
  }
}

}  // namespace
}  // namespace strata::strategies
