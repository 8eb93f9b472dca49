#pragma once
/// Rows whose encoded bytes reach the loader a group at a time while an epoch runs
/// (SourceKind::kDeferred), e.g. the row groups of a Parquet file, read only when the epoch needs
/// them next.
///
/// A feeder (one thread, outside the loader) walks the epoch's order and Attach()es each group
/// before the loader reaches it, with the number of the group's rows the epoch decodes. The
/// loader's readers wait for a group that is not there yet; its decoders decode the bytes where
/// they are and count each row Done(); the group's bytes are freed after its last row. The feeder
/// keeps the bytes held within a budget with WaitForRoom(), which never makes the loader wait for
/// a group it needs now (that group may go over the budget).

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace ringloader {

class DeferredRows {
 public:
  /// One group's rows, end to end in `bytes`: row r is bytes[starts[r], starts[r] + lengths[r]);
  /// a length of -1 marks a row without image bytes (a sample error at its decode).
  /// `row_uses`, when given (one count a row, summing to Attach's `uses`), says how many decodes
  /// each row has in this plan: once fewer than half of a group's bytes belong to rows still to
  /// be decoded, those rows are moved to a block of their own and the larger one is freed, so a
  /// group whose last rows are decoded late (a shuffle buffer) does not hold its whole size.
  struct Group {
    std::vector<uint8_t> bytes;
    std::vector<int64_t> starts;
    std::vector<int64_t> lengths;
    std::vector<int32_t> row_uses;
  };

  /// A row's bytes, held: they stay valid while this exists, even after the group is freed.
  struct Row {
    std::shared_ptr<const Group> group;
    const uint8_t* data = nullptr;
    int64_t length = 0;  ///< -1: the row has no bytes
    uint64_t attach_id = 0;
    int64_t row = -1;
  };

  struct Counts {
    int64_t groups_attached = 0;  ///< Attach() calls that brought bytes (cumulative)
    int64_t bytes_attached = 0;   ///< their bytes (cumulative)
    int64_t groups_held = 0;
    int64_t bytes_held = 0;
    int64_t peak_bytes_held = 0;
    int64_t reader_waits = 0;     ///< times a reader waited for a group not yet attached
    double reader_wait_seconds = 0;
    int64_t over_budget = 0;      ///< groups let in over the budget because the loader waited for them
    int64_t compactions = 0;      ///< groups whose rows left to decode moved to a smaller block
  };

  explicit DeferredRows(int64_t num_groups);
  ~DeferredRows();
  DeferredRows(const DeferredRows&) = delete;
  DeferredRows& operator=(const DeferredRows&) = delete;

  int64_t num_groups() const;

  // ---- feeder side ----

  /// Hands over `group`'s rows for `uses` decodes in this plan (see Clear). A group still held
  /// keeps its bytes and adds `uses`. InvalidArgument for a group out of range, rows that lie
  /// outside `bytes` or uses < 1.
  absl::Status Attach(int64_t group, std::shared_ptr<const Group> rows, int64_t uses);
  /// True when `group` is held now (Attach would only add uses).
  bool Held(int64_t group) const;
  /// Waits up to `timeout` until `incoming` more bytes fit `budget` next to those held, or a
  /// reader waits for `group` (then it comes in whatever the budget), or Close(). True: attach.
  bool WaitForRoom(int64_t group, int64_t incoming, int64_t budget, absl::Duration timeout);
  /// Forgets every group and its uses (a new plan: an epoch started afresh). Rows being decoded
  /// keep their bytes until their Row goes; their Done() no longer counts.
  void Clear();
  /// Wakes and fails every waiter from now on (the loader is going away).
  void Close();

  // ---- loader side ----

  /// Blocks until `group` is attached; Cancelled when `cancel` is set or after Close().
  absl::Status WaitFor(int64_t group, const std::atomic<bool>* cancel);
  /// Row `row` of `group`, held; FailedPrecondition when the group is not attached.
  absl::StatusOr<Row> Get(int64_t group, int64_t row) const;
  /// One of the group's uses is decoded: after the last, its bytes are freed. A row got before
  /// a Clear() (another attach_id) counts nothing.
  void Done(int64_t group, const Row& row);

  Counts counts() const;

 private:
  class State;  // the groups held, their uses, the locks and waits (deferred_rows.cc)
  std::unique_ptr<State> state_;
};

}  // namespace ringloader
