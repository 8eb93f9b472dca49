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

TEST(SlotPoolTest, GrowBaseWakesTheWaitingDispatcherAndStopsAtTheCap) {
  auto pool = std::make_shared<SlotPool>(MakeHostAllocator(), 64, 1, 3);
  std::atomic<bool> cancel{false};
  ASSERT_TRUE(pool->Acquire(cancel).ok());
  EXPECT_EQ(pool->TakeProducerWaits(), 0);
  std::atomic<int> second{-1};
  std::thread waiter([&] { second = *pool->Acquire(cancel); });
  // The waiter counts its wait before it sleeps; wait for that state, not for a clock.
  while (pool->producer_waits() == 0) std::this_thread::yield();
  EXPECT_TRUE(pool->GrowBase(2));
  waiter.join();
  EXPECT_EQ(second.load(), 1);
  EXPECT_EQ(pool->allocated(), 2);
  EXPECT_EQ(pool->TakeProducerWaits(), 1);
  EXPECT_EQ(pool->TakeProducerWaits(), 0) << "taken: reset";
  EXPECT_FALSE(pool->GrowBase(2)) << "at the cap";
  EXPECT_TRUE(pool->GrowBase(10));
  EXPECT_FALSE(pool->GrowBase(10)) << "never past max_slots";
  EXPECT_EQ(pool->base_slots(), 3);
}

TEST(PrefetchGovernorTest, GrowsOnlyWhenTheConsumerWaitsAfterThePipelineStoodIdle) {
  PrefetchGovernor g;
  // A loader slower than the consumer: batches are never ready ahead, the pipeline never idles.
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(g.OnNext(/*batch_ready=*/false, /*pipeline_idle=*/false));
  // A consumer slower than the loader: batches are always ready; idle, but no one waits.
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(g.OnNext(true, true));
  // ... then momentarily faster: it drains what was banked and has to wait: grow once.
  EXPECT_FALSE(g.OnNext(true, false));
  EXPECT_TRUE(g.OnNext(false, false));
  EXPECT_FALSE(g.OnNext(false, false)) << "one step per idle spell";
  // Idle seen at the very call that waits (every started batch complete, no slot: the batch
  // asked for is not started yet).
  EXPECT_TRUE(g.OnNext(false, true));
  g.OnNext(true, true);
  g.Reset();  // a new epoch forgets the last one's idle spell
  EXPECT_FALSE(g.OnNext(false, false));
}

}  // namespace
}  // namespace ringloader
