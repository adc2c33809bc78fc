#include "platform/thread_local_slots.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace strata::platform {
namespace {

// A registry that hands out numbered objects and counts what comes back.
struct TestRegistry {
  std::mutex mu;
  std::vector<std::unique_ptr<int>> objects;
  std::atomic<int> acquired{0}, returned{0};
  std::atomic<bool> dead{false};

  int* Acquire() {
    std::lock_guard<std::mutex> lock(mu);
    objects.push_back(std::make_unique<int>(static_cast<int>(objects.size())));
    acquired.fetch_add(1);
    return objects.back().get();
  }
  void Return(int*) { returned.fetch_add(1); }
  bool Dead() const { return dead.load(); }
};

struct Tag {};
using Slots = ThreadLocalSlots<Tag, TestRegistry, int>;

std::atomic<std::uint64_t> next_id{1};

struct Instance {
  std::shared_ptr<TestRegistry> registry = std::make_shared<TestRegistry>();
  const std::uint64_t id = next_id.fetch_add(1);
  int* Get() const { return Slots::Get(id, registry); }
};

TEST(ThreadLocalSlotsTest, OneObjectPerThreadAndInstanceHandedBackAtThreadExit) {
  Instance a, b;
  int* mine_a = a.Get();
  int* mine_b = b.Get();
  ASSERT_NE(mine_a, nullptr);
  ASSERT_NE(mine_b, nullptr);
  // More instances than the recent array holds: the older ones come from the list again.
  std::vector<Instance> many(6);
  for (const Instance& i : many) ASSERT_NE(i.Get(), nullptr);
  EXPECT_EQ(a.Get(), mine_a);
  EXPECT_EQ(b.Get(), mine_b);
  EXPECT_EQ(Slots::Recent(a.id), nullptr) << "b was used last";
  EXPECT_EQ(Slots::Recent(b.id), mine_b);
  EXPECT_EQ(a.registry->acquired.load(), 1);

  int* theirs = nullptr;
  std::thread([&] {
    theirs = a.Get();
    EXPECT_EQ(a.Get(), theirs);
  }).join();
  EXPECT_NE(theirs, mine_a);
  EXPECT_EQ(a.registry->acquired.load(), 2);
  EXPECT_EQ(a.registry->returned.load(), 1) << "the exited thread's object came back";
  EXPECT_EQ(b.registry->returned.load(), 0);
}

TEST(ThreadLocalSlotsTest, ALongLivedThreadDropsTheObjectsOfDeadRegistries) {
  std::thread([] {
    auto dying = std::make_unique<Instance>();
    std::shared_ptr<TestRegistry> registry = dying->registry;
    ASSERT_NE(dying->Get(), nullptr);
    registry->dead = true;
    dying.reset();
    EXPECT_EQ(registry->returned.load(), 0);
    Instance next;  // acquiring for a new instance drops the dead one's entry
    ASSERT_NE(next.Get(), nullptr);
    EXPECT_EQ(registry->returned.load(), 1);
    EXPECT_EQ(registry.use_count(), 1) << "the thread no longer holds the dead registry";
  }).join();
}

// Destroyed after the thread's list (constructed before it): sees the thread as exited.
struct LateUser {
  const Instance* instance = nullptr;
  int** seen = nullptr;
  ~LateUser() {
    if (instance != nullptr) *seen = instance->Get();
  }
};

TEST(ThreadLocalSlotsTest, LookupsAfterTheThreadsListIsGoneReturnNull) {
  Instance a;
  int sentinel = 0;
  int* seen = &sentinel;
  std::thread([&] {
    thread_local LateUser late;  // constructed first, so destroyed last
    late.instance = &a;
    late.seen = &seen;
    ASSERT_NE(a.Get(), nullptr);
  }).join();
  EXPECT_EQ(seen, nullptr);
  EXPECT_EQ(a.registry->returned.load(), 1);
}

}  // namespace
}  // namespace strata::platform
