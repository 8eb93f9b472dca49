#include "pipeline/slot_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace ringloader {
namespace {

TEST(SlotPoolTest, GrowsToBaseThenWaitsForRecycle) {
  auto pool = std::make_shared<SlotPool>(MakeHostAllocator(), 1000, 2, 4);
  std::atomic<bool> cancel{false};
  auto a = pool->Acquire(cancel), b = pool->Acquire(cancel);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(pool->allocated(), 2);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pool->data(*a)) % 4096, 0u) << "slots are page aligned";
  std::atomic<int> third{-1};
  std::thread waiter([&] { third = *pool->Acquire(cancel); });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(third.load(), -1) << "no growth past base while the consumer holds nothing";
  pool->Recycle(*a);
  waiter.join();
  EXPECT_EQ(third.load(), *a);
  EXPECT_EQ(pool->allocated(), 2);
}

TEST(SlotPoolTest, HeldSlotsAllowBoundedGrowthThenExhaust) {
  auto pool = std::make_shared<SlotPool>(MakeHostAllocator(), 64, 2, 3);
  std::atomic<bool> cancel{false};
  std::vector<std::shared_ptr<SlotLease>> held;
  for (int i = 0; i < 3; ++i) {
    auto slot = pool->Acquire(cancel);
    ASSERT_TRUE(slot.ok());
    held.push_back(pool->Deliver(*slot));
  }
  EXPECT_EQ(pool->allocated(), 3);
  EXPECT_TRUE(pool->Exhausted());
  held.pop_back();  // the consumer drops one batch: its slot is free again
  EXPECT_FALSE(pool->Exhausted());
  auto again = pool->Acquire(cancel);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(pool->allocated(), 3);
}

TEST(SlotPoolTest, CancelWakesWaiter) {
  auto pool = std::make_shared<SlotPool>(MakeHostAllocator(), 64, 1, 1);
  std::atomic<bool> cancel{false};
  ASSERT_TRUE(pool->Acquire(cancel).ok());
  absl::Status result;
  std::thread waiter([&] { result = pool->Acquire(cancel).status(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  cancel = true;
  pool->Wake();
  waiter.join();
  EXPECT_TRUE(absl::IsCancelled(result)) << result;
}

TEST(SlotPoolTest, LeaseOutlivesOwnerReference) {
  std::shared_ptr<SlotLease> lease;
  {
    auto pool = std::make_shared<SlotPool>(MakeHostAllocator(), 128, 1, 2);
    std::atomic<bool> cancel{false};
    lease = pool->Deliver(*pool->Acquire(cancel));
    std::memset(lease->data(), 7, 128);
  }
  // The pool is kept alive by the lease: its memory is still valid.
  EXPECT_EQ(lease->data()[127], 7);
  lease.reset();
}

}  // namespace
}  // namespace ringloader
