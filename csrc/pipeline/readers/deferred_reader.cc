// kDeferred: row Sample::offset of group Sample::group, handed over by a feeder outside the
// loader while the epoch runs (DeferredRows, e.g. Parquet row groups). A reader thread waits
// until the row's group is held (its reads in flight handed on first), then the decoder takes
// the row where it lies and counts it done once it is decoded or replaced; a substitute comes
// from the failing row's own group, which stays held until then.

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_util.h"
#include "pipeline/readers/sample_reader.h"

namespace ringloader {
namespace {

// A deferred row handed over without image bytes (a null image cell).
constexpr char kNoRowBytes[] = "the row has no image bytes (null)";

class DeferredReader final : public SampleReader {
 public:
  explicit DeferredReader(DeferredRows* rows) : rows_(rows) {}

  const char* name() const override { return "deferred"; }

  bool Ready(const Sample& sample) const override { return rows_->Held(sample.group); }

  absl::Status WaitReady(const Sample& sample, const ReadContext& ctx) const override {
    if (ctx.waiting != nullptr) ctx.waiting->fetch_add(1, std::memory_order_relaxed);
    absl::Status held = rows_->WaitFor(sample.group, ctx.cancel);
    if (ctx.waiting != nullptr) ctx.waiting->fetch_sub(1, std::memory_order_relaxed);
    return held;
  }

  bool InPlace() const override { return true; }

  absl::Status Bytes(const Sample& sample, const ByteBuffer* read, SampleBytes* out) const override {
    absl::StatusOr<DeferredRows::Row> row = rows_->Get(sample.group, static_cast<int64_t>(sample.offset));
    if (!row.ok()) return row.status();
    auto held = std::make_shared<DeferredRows::Row>(*std::move(row));
    out->hold = held;
    if (held->length < 0) return absl::DataLossError(kNoRowBytes);
    out->data = held->data;
    out->size = static_cast<size_t>(held->length);
    return absl::OkStatus();
  }

  void Release(const Sample& sample, SampleBytes& bytes) const override {
    if (bytes.hold == nullptr) return;
    rows_->Done(sample.group, *static_cast<const DeferredRows::Row*>(bytes.hold.get()));
    bytes.hold.reset();
  }

  absl::Status ReadAside(const Sample& sample, ByteBuffer* buffer, const std::atomic<bool>* cancel) const override {
    RL_ASSIGN_OR_RETURN(const DeferredRows::Row row, rows_->Get(sample.group, static_cast<int64_t>(sample.offset)));
    if (row.length < 0) return absl::DataLossError(kNoRowBytes);
    buffer->Resize(static_cast<size_t>(row.length));
    if (row.length > 0) std::memcpy(buffer->data(), row.data, static_cast<size_t>(row.length));
    return absl::OkStatus();
  }

  // The dataset's other groups may be nowhere in memory: the failing row's own group, held while
  // it is being decoded.
  absl::StatusOr<SampleRun> SubstitutesFor(const Sample& failed, int64_t index, int64_t n) const override {
    // The failing row itself, never row 0: a row whose decodes are done may have been released.
    RL_ASSIGN_OR_RETURN(const DeferredRows::Row own, rows_->Get(failed.group, static_cast<int64_t>(failed.offset)));
    const int64_t first = index - static_cast<int64_t>(failed.offset);
    // The group's rows as handed over, but never past the dataset (a feeder may hand over more
    // rows than the group has samples; MayStandIn skips those past its run).
    return SampleRun{first, std::min<int64_t>(static_cast<int64_t>(own.group->starts.size()), n - first)};
  }

  bool MayStandIn(const Sample& failed, const Sample& candidate) const override {
    return candidate.source == SourceKind::kDeferred && candidate.group == failed.group;
  }

  // A row of the group whose decodes in this plan are done may be gone: not a failure of it.
  bool Gone(const absl::Status& status) const override { return absl::IsFailedPrecondition(status); }

  void AddStats(LoaderStats* s) const override {
    const DeferredRows::Counts rows = rows_->counts();
    s->row_groups_read = rows.groups_attached;
    s->row_group_bytes_read = rows.bytes_attached;
    s->row_group_bytes_held = rows.bytes_held;
    s->row_group_bytes_peak = rows.peak_bytes_held;
    s->row_group_waits = rows.reader_waits;
    s->row_group_wait_seconds = rows.reader_wait_seconds;
    s->row_groups_over_budget = rows.over_budget;
    s->row_group_compactions = rows.compactions;
  }

 private:
  DeferredRows* const rows_;
};

}  // namespace

std::unique_ptr<SampleReader> MakeDeferredReader(DeferredRows* rows) { return std::make_unique<DeferredReader>(rows); }

// kDeferred samples: each group's rows are consecutive samples, row 0 first, and a group has one
// run of them (Epoch::Replace finds a group's rows from one of them); several-file samples are
// not deferred.
absl::Status CheckDeferredGroups(const std::vector<Sample>& samples) {
  std::vector<int64_t> first;  // per group: the sample index of its row 0 (-1: none seen)
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    if (s.source != SourceKind::kDeferred) continue;
    const int64_t row = static_cast<int64_t>(s.offset);
    if (s.group < 0 || row < 0 || row > static_cast<int64_t>(i) || !s.more_files.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sample ", i, " (", s.path, ") is deferred with group ", s.group, " row ", row,
          s.more_files.empty() ? "" : " and several files", ": expected a group >= 0, a row >= 0 and one file"));
    }
    // Row r > 0 follows row r - 1 of its group: no other sample lies inside a group's run.
    const Sample* before = i > 0 ? &samples[i - 1] : nullptr;
    const bool follows = row == 0 || (before->source == SourceKind::kDeferred && before->group == s.group &&
                                      static_cast<int64_t>(before->offset) == row - 1);
    if (!follows) {
      return absl::InvalidArgumentError(absl::StrCat("sample ", i, " (", s.path, ") is row ", row, " of group ",
                                                     s.group, " but sample ", i - 1, " is not its row ", row - 1,
                                                     ": a group's rows must be consecutive samples"));
    }
    if (static_cast<size_t>(s.group) >= first.size()) first.resize(static_cast<size_t>(s.group) + 1, -1);
    int64_t& base = first[static_cast<size_t>(s.group)];
    if (base == -1) base = static_cast<int64_t>(i) - row;
    if (base != static_cast<int64_t>(i) - row) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sample ", i, " (", s.path, ") is row ", row, " of group ", s.group, ", whose row 0 is sample ",
          base, ": a group's rows must be consecutive samples"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ringloader
