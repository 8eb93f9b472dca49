// DeferredRows' contract on its own: what Attach, Get and Done count and free, how readers wait
// for a group (and are let go), how the feeder's WaitForRoom keeps the bytes held within a budget
// without ever keeping a reader waiting, and what Clear leaves behind. The loader's use of it is
// tested in pipeline/deferred_loader_test.cc.

#include "ringloader/deferred_rows.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace ringloader {
namespace {

using Group = DeferredRows::Group;

// A group of rows of the given lengths, end to end (-1: a row without bytes); row r's bytes are
// all r + 1, so a Row says which row it is.
std::shared_ptr<const Group> MakeGroup(const std::vector<int64_t>& lengths) {
  auto group = std::make_shared<Group>();
  for (size_t r = 0; r < lengths.size(); ++r) {
    group->starts.push_back(static_cast<int64_t>(group->bytes.size()));
    group->lengths.push_back(lengths[r]);
    if (lengths[r] > 0) group->bytes.insert(group->bytes.end(), static_cast<size_t>(lengths[r]),
                                                  static_cast<uint8_t>(r + 1));
  }
  return group;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(DeferredRowsTest, GroupIsFreedAfterItsLastUseAndCounted) {
  DeferredRows rows(3);
  EXPECT_EQ(rows.num_groups(), 3);
  EXPECT_FALSE(rows.Held(1));
  ASSERT_TRUE(rows.Attach(1, MakeGroup({4, 6}), 2).ok());
  ASSERT_TRUE(rows.Attach(2, MakeGroup({5}), 1).ok());
  EXPECT_TRUE(rows.Held(1));
  DeferredRows::Counts c = rows.counts();
  EXPECT_EQ(c.groups_attached, 2);
  EXPECT_EQ(c.bytes_attached, 15);
  EXPECT_EQ(c.groups_held, 2);
  EXPECT_EQ(c.bytes_held, 15);
  EXPECT_EQ(c.peak_bytes_held, 15);

  absl::StatusOr<DeferredRows::Row> r1 = rows.Get(1, 1);
  ASSERT_TRUE(r1.ok()) << r1.status();
  ASSERT_EQ(r1->length, 6);
  EXPECT_EQ(r1->data[0], 2);
  EXPECT_EQ(r1->data[5], 2);
  rows.Done(1, *r1);
  EXPECT_TRUE(rows.Held(1));  // one use left
  absl::StatusOr<DeferredRows::Row> r0 = rows.Get(1, 0);
  ASSERT_TRUE(r0.ok());
  EXPECT_EQ(r0->data[0], 1);
  rows.Done(1, *r0);
  EXPECT_FALSE(rows.Held(1));
  c = rows.counts();
  EXPECT_EQ(c.groups_held, 1);
  EXPECT_EQ(c.bytes_held, 5);
  EXPECT_EQ(c.peak_bytes_held, 15);
  EXPECT_EQ(c.groups_attached, 2);  // cumulative
  EXPECT_EQ(r1->data[3], 2);        // a Row keeps its bytes after the group is freed

  // Attached again (a later use in the plan): counted as a new hand-over.
  ASSERT_TRUE(rows.Attach(1, MakeGroup({4, 6}), 1).ok());
  c = rows.counts();
  EXPECT_EQ(c.groups_attached, 3);
  EXPECT_EQ(c.bytes_attached, 25);
  EXPECT_EQ(c.bytes_held, 15);
}

TEST(DeferredRowsTest, AttachingAHeldGroupAddsUsesAndKeepsItsBytes) {
  DeferredRows rows(1);
  ASSERT_TRUE(rows.Attach(0, MakeGroup({3}), 1).ok());
  ASSERT_TRUE(rows.Attach(0, MakeGroup({9, 9}), 2).ok());  // held: only the uses count
  DeferredRows::Counts c = rows.counts();
  EXPECT_EQ(c.groups_attached, 1);
  EXPECT_EQ(c.bytes_held, 3);
  for (int use = 0; use < 3; ++use) {
    EXPECT_TRUE(rows.Held(0)) << use;
    absl::StatusOr<DeferredRows::Row> row = rows.Get(0, 0);
    ASSERT_TRUE(row.ok());
    EXPECT_EQ(row->length, 3);  // the first group's row
    EXPECT_TRUE(absl::IsOutOfRange(rows.Get(0, 1).status()));
    rows.Done(0, *row);
  }
  EXPECT_FALSE(rows.Held(0));
  EXPECT_EQ(rows.counts().bytes_held, 0);
}

TEST(DeferredRowsTest, BadArgumentsAreRefusedNamingTheGroupAndRow) {
  DeferredRows rows(2);
  absl::Status s = rows.Attach(2, MakeGroup({1}), 1);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("row group 2"), std::string::npos) << s;
  EXPECT_TRUE(absl::IsInvalidArgument(rows.Attach(-1, MakeGroup({1}), 1)));
  EXPECT_TRUE(absl::IsInvalidArgument(rows.Attach(0, MakeGroup({1}), 0)));
  EXPECT_TRUE(absl::IsInvalidArgument(rows.Attach(0, nullptr, 1)));

  auto outside = std::make_shared<Group>();
  outside->bytes.assign(10, 7);
  outside->starts = {0, 6};
  outside->lengths = {6, 5};  // row 1 runs one byte past the end
  s = rows.Attach(0, outside, 1);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("row group 0 row 1"), std::string::npos) << s;
  auto negative = std::make_shared<Group>(*outside);
  negative->lengths = {6, -2};
  EXPECT_TRUE(absl::IsInvalidArgument(rows.Attach(0, negative, 1)));
  auto uneven = std::make_shared<Group>(*outside);
  uneven->lengths = {6};
  EXPECT_TRUE(absl::IsInvalidArgument(rows.Attach(0, uneven, 1)));
  EXPECT_EQ(rows.counts().groups_attached, 0);
  EXPECT_FALSE(rows.Held(0));
  EXPECT_FALSE(rows.Held(5));  // out of range: simply not held

  s = rows.Get(0, 0).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("row group 0"), std::string::npos) << s;
  EXPECT_TRUE(absl::IsInvalidArgument(rows.Get(2, 0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(rows.Get(-1, 0).status()));
  ASSERT_TRUE(rows.Attach(0, MakeGroup({2, 2}), 1).ok());
  s = rows.Get(0, 2).status();
  EXPECT_TRUE(absl::IsOutOfRange(s)) << s;
  EXPECT_NE(s.message().find("row 2"), std::string::npos) << s;
  EXPECT_TRUE(absl::IsOutOfRange(rows.Get(0, -1).status()));
}

TEST(DeferredRowsTest, RowWithoutBytesHasLengthMinusOne) {
  DeferredRows rows(1);
  ASSERT_TRUE(rows.Attach(0, MakeGroup({3, -1, 2}), 3).ok());
  EXPECT_EQ(rows.counts().bytes_held, 5);
  absl::StatusOr<DeferredRows::Row> none = rows.Get(0, 1);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->length, -1);
  EXPECT_EQ(none->data, nullptr);
  absl::StatusOr<DeferredRows::Row> last = rows.Get(0, 2);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->length, 2);
  EXPECT_EQ(last->data[1], 3);
}

TEST(DeferredRowsTest, WaitForReturnsWhenAnotherThreadAttaches) {
  DeferredRows rows(2);
  std::atomic<bool> cancel{false};
  std::thread feeder([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_TRUE(rows.Attach(1, MakeGroup({4}), 1).ok());
  });
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = rows.WaitFor(1, &cancel);
  feeder.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(rows.Held(1));
  EXPECT_LT(SecondsSince(start), 1.0);
  DeferredRows::Counts c = rows.counts();
  EXPECT_EQ(c.reader_waits, 1);
  EXPECT_GT(c.reader_wait_seconds, 0.0);
  // Held already: no wait counted.
  EXPECT_TRUE(rows.WaitFor(1, &cancel).ok());
  EXPECT_EQ(rows.counts().reader_waits, 1);
  EXPECT_TRUE(absl::IsInvalidArgument(rows.WaitFor(2, &cancel)));
}

TEST(DeferredRowsTest, WaitForIsCancelledByTheFlagAndByClose) {
  DeferredRows rows(1);
  std::atomic<bool> cancel{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    cancel.store(true, std::memory_order_release);
  });
  auto start = std::chrono::steady_clock::now();
  absl::Status s = rows.WaitFor(0, &cancel);
  stopper.join();
  EXPECT_TRUE(absl::IsCancelled(s)) << s;
  EXPECT_LT(SecondsSince(start), 0.5);

  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    rows.Close();
  });
  start = std::chrono::steady_clock::now();
  s = rows.WaitFor(0, nullptr);
  closer.join();
  EXPECT_TRUE(absl::IsCancelled(s)) << s;
  EXPECT_LT(SecondsSince(start), 0.5);
  // Closed: a later wait fails at once.
  EXPECT_TRUE(absl::IsCancelled(rows.WaitFor(0, nullptr)));
}

TEST(DeferredRowsTest, WaitForRoomKeepsTheBudgetWithoutKeepingAReaderWaiting) {
  DeferredRows rows(4);
  // Nothing held: a group larger than the whole budget still comes in.
  EXPECT_TRUE(rows.WaitForRoom(0, 100, 10, absl::ZeroDuration()));
  EXPECT_EQ(rows.counts().over_budget, 0);
  ASSERT_TRUE(rows.Attach(0, MakeGroup({6}), 1).ok());
  EXPECT_TRUE(rows.WaitForRoom(1, 4, 10, absl::ZeroDuration()));  // 6 + 4 fits 10
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(rows.WaitForRoom(1, 5, 10, absl::Milliseconds(20)));  // 6 + 5 does not
  EXPECT_GE(SecondsSince(start), 0.015);

  // Bytes freed while the feeder waits: it goes on.
  absl::StatusOr<DeferredRows::Row> row = rows.Get(0, 0);
  ASSERT_TRUE(row.ok());
  std::thread decoder([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    rows.Done(0, *row);
  });
  start = std::chrono::steady_clock::now();
  EXPECT_TRUE(rows.WaitForRoom(1, 5, 10, absl::Seconds(5)));
  decoder.join();
  EXPECT_LT(SecondsSince(start), 1.0);
  EXPECT_EQ(rows.counts().over_budget, 0);

  // Over the budget, but a reader waits for this very group: it comes in, counted over budget.
  ASSERT_TRUE(rows.Attach(1, MakeGroup({8}), 1).ok());
  std::atomic<bool> cancel{false};
  std::thread reader([&] { EXPECT_TRUE(rows.WaitFor(2, &cancel).ok()); });
  start = std::chrono::steady_clock::now();
  EXPECT_TRUE(rows.WaitForRoom(2, 8, 10, absl::Seconds(5)));
  EXPECT_LT(SecondsSince(start), 1.0);
  EXPECT_EQ(rows.counts().over_budget, 1);
  ASSERT_TRUE(rows.Attach(2, MakeGroup({8}), 1).ok());
  reader.join();
  EXPECT_EQ(rows.counts().bytes_held, 16);
  // A reader waiting for another group does not let this one in.
  std::thread other([&] { EXPECT_TRUE(absl::IsCancelled(rows.WaitFor(0, &cancel))); });
  EXPECT_FALSE(rows.WaitForRoom(3, 8, 10, absl::Milliseconds(20)));
  cancel.store(true);
  other.join();

  // Closed: false at once, whatever the budget.
  rows.Close();
  start = std::chrono::steady_clock::now();
  EXPECT_FALSE(rows.WaitForRoom(3, 8, 10, absl::Seconds(5)));
  EXPECT_FALSE(rows.WaitForRoom(3, 1, 1000, absl::Seconds(5)));
  EXPECT_LT(SecondsSince(start), 1.0);
}

TEST(DeferredRowsTest, ClearDropsEveryGroupAndOldRowsNoLongerCount) {
  DeferredRows rows(2);
  ASSERT_TRUE(rows.Attach(0, MakeGroup({4, 4}), 2).ok());
  ASSERT_TRUE(rows.Attach(1, MakeGroup({3}), 1).ok());
  absl::StatusOr<DeferredRows::Row> before = rows.Get(0, 1);
  ASSERT_TRUE(before.ok());
  rows.Clear();
  EXPECT_FALSE(rows.Held(0));
  EXPECT_FALSE(rows.Held(1));
  DeferredRows::Counts c = rows.counts();
  EXPECT_EQ(c.groups_held, 0);
  EXPECT_EQ(c.bytes_held, 0);
  EXPECT_EQ(c.peak_bytes_held, 11);
  EXPECT_TRUE(absl::IsFailedPrecondition(rows.Get(0, 0).status()));
  // The row got before keeps its bytes.
  ASSERT_EQ(before->length, 4);
  EXPECT_EQ(before->data[0], 2);
  EXPECT_EQ(before->data[3], 2);

  // The new plan's group 0, for one use: the old row's Done does not spend it.
  ASSERT_TRUE(rows.Attach(0, MakeGroup({5, 5}), 1).ok());
  rows.Done(0, *before);
  EXPECT_TRUE(rows.Held(0));
  EXPECT_EQ(rows.counts().bytes_held, 10);
  absl::StatusOr<DeferredRows::Row> after = rows.Get(0, 0);
  ASSERT_TRUE(after.ok());
  EXPECT_NE(after->attach_id, before->attach_id);
  rows.Done(0, *after);
  EXPECT_FALSE(rows.Held(0));
  EXPECT_EQ(rows.counts().bytes_held, 0);
}

// MakeGroup with per-row decode counts (Group::row_uses).
std::shared_ptr<const Group> MakeGroup(const std::vector<int64_t>& lengths, const std::vector<int32_t>& row_uses) {
  auto group = std::make_shared<Group>(*MakeGroup(lengths));
  group->row_uses = row_uses;
  return group;
}

// Gets row `row` of `group` and counts it decoded.
void Decode(DeferredRows& rows, int64_t group, int64_t row) {
  absl::StatusOr<DeferredRows::Row> got = rows.Get(group, row);
  ASSERT_TRUE(got.ok()) << got.status();
  rows.Done(group, *got);
}

TEST(DeferredRowsTest, RowUsesMustGiveEachRowACountSummingToUses) {
  DeferredRows rows(1);
  absl::Status s = rows.Attach(0, MakeGroup({1, 1}, {1}), 1);  // one count for two rows
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("row_uses"), std::string::npos) << s;
  EXPECT_TRUE(absl::IsInvalidArgument(rows.Attach(0, MakeGroup({1, 1}, {1, 1}), 3)));
  EXPECT_TRUE(absl::IsInvalidArgument(rows.Attach(0, MakeGroup({1, 1}, {3, -1}), 2)));
  EXPECT_FALSE(rows.Held(0));
  EXPECT_TRUE(rows.Attach(0, MakeGroup({1, 1}, {2, 0}), 2).ok());
}

TEST(DeferredRowsTest, RowsLeftToDecodeMoveOutOnceTheyAreLessThanHalfTheGroup) {
  DeferredRows rows(1);
  ASSERT_TRUE(rows.Attach(0, MakeGroup({10, 10, 10, 10}, {1, 1, 1, 1}), 4).ok());
  absl::StatusOr<DeferredRows::Row> early = rows.Get(0, 2);  // being decoded across the move
  ASSERT_TRUE(early.ok());
  Decode(rows, 0, 0);
  Decode(rows, 0, 1);  // 20 of 40 bytes left: not less than half
  EXPECT_EQ(rows.counts().compactions, 0);
  EXPECT_EQ(rows.counts().bytes_held, 40);
  rows.Done(0, *early);  // 10 left: row 3 moves to a block of its own
  DeferredRows::Counts c = rows.counts();
  EXPECT_EQ(c.compactions, 1);
  EXPECT_EQ(c.bytes_held, 10);
  EXPECT_EQ(c.peak_bytes_held, 40);
  EXPECT_EQ(early->data[9], 3);  // the old block lives while a Row holds it
  absl::Status released = rows.Get(0, 1).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(released)) << released;
  EXPECT_NE(released.message().find("released"), std::string::npos) << released;
  absl::StatusOr<DeferredRows::Row> last = rows.Get(0, 3);
  ASSERT_TRUE(last.ok());
  ASSERT_EQ(last->length, 10);
  EXPECT_EQ(last->data[0], 4);
  // A released row cannot be handed over again while the group is held; the refusal changes
  // nothing (row 3's one decode still frees the group).
  EXPECT_TRUE(absl::IsFailedPrecondition(rows.Attach(0, MakeGroup({10, 10, 10, 10}, {0, 0, 1, 1}), 2)));
  rows.Done(0, *last);
  EXPECT_FALSE(rows.Held(0));
  EXPECT_EQ(rows.counts().bytes_held, 0);
}

TEST(DeferredRowsTest, RowsWithoutDecodesInThePlanAreNotCountedLive) {
  // Rows 2 and 3 are not in this plan (another rank's, say): after row 0, row 1 alone is left
  // to decode, a quarter of the group, so it moves out.
  DeferredRows rows(1);
  ASSERT_TRUE(rows.Attach(0, MakeGroup({10, 10, 10, 10}, {1, 1, 0, 0}), 2).ok());
  Decode(rows, 0, 0);
  EXPECT_EQ(rows.counts().compactions, 1);
  EXPECT_EQ(rows.counts().bytes_held, 10);
  Decode(rows, 0, 1);
  EXPECT_FALSE(rows.Held(0));

  // Handed over again while held, the rows it gives decodes to are live again.
  ASSERT_TRUE(rows.Attach(0, MakeGroup({10, 10, 10, 10}, {1, 1, 0, 0}), 2).ok());
  ASSERT_TRUE(rows.Attach(0, MakeGroup({10, 10, 10, 10}, {0, 0, 1, 1}), 2).ok());
  Decode(rows, 0, 0);
  Decode(rows, 0, 1);
  EXPECT_EQ(rows.counts().compactions, 1);  // 20 of 40 left
  Decode(rows, 0, 2);
  EXPECT_EQ(rows.counts().compactions, 2);
  EXPECT_EQ(rows.counts().bytes_held, 10);
  Decode(rows, 0, 3);
  EXPECT_FALSE(rows.Held(0));
  EXPECT_EQ(rows.counts().bytes_held, 0);
}

}  // namespace
}  // namespace ringloader
