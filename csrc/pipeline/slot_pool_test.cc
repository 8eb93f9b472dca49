#include "pipeline/slot_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "memory/decode_budget.h"

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

// Variable-size outputs live beside their slot: taken ones belong to the taker, the others are
// freed (their grant returned) when the slot comes back, before a new batch can use it.
TEST(SlotPoolTest, OutputsNotTakenAreFreedWithTheirSlot) {
  auto budget = std::make_shared<DecodeBudget>(1 << 20);
  auto pool = std::make_shared<SlotPool>(MakeHostAllocator(), 64, 2, 2);
  std::atomic<bool> cancel{false};
  auto output = [&](int slot) {
    auto grant = budget->AcquireOutput(1000, "test output", &cancel);
    EXPECT_TRUE(grant.ok());
    SampleOutput out;
    out.hold = std::make_shared<DecodeBudget::Grant>(*std::move(grant));
    out.bytes = 1000;
    return pool->AddOutput(slot, std::move(out));
  };
  auto a = pool->Acquire(cancel);
  ASSERT_TRUE(a.ok());
  const uint64_t first = output(*a), second = output(*a);
  EXPECT_NE(first, 0u);
  EXPECT_NE(first, second);
  EXPECT_EQ(budget->counts().output_bytes, 2000u);
  std::shared_ptr<SlotLease> lease = pool->Deliver(*a);
  std::optional<SampleOutput> taken = pool->TakeOutput(first);
  ASSERT_TRUE(taken.has_value());
  EXPECT_FALSE(pool->TakeOutput(first).has_value()) << "an output is taken once";
  lease.reset();  // the consumer drops the batch: the output it did not take is freed
  EXPECT_EQ(pool->outputs_held(), 0u);
  EXPECT_FALSE(pool->TakeOutput(second).has_value());
  EXPECT_EQ(budget->counts().output_bytes, 1000u) << "the taken output is still charged";
  taken.reset();
  EXPECT_EQ(budget->counts().output_bytes, 0u);
  // An undelivered batch's outputs go with its recycled slot too.
  auto b = pool->Acquire(cancel);
  ASSERT_TRUE(b.ok());
  output(*b);
  pool->Recycle(*b);
  EXPECT_EQ(pool->outputs_held(), 0u);
  EXPECT_EQ(budget->counts().output_bytes, 0u);
}

// An output never fits beside the slots: refused at once, naming max_memory; one that fits
// later (an output the consumer holds is dropped) waits for room, and a cancel ends the wait.
TEST(SlotPoolTest, OutputsWaitForRoomOrAreRefusedWhenTheyCanNeverFit) {
  DecodeBudget budget(10000);
  std::atomic<bool> cancel{false};
  absl::StatusOr<DecodeBudget::Grant> huge = budget.AcquireOutput(20000, "its output", &cancel);
  ASSERT_TRUE(absl::IsResourceExhausted(huge.status()));
  EXPECT_TRUE(absl::StrContains(huge.status().message(), "Raise max_memory=")) << huge.status();
  absl::StatusOr<DecodeBudget::Grant> held = budget.AcquireOutput(8000, "its output", &cancel);
  ASSERT_TRUE(held.ok());
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    absl::StatusOr<DecodeBudget::Grant> next = budget.AcquireOutput(5000, "its output", &cancel);
    got = next.ok();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got.load()) << "waits while the held output leaves too little room";
  held->Release();
  waiter.join();
  EXPECT_TRUE(got.load());
  absl::StatusOr<DecodeBudget::Grant> again = budget.AcquireOutput(8000, "its output", &cancel);
  ASSERT_TRUE(again.ok());
  std::thread cancelled([&] {
    EXPECT_TRUE(absl::IsCancelled(budget.AcquireOutput(5000, "its output", &cancel).status()));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  cancel = true;
  cancelled.join();
}

TEST(SlotPoolTest, TheOutputOfTheBatchDueNeverWaitsForLaterBatches) {
  // Later batches' outputs, decoded ahead, hold the whole budget and are freed only after the
  // batch due is delivered: its outputs must not wait for them (they would wait forever).
  DecodeBudget budget(10000);
  std::atomic<bool> cancel{false};
  absl::StatusOr<DecodeBudget::Grant> ahead = budget.AcquireOutput(9000, "its output", &cancel);
  ASSERT_TRUE(ahead.ok());
  std::atomic<int64_t> due_batch{3};
  absl::StatusOr<DecodeBudget::Grant> due =
      budget.AcquireOutput(5000, "its output", &cancel, [&] { return 3 <= due_batch.load(); });
  ASSERT_TRUE(due.ok()) << due.status();
  EXPECT_EQ(budget.counts().output_bytes, 14000u);
  EXPECT_EQ(budget.counts().outputs_over_budget, 1u);
  // A batch further on waits, until it is the one due.
  std::atomic<bool> got{false};
  std::thread later([&] {
    got = budget.AcquireOutput(5000, "its output", &cancel, [&] { return 4 <= due_batch.load(); }).ok();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got.load()) << "a batch not yet due waits for room";
  due_batch = 4;
  later.join();
  EXPECT_TRUE(got.load());
}

// A dropped output's buffer is kept for the next output of up to its size (no fresh pages to
// fault in), charged while kept; outputs in use and kept never exceed the most the outputs in
// use held at once, nor max_memory beside the slots: kept buffers give way to new outputs.
TEST(SlotPoolTest, ADroppedOutputsBufferIsReusedWithinThePeakAndTheBudget) {
  DecodeBudget budget(100000);
  std::atomic<bool> cancel{false};
  absl::StatusOr<DecodeBudget::Grant> a = budget.AcquireOutputBuffer(1000, "its output", &cancel);
  absl::StatusOr<DecodeBudget::Grant> b = budget.AcquireOutputBuffer(3000, "its output", &cancel);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_NE(a->data(), nullptr);
  std::memset(a->data(), 7, 1000);
  const uint8_t* first = a->data();
  EXPECT_EQ(budget.counts().output_bytes, 4000u);
  EXPECT_EQ(budget.counts().peak_output_bytes, 4000u);
  a->Release();
  EXPECT_EQ(budget.counts().kept_bytes, 1000u) << "kept: 3000 in use + 1000 kept <= the peak";
  EXPECT_EQ(budget.counts().output_bytes, 3000u);
  // A smaller output (at least half the buffer) takes the kept buffer, charged for all of it.
  absl::StatusOr<DecodeBudget::Grant> c = budget.AcquireOutputBuffer(800, "its output", &cancel);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->data(), first);
  EXPECT_EQ(c->data()[999], 7) << "the earlier output's pixels: the render overwrites its part";
  EXPECT_EQ(budget.counts().outputs_reused, 1);
  EXPECT_EQ(budget.counts().output_bytes, 4000u);
  EXPECT_EQ(budget.counts().kept_bytes, 0u);
  c->Release();
  b->Release();
  EXPECT_EQ(budget.counts().kept_bytes, 4000u);
  EXPECT_EQ(budget.counts().output_bytes, 0u);
  // Too small for either kept buffer (over twice its size): a new one; 400 in use and 4000
  // kept would pass the peak, so the largest kept buffer is freed.
  absl::StatusOr<DecodeBudget::Grant> d = budget.AcquireOutputBuffer(400, "its output", &cancel);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(budget.counts().outputs_reused, 1);
  EXPECT_EQ(budget.counts().output_bytes, 400u);
  EXPECT_EQ(budget.counts().kept_bytes, 1000u);
  EXPECT_LE(budget.counts().output_bytes + budget.counts().kept_bytes, 4000u);

  // max_memory: a kept buffer makes room at once for a larger output, which never waits for it.
  DecodeBudget small(10000);
  absl::StatusOr<DecodeBudget::Grant> x = small.AcquireOutputBuffer(6000, "its output", &cancel);
  ASSERT_TRUE(x.ok());
  x->Release();
  EXPECT_EQ(small.counts().kept_bytes, 6000u);
  absl::StatusOr<DecodeBudget::Grant> y = small.AcquireOutputBuffer(9000, "its output", &cancel);
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(small.counts().kept_bytes, 0u);
  EXPECT_EQ(small.counts().output_waits, 0);
  std::memset(y->data(), 1, 9000);  // the whole size asked for is there
  y->Release();
  EXPECT_EQ(small.counts().kept_bytes, 9000u);
  // Kept, not held: an output that needs the room frees it.
  absl::StatusOr<DecodeBudget::Grant> z = small.AcquireOutput(5000, "its output", &cancel);
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(small.counts().kept_bytes, 0u);
}

// A kept buffer of mapped pages serves an output of any size: shrunk for a smaller one (over
// twice smaller), grown for a larger one, its pixels kept; only a buffer with none kept is new.
TEST(SlotPoolTest, AKeptMappedBufferIsShrunkOrGrownForTheNextOutput) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  DecodeBudget budget(uint64_t{1} << 30);
  std::atomic<bool> cancel{false};
  absl::StatusOr<DecodeBudget::Grant> a = budget.AcquireOutputBuffer(8 * kMiB, "its output", &cancel);
  ASSERT_TRUE(a.ok());
  std::memset(a->data(), 5, 8 * kMiB);
  a->Release();
  EXPECT_EQ(budget.counts().outputs_new, 1);
  EXPECT_EQ(budget.counts().kept_bytes, 8 * kMiB);
  // Over twice smaller: the kept buffer, shrunk to the output's size and charged for it.
  absl::StatusOr<DecodeBudget::Grant> b = budget.AcquireOutputBuffer(2 * kMiB, "its output", &cancel);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(budget.counts().outputs_reused, 1);
  EXPECT_EQ(budget.counts().outputs_new, 1);
  EXPECT_EQ(budget.counts().output_bytes, 2 * kMiB);
  EXPECT_EQ(budget.counts().kept_bytes, 0u);
  EXPECT_EQ(b->data()[2 * kMiB - 1], 5) << "the same pages";
  b->Release();
  EXPECT_EQ(budget.counts().kept_bytes, 2 * kMiB);
  // Larger than every kept buffer: the largest grown, its first pages kept, the rest new and
  // writable; charged for the new size, within the peak (8 MiB).
  absl::StatusOr<DecodeBudget::Grant> c = budget.AcquireOutputBuffer(6 * kMiB, "its output", &cancel);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(budget.counts().outputs_reused, 2);
  EXPECT_EQ(budget.counts().outputs_new, 1);
  EXPECT_EQ(budget.counts().output_bytes, 6 * kMiB);
  EXPECT_EQ(budget.counts().kept_bytes, 0u);
  EXPECT_EQ(c->data()[0], 5);
  EXPECT_EQ(c->data()[2 * kMiB - 1], 5);
  std::memset(c->data(), 9, 6 * kMiB);
  EXPECT_EQ(c->data()[6 * kMiB - 1], 9);
  c->Release();
  // An output under 1 MiB never takes a large kept buffer shrunk: a new one, the pages kept.
  absl::StatusOr<DecodeBudget::Grant> d = budget.AcquireOutputBuffer(1000, "its output", &cancel);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(budget.counts().outputs_new, 2);
  EXPECT_EQ(budget.counts().kept_bytes, 6 * kMiB);
  d->Release();
  // A small output is heap memory: never resized, so a kept small buffer is not grown.
  absl::StatusOr<OutputPages> small = OutputPages::New(1000);
  ASSERT_TRUE(small.ok());
  EXPECT_FALSE(small->resizable());
  EXPECT_FALSE(small->Resize(5000));
  EXPECT_EQ(small->bytes(), 1000u);
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

// ---- PlanSlots: slots and depth within the memory budget ------------------------------------

constexpr size_t kSlot = 1 << 20;

SlotRequest Request(uint64_t budget_slots_x2, int prefetch) {  // budget in half slots
  SlotRequest r;
  r.slot_bytes = kSlot;
  r.batch_size = 4;
  r.budget = budget_slots_x2 * kSlot / 2;
  r.budget_note = "test default";
  r.prefetch_batches = prefetch;
  return r;
}

TEST(PlanSlotsTest, AmpleBudgetKeepsTheDepthAndReadAhead) {
  absl::StatusOr<SlotPlan> plan = PlanSlots(Request(2 * 40, 4));  // 40 slots
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->max_slots, 40);
  EXPECT_EQ(plan->depth, 4);
  EXPECT_EQ(plan->prefetch_cap, 4);
  EXPECT_TRUE(plan->read_ahead);
  EXPECT_EQ(plan->note, "");
  EXPECT_EQ(plan->budget, 40 * kSlot);
  // At most 1024 slots, however large the budget.
  EXPECT_EQ(PlanSlots(Request(2 * 5000, 4))->max_slots, 1024);
}

TEST(PlanSlotsTest, BudgetBelowTheOldFloorShrinksPrefetchNotTheBudget) {
  // 3.5 slots fit; prefetch 4 wanted 2 x 4 + 2 = 10 slots (the old floor, which overrode the
  // budget). Now: 3 slots, 2 in the pipeline, 1 for the consumer's batch.
  absl::StatusOr<SlotPlan> plan = PlanSlots(Request(7, 4));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->max_slots, 3);
  EXPECT_EQ(plan->depth, 2);
  EXPECT_EQ(plan->prefetch_cap, 2);
  EXPECT_LE(static_cast<uint64_t>(plan->max_slots) * kSlot, plan->budget);
  EXPECT_EQ(plan->budget, 7 * kSlot / 2) << "the budget is never raised above a minimum that fits";
  EXPECT_FALSE(plan->read_ahead);
  EXPECT_EQ(plan->note, "prefetch 4 -> 2 batches (the budget holds 3 slots of 1.0 MiB; one is the training "
                        "loop's); epoch read-ahead off (its second set of file buffers is outside the slot budget)");
  // Exactly prefetch + 1 slots: nothing cut.
  plan = PlanSlots(Request(2 * 5, 4));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->depth, 4);
  EXPECT_TRUE(plan->read_ahead);
  EXPECT_EQ(plan->note, "");
}

TEST(PlanSlotsTest, TheMinimumIsTwoSlotsAndOneBatchDeep) {
  absl::StatusOr<SlotPlan> plan = PlanSlots(Request(2 * 2, 8));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->max_slots, kMinSlots);
  EXPECT_EQ(plan->depth, 1);
  EXPECT_FALSE(plan->read_ahead);
  SlotRequest r = Request(2 * 2, 2);
  r.auto_prefetch = true;  // half the slots: 1
  plan = PlanSlots(r);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->depth, 1);
  EXPECT_EQ(plan->prefetch_cap, 1);
  EXPECT_TRUE(absl::StrContains(plan->note, "prefetch 2 -> 1 batch (the budget holds 2 slots of 1.0 MiB; auto "
                                            "prefetch takes at most half)")) << plan->note;
}

TEST(PlanSlotsTest, AutoPrefetchGrowsToHalfTheSlotsOnTheHostOnly) {
  SlotRequest r = Request(2 * 9, 2);
  r.auto_prefetch = true;
  absl::StatusOr<SlotPlan> plan = PlanSlots(r);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->depth, 2);
  EXPECT_EQ(plan->prefetch_cap, 4);
  EXPECT_TRUE(plan->read_ahead);
  r.device = true;
  EXPECT_EQ(PlanSlots(r)->prefetch_cap, 2);
}

TEST(PlanSlotsTest, MaxSlotsAskedForIsKeptWithinTheBudget) {
  SlotRequest r = Request(2 * 20, 2);
  r.max_slots = 6;
  EXPECT_EQ(PlanSlots(r)->max_slots, 6);
  EXPECT_EQ(PlanSlots(r)->note, "");
  r.max_slots = 50;
  absl::StatusOr<SlotPlan> plan = PlanSlots(r);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->max_slots, 20);
  EXPECT_EQ(plan->note, "max_slots 50 -> 20 (what the budget holds)");
  EXPECT_TRUE(plan->read_ahead) << "the depth still fits";
}

TEST(PlanSlotsTest, DefaultBudgetRisesToTheMinimumWithinHalfOfWhatIsAvailable) {
  SlotRequest r = Request(3, 4);  // a quarter of 6 slots available: 1.5 slots
  r.available = 6 * kSlot;
  absl::StatusOr<SlotPlan> plan = PlanSlots(r);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->budget, 2 * kSlot);
  EXPECT_EQ(plan->max_slots, 2);
  EXPECT_EQ(plan->depth, 1);
  EXPECT_FALSE(plan->read_ahead);
  EXPECT_TRUE(absl::StartsWith(plan->note, "the default budget holds fewer than 2 slots: raised to 2 x 1.0 MiB = "
                                           "2.0 MiB, within half of the 6.0 MiB available; prefetch 4 -> 1 batch"))
      << plan->note;
  // A budget the user gave is a hard bound: never raised.
  r.budget_given = true;
  EXPECT_TRUE(absl::IsInvalidArgument(PlanSlots(r).status()));
}

TEST(PlanSlotsTest, RefusalNamesTheBudgetTheNeedAndWhatToChange) {
  SlotRequest r = Request(3, 4);  // 1.5 slots ...
  r.available = 3 * kSlot;        // ... and 2 slots are more than half of what is available
  absl::Status refused = PlanSlots(r).status();
  ASSERT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_EQ(std::string(refused.message()),
            "the memory budget (1.5 MiB: test default) holds 1 batch slot of 1048576 bytes (1.0 MiB: batch_size 4 x "
            "262128 bytes a sample, + 64 bytes of labels and indices); the pipeline needs at least 2 (one being "
            "filled, one the training loop holds): 2 x 1048576 = 2097152 bytes (2.0 MiB), more than half of the "
            "3.0 MiB available. To fit, lower batch_size or the output size (a smaller crop or resize, uint8 "
            "instead of float32); or give max_memory= explicitly (at least 2097152 bytes) if the process can "
            "spare that much");
  r.budget_given = true;
  refused = PlanSlots(r).status();
  EXPECT_EQ(std::string(refused.message()),
            "max_memory=1572864 bytes holds 1 batch slot of 1048576 bytes (1.0 MiB: batch_size 4 x 262128 bytes "
            "a sample, + 64 bytes of labels and indices); the pipeline needs at least 2 (one being filled, one the "
            "training loop holds): 2 x 1048576 = 2097152 bytes (2.0 MiB). Raise max_memory to at least 2097152 "
            "bytes, or lower batch_size or the output size (a smaller crop or resize, uint8 instead of float32)");
  // Unknown availability: the default (2 GiB then) is never raised.
  r = Request(3, 4);
  EXPECT_TRUE(absl::IsInvalidArgument(PlanSlots(r).status()));
}

}  // namespace
}  // namespace ringloader
