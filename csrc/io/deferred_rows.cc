#include "ringloader/deferred_rows.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace ringloader {

// The implementation: DeferredRows forwards each call to its State, which keeps the locks out
// of the installed header.
class DeferredRows::State {
 public:
  explicit State(int64_t num_groups) : groups_(static_cast<size_t>(num_groups)) {}

  int64_t num_groups() const { return static_cast<int64_t>(groups_.size()); }
  absl::Status Attach(int64_t group, std::shared_ptr<const Group> rows, int64_t uses);
  bool Held(int64_t group) const;
  bool WaitForRoom(int64_t group, int64_t incoming, int64_t budget, absl::Duration timeout);
  void Clear();
  void Close();
  absl::Status WaitFor(int64_t group, const std::atomic<bool>* cancel);
  absl::StatusOr<Row> Get(int64_t group, int64_t row) const;
  void Done(int64_t group, const Row& row);
  Counts counts() const;

 private:
  struct Entry {
    std::shared_ptr<const Group> rows;  // null: not attached
    int64_t uses = 0;
    int64_t bytes = 0;           // of rows->bytes, as counted in bytes_held
    uint64_t attach_id = 0;
    std::vector<int32_t> row_uses;  // decodes left per row (empty: not counted per row)
    int64_t live_bytes = 0;      // bytes of rows with decodes left (when counted per row)
  };
  absl::Status CheckGroup(int64_t group) const;
  void FreeLocked(Entry& entry);
  // Moves the rows with decodes left into a block of their own (Group::row_uses).
  void CompactLocked(Entry& entry);

  mutable std::mutex mu_;
  std::condition_variable attached_cv_;  // readers: a group arrived (or Close)
  std::condition_variable room_cv_;      // feeder: bytes freed, a reader started waiting, Close
  std::vector<Entry> groups_;
  std::vector<int64_t> waiting_;  // readers waiting, per group being waited for (few)
  uint64_t next_attach_id_ = 1;
  bool closed_ = false;
  Counts counts_;
};

DeferredRows::DeferredRows(int64_t num_groups) : state_(std::make_unique<State>(num_groups)) {}
DeferredRows::~DeferredRows() = default;

int64_t DeferredRows::num_groups() const { return state_->num_groups(); }
absl::Status DeferredRows::Attach(int64_t group, std::shared_ptr<const Group> rows, int64_t uses) {
  return state_->Attach(group, std::move(rows), uses);
}
bool DeferredRows::Held(int64_t group) const { return state_->Held(group); }
bool DeferredRows::WaitForRoom(int64_t group, int64_t incoming, int64_t budget, absl::Duration timeout) {
  return state_->WaitForRoom(group, incoming, budget, timeout);
}
void DeferredRows::Clear() { state_->Clear(); }
void DeferredRows::Close() { state_->Close(); }
absl::Status DeferredRows::WaitFor(int64_t group, const std::atomic<bool>* cancel) {
  return state_->WaitFor(group, cancel);
}
absl::StatusOr<DeferredRows::Row> DeferredRows::Get(int64_t group, int64_t row) const {
  return state_->Get(group, row);
}
void DeferredRows::Done(int64_t group, const Row& row) { state_->Done(group, row); }
DeferredRows::Counts DeferredRows::counts() const { return state_->counts(); }

absl::Status DeferredRows::State::CheckGroup(int64_t group) const {
  if (group < 0 || group >= num_groups()) {
    return absl::InvalidArgumentError(absl::StrCat("row group ", group, " is outside [0, ", num_groups(), ")"));
  }
  return absl::OkStatus();
}

absl::Status DeferredRows::State::Attach(int64_t group, std::shared_ptr<const Group> rows, int64_t uses) {
  if (absl::Status s = CheckGroup(group); !s.ok()) return s;
  if (uses < 1) return absl::InvalidArgumentError(absl::StrCat("row group ", group, ": uses ", uses, " < 1"));
  if (rows == nullptr || rows->starts.size() != rows->lengths.size()) {
    return absl::InvalidArgumentError(absl::StrCat("row group ", group, ": starts and lengths differ in length"));
  }
  if (!rows->row_uses.empty()) {
    int64_t sum = 0;
    for (int32_t u : rows->row_uses) sum += u < 0 ? INT64_MIN / 2 : u;
    if (rows->row_uses.size() != rows->starts.size() || sum != uses) {
      return absl::InvalidArgumentError(absl::StrCat("row group ", group, ": row_uses must give each of its ",
                                                     rows->starts.size(), " rows a count >= 0, summing to uses ",
                                                     uses));
    }
  }
  const int64_t size = static_cast<int64_t>(rows->bytes.size());
  for (size_t r = 0; r < rows->starts.size(); ++r) {
    const int64_t start = rows->starts[r], length = rows->lengths[r];
    if (length == -1) continue;
    if (start < 0 || length < 0 || start > size - length) {
      return absl::InvalidArgumentError(absl::StrCat("row group ", group, " row ", r, " (bytes ", start, " + ",
                                                     length, ") lies outside its ", size, " bytes"));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  Entry& entry = groups_[static_cast<size_t>(group)];
  if (entry.rows != nullptr && !entry.row_uses.empty()) {
    // Held and counted per row: count the new decodes per row too (or stop counting).
    if (rows->row_uses.size() == entry.row_uses.size()) {
      // Every row is checked before any count changes: a refused Attach leaves the group as it was.
      for (size_t r = 0; r < entry.row_uses.size(); ++r) {
        if (entry.row_uses[r] == 0 && rows->row_uses[r] > 0 && entry.rows->lengths[r] == -2) {
          // The row was moved out already: it cannot be decoded again from this block.
          return absl::FailedPreconditionError(absl::StrCat(
              "row group ", group, " row ", r, " was released; attach the group after it is freed"));
        }
      }
      for (size_t r = 0; r < entry.row_uses.size(); ++r) {
        // A row with no decode left that gets one is live again.
        if (entry.row_uses[r] == 0 && rows->row_uses[r] > 0) {
          entry.live_bytes += std::max<int64_t>(entry.rows->lengths[r], 0);
        }
        entry.row_uses[r] += rows->row_uses[r];
      }
    } else {
      entry.row_uses.clear();
    }
  }
  entry.uses += uses;
  if (entry.rows == nullptr) {
    entry.row_uses = rows->row_uses;
    entry.live_bytes = size;
    if (!entry.row_uses.empty()) {
      // Only rows this plan decodes are live: the others count towards moving the rest out.
      entry.live_bytes = 0;
      for (size_t r = 0; r < entry.row_uses.size(); ++r) {
        if (entry.row_uses[r] > 0) entry.live_bytes += std::max<int64_t>(rows->lengths[r], 0);
      }
    }
    entry.rows = std::move(rows);
    entry.bytes = size;
    entry.attach_id = next_attach_id_++;
    counts_.groups_attached += 1;
    counts_.bytes_attached += size;
    counts_.groups_held += 1;
    counts_.bytes_held += size;
    counts_.peak_bytes_held = std::max(counts_.peak_bytes_held, counts_.bytes_held);
  }
  attached_cv_.notify_all();
  return absl::OkStatus();
}

bool DeferredRows::State::Held(int64_t group) const {
  std::lock_guard<std::mutex> lock(mu_);
  return CheckGroup(group).ok() && groups_[static_cast<size_t>(group)].rows != nullptr;
}

bool DeferredRows::State::WaitForRoom(int64_t group, int64_t incoming, int64_t budget, absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto fits = [&] {
    return closed_ || counts_.bytes_held == 0 || counts_.bytes_held + incoming <= budget ||
           std::find(waiting_.begin(), waiting_.end(), group) != waiting_.end();
  };
  const bool ok = room_cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), fits);
  if (ok && !closed_ && counts_.bytes_held != 0 && counts_.bytes_held + incoming > budget) counts_.over_budget += 1;
  return ok && !closed_;
}

void DeferredRows::State::FreeLocked(Entry& entry) {
  if (entry.rows == nullptr) return;
  counts_.groups_held -= 1;
  counts_.bytes_held -= entry.bytes;
  entry = Entry{};
  room_cv_.notify_all();
}

void DeferredRows::State::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Entry& entry : groups_) {
    FreeLocked(entry);
    entry.uses = 0;
  }
}

void DeferredRows::State::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  attached_cv_.notify_all();
  room_cv_.notify_all();
}

absl::Status DeferredRows::State::WaitFor(int64_t group, const std::atomic<bool>* cancel) {
  if (absl::Status s = CheckGroup(group); !s.ok()) return s;
  std::unique_lock<std::mutex> lock(mu_);
  Entry& entry = groups_[static_cast<size_t>(group)];
  if (entry.rows != nullptr) return absl::OkStatus();
  const auto start = std::chrono::steady_clock::now();
  counts_.reader_waits += 1;
  waiting_.push_back(group);
  room_cv_.notify_all();  // the feeder may let this group in over the budget
  // The epoch's cancel flag is an atomic without a condition of its own: look at it often.
  while (entry.rows == nullptr && !closed_ && !(cancel != nullptr && cancel->load(std::memory_order_acquire))) {
    attached_cv_.wait_for(lock, std::chrono::milliseconds(20));
  }
  waiting_.erase(std::find(waiting_.begin(), waiting_.end(), group));
  counts_.reader_wait_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (entry.rows == nullptr) return absl::CancelledError("stopped while waiting for a row group");
  return absl::OkStatus();
}

absl::StatusOr<DeferredRows::Row> DeferredRows::State::Get(int64_t group, int64_t row) const {
  if (absl::Status s = CheckGroup(group); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  const Entry& entry = groups_[static_cast<size_t>(group)];
  if (entry.rows == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("row group ", group, " is not in memory"));
  }
  if (row < 0 || row >= static_cast<int64_t>(entry.rows->starts.size())) {
    return absl::OutOfRangeError(absl::StrCat("row ", row, " is outside row group ", group, " of ",
                                              entry.rows->starts.size(), " rows"));
  }
  Row out;
  out.group = entry.rows;
  out.length = entry.rows->lengths[static_cast<size_t>(row)];
  out.data = out.length < 0 ? nullptr : entry.rows->bytes.data() + entry.rows->starts[static_cast<size_t>(row)];
  out.attach_id = entry.attach_id;
  out.row = row;
  if (out.length == -2) {
    return absl::FailedPreconditionError(absl::StrCat("row ", row, " of row group ", group,
                                                      " has no decode left in this plan (released)"));
  }
  return out;
}

void DeferredRows::State::Done(int64_t group, const Row& row) {
  if (!CheckGroup(group).ok()) return;
  std::lock_guard<std::mutex> lock(mu_);
  Entry& entry = groups_[static_cast<size_t>(group)];
  if (entry.rows == nullptr || entry.attach_id != row.attach_id) return;
  if (--entry.uses <= 0) return FreeLocked(entry);
  if (entry.row_uses.empty() || row.row < 0 || row.row >= static_cast<int64_t>(entry.row_uses.size())) return;
  int32_t& left = entry.row_uses[static_cast<size_t>(row.row)];
  if (left > 0 && --left == 0 && row.length > 0) entry.live_bytes -= row.length;
  if (entry.live_bytes * 2 < entry.bytes) CompactLocked(entry);
}

void DeferredRows::State::CompactLocked(Entry& entry) {
  const Group& old = *entry.rows;
  auto moved = std::make_shared<Group>();
  const size_t n = old.starts.size();
  moved->starts.assign(n, 0);
  moved->lengths.assign(n, -2);  // released: no decode of this plan is left for it
  moved->bytes.reserve(static_cast<size_t>(entry.live_bytes));
  for (size_t r = 0; r < n; ++r) {
    if (entry.row_uses[r] == 0) continue;
    const int64_t length = old.lengths[r];
    moved->lengths[r] = length;
    if (length <= 0) continue;
    moved->starts[r] = static_cast<int64_t>(moved->bytes.size());
    moved->bytes.insert(moved->bytes.end(), old.bytes.begin() + old.starts[r],
                        old.bytes.begin() + old.starts[r] + length);
  }
  const int64_t size = static_cast<int64_t>(moved->bytes.size());
  counts_.bytes_held += size - entry.bytes;
  counts_.compactions += 1;
  entry.bytes = size;
  entry.live_bytes = size;
  entry.rows = std::move(moved);  // rows being decoded keep the old block until they finish
  room_cv_.notify_all();
}

DeferredRows::Counts DeferredRows::State::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

}  // namespace ringloader
