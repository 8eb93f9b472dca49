// SourceKind::kDeferred samples through the public Loader API: a feeder thread hands over each
// row group as the epoch's order reaches it, within a budget, and the loader delivers what it
// delivers for the same images in memory; a row without bytes is a sample error (replaced from
// its own group); an epoch stopped while a reader waits for a group returns; Create refuses a
// group whose rows are not consecutive samples.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "ringloader/deferred_rows.h"
#include "ringloader/ringloader.h"
#include "ringloader/transforms.h"
#include "testing/jpeg_fixtures.h"

namespace ringloader {
namespace {

constexpr int kGroups = 3;
constexpr int kRowsPerGroup = 8;
constexpr int kSamples = kGroups * kRowsPerGroup;

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::vector<uint8_t> bytes;
  FILE* f = std::fopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  if (f == nullptr) return bytes;
  int c;
  while ((c = std::fgetc(f)) != EOF) bytes.push_back(static_cast<uint8_t>(c));
  std::fclose(f);
  return bytes;
}

// The JPEG fixtures' bytes, as kMemory samples and as kDeferred rows of kGroups groups (row r
// of group g is sample g * kRowsPerGroup + r), with each group's rows end to end.
struct Dataset {
  std::vector<std::vector<uint8_t>> blobs;
  std::vector<Sample> memory;
  std::vector<Sample> deferred;
  std::vector<std::shared_ptr<DeferredRows::Group>> groups;

  int64_t GroupBytes(int g) const { return static_cast<int64_t>(groups[static_cast<size_t>(g)]->bytes.size()); }
  int64_t MaxGroupBytes() const {
    int64_t most = 0;
    for (int g = 0; g < kGroups; ++g) most = std::max(most, GroupBytes(g));
    return most;
  }
};

Dataset MakeDataset() {
  Dataset d;
  const std::vector<Sample> files = testing::WriteJpegDataset(testing::MakeTempDir(), kSamples);
  for (const Sample& s : files) d.blobs.push_back(ReadBytes(s.path));
  d.memory = files;
  d.deferred = files;
  for (int g = 0; g < kGroups; ++g) d.groups.push_back(std::make_shared<DeferredRows::Group>());
  for (int i = 0; i < kSamples; ++i) {
    const std::vector<uint8_t>& blob = d.blobs[static_cast<size_t>(i)];
    Sample& m = d.memory[static_cast<size_t>(i)];
    m.path = "<memory " + std::to_string(i) + ">";
    m.source = SourceKind::kMemory;
    m.memory = blob.data();
    m.length = static_cast<int64_t>(blob.size());
    Sample& s = d.deferred[static_cast<size_t>(i)];
    s.path = "<row " + std::to_string(i) + ">";
    s.source = SourceKind::kDeferred;
    s.group = i / kRowsPerGroup;
    s.offset = static_cast<uint64_t>(i % kRowsPerGroup);
    s.length = 0;
    DeferredRows::Group& group = *d.groups[static_cast<size_t>(s.group)];
    group.starts.push_back(static_cast<int64_t>(group.bytes.size()));
    group.lengths.push_back(static_cast<int64_t>(blob.size()));
    group.bytes.insert(group.bytes.end(), blob.begin(), blob.end());
  }
  return d;
}

LoaderOptions Options(ErrorPolicy policy, int workers) {
  LoaderOptions o;
  o.batch_size = 2;
  o.num_workers = workers;
  o.reader_threads = 1;
  o.prefetch_batches = 1;
  o.fast_decode = false;
  o.on_error = policy;
  o.transform = {transforms::Resize(24), transforms::CenterCrop(20)};
  return o;
}

// Groups visited in `group_order`, each group's rows shuffled (fixed seed).
std::vector<int64_t> ShuffledWithinGroups(const std::vector<int>& group_order) {
  std::mt19937 rng(7);
  std::vector<int64_t> order;
  for (int g : group_order) {
    std::vector<int64_t> rows;
    for (int r = 0; r < kRowsPerGroup; ++r) rows.push_back(g * kRowsPerGroup + r);
    std::shuffle(rows.begin(), rows.end(), rng);
    order.insert(order.end(), rows.begin(), rows.end());
  }
  return order;
}

std::vector<int64_t> Offsets(size_t n, size_t batch) {
  std::vector<int64_t> offsets;
  for (size_t b = 0; b < n; b += batch) offsets.push_back(static_cast<int64_t>(b));
  offsets.push_back(static_cast<int64_t>(n));
  return offsets;
}

// Hands over the groups in the order the epoch reaches them, each for the rows the epoch decodes
// of it, keeping the bytes held within `budget` (as a Parquet source's feeder does). `per_row`:
// with each row's decodes (Group::row_uses), so that rows decoded early may be released.
class Feeder {
 public:
  Feeder(DeferredRows* rows, const Dataset& data, const std::vector<int64_t>& order, int64_t budget,
         bool per_row = false) {
    struct Step {
      int group;
      int64_t uses = 0;
      std::vector<int32_t> row_uses;
    };
    std::vector<Step> plan;  // runs of the order
    for (int64_t index : order) {
      const Sample& s = data.deferred[static_cast<size_t>(index)];
      if (plan.empty() || plan.back().group != s.group) {
        plan.push_back(Step{s.group, 0, std::vector<int32_t>(data.groups[static_cast<size_t>(s.group)]->starts.size())});
      }
      plan.back().uses += 1;
      plan.back().row_uses[s.offset] += 1;
    }
    thread_ = std::thread([this, rows, &data, plan = std::move(plan), budget, per_row] {
      for (const Step& step : plan) {
        while (!rows->WaitForRoom(step.group, data.GroupBytes(step.group), budget, absl::Milliseconds(20))) {
          if (stop_.load()) return;
        }
        std::shared_ptr<const DeferredRows::Group> group = data.groups[static_cast<size_t>(step.group)];
        if (per_row) {
          auto counted = std::make_shared<DeferredRows::Group>(*group);
          counted->row_uses = step.row_uses;
          group = std::move(counted);
        }
        EXPECT_TRUE(rows->Attach(step.group, std::move(group), step.uses).ok());
      }
    });
  }
  ~Feeder() {
    stop_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct Delivered {
  std::vector<int64_t> indices;
  std::vector<int64_t> labels;
  std::vector<uint8_t> images;
  std::vector<absl::Status> errors;
};

Delivered RunEpoch(Loader& loader, const std::vector<int64_t>& order) {
  Delivered out;
  EXPECT_TRUE(loader.StartEpoch(0, 11, order, Offsets(order.size(), 2)).ok());
  for (int call = 0; call < 100; ++call) {
    absl::StatusOr<Batch> batch = loader.Next(30);
    if (IsEndOfEpoch(batch.status())) break;
    if (!batch.ok()) {
      out.errors.push_back(batch.status());
      continue;
    }
    out.indices.insert(out.indices.end(), batch->indices(), batch->indices() + batch->size());
    out.labels.insert(out.labels.end(), batch->labels(), batch->labels() + batch->size());
    const auto* p = static_cast<const uint8_t*>(batch->images());
    out.images.insert(out.images.end(), p, p + batch->size() * batch->sample_bytes());
  }
  return out;
}

// One epoch of `order` over `data`'s deferred samples under `policy` with one decoder, a
// feeder handing the groups over within one group's bytes; the loader is kept in `*out`.
Delivered RunFed(const Dataset& data, const std::vector<int64_t>& order, ErrorPolicy policy,
                 std::unique_ptr<Loader>* out, bool per_row = false) {
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(data.deferred, Options(policy, 1));
  EXPECT_TRUE(loader.ok()) << loader.status();
  if (!loader.ok()) return {};
  *out = std::move(*loader);
  Feeder feeder((*out)->deferred_rows(), data, order, data.MaxGroupBytes(), per_row);
  return RunEpoch(**out, order);
}

TEST(DeferredLoaderTest, DeliversEveryRowOnceAsFromMemoryWithinTheBudget) {
  const Dataset data = MakeDataset();
  const std::vector<int64_t> order = ShuffledWithinGroups({2, 0, 1});
  const LoaderOptions options = Options(ErrorPolicy::kRaise, 2);
  absl::StatusOr<std::unique_ptr<Loader>> from_memory = Loader::Create(data.memory, options);
  ASSERT_TRUE(from_memory.ok()) << from_memory.status();
  EXPECT_EQ((*from_memory)->deferred_rows(), nullptr);
  const Delivered want = RunEpoch(**from_memory, order);
  ASSERT_EQ(want.indices.size(), static_cast<size_t>(kSamples));

  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(data.deferred, options);
  ASSERT_TRUE(loader.ok()) << loader.status();
  DeferredRows* rows = (*loader)->deferred_rows();
  ASSERT_NE(rows, nullptr);
  EXPECT_EQ(rows->num_groups(), kGroups);
  const int64_t budget = data.MaxGroupBytes();
  Delivered got;
  {
    Feeder feeder(rows, data, order, budget);
    got = RunEpoch(**loader, order);
  }
  EXPECT_TRUE(got.errors.empty()) << got.errors.front();
  EXPECT_EQ(got.indices, order);
  std::set<int64_t> seen(got.indices.begin(), got.indices.end());
  EXPECT_EQ(seen.size(), static_cast<size_t>(kSamples));
  for (size_t k = 0; k < got.indices.size(); ++k) {
    EXPECT_EQ(got.labels[k], data.deferred[static_cast<size_t>(got.indices[k])].label) << k;
  }
  EXPECT_EQ(got.labels, want.labels);
  EXPECT_TRUE(got.images == want.images);

  const LoaderStats stats = (*loader)->Stats();
  int64_t total = 0;
  for (int g = 0; g < kGroups; ++g) total += data.GroupBytes(g);
  EXPECT_EQ(stats.row_groups_read, kGroups);
  EXPECT_EQ(stats.row_group_bytes_read, total);
  EXPECT_EQ(stats.row_group_bytes_held, 0);
  EXPECT_GE(stats.row_group_bytes_peak, data.MaxGroupBytes());
  EXPECT_LE(stats.row_group_bytes_peak, budget + data.MaxGroupBytes());
  EXPECT_EQ(rows->counts().groups_held, 0);
}

// Row `row` of group `group` in `data` handed over without bytes.
std::shared_ptr<DeferredRows::Group> WithoutBytes(const Dataset& data, int group, int row) {
  auto copy = std::make_shared<DeferredRows::Group>(*data.groups[static_cast<size_t>(group)]);
  copy->lengths[static_cast<size_t>(row)] = -1;
  return copy;
}

TEST(DeferredLoaderTest, RowWithoutBytesIsASampleErrorUnderRaise) {
  Dataset data = MakeDataset();
  const int bad = kRowsPerGroup + 3;  // group 1, row 3
  data.groups[1] = WithoutBytes(data, 1, 3);
  const std::vector<int64_t> order = ShuffledWithinGroups({0, 1, 2});
  std::unique_ptr<Loader> loader;
  const Delivered got = RunFed(data, order, ErrorPolicy::kRaise, &loader);
  ASSERT_EQ(got.errors.size(), 1u);
  const absl::Status& error = got.errors[0];
  EXPECT_TRUE(IsSampleError(error)) << error;
  EXPECT_NE(error.message().find("no image bytes"), std::string::npos) << error;
  EXPECT_EQ(error.GetPayload(kSampleIndexPayload).value(), absl::Cord(std::to_string(bad)));
  EXPECT_EQ(got.indices.size(), static_cast<size_t>(kSamples - 2));  // the failing batch of 2
  EXPECT_EQ(std::count(got.indices.begin(), got.indices.end(), bad), 0);
  EXPECT_EQ(loader->Stats().row_group_bytes_held, 0);
}

TEST(DeferredLoaderTest, RowWithoutBytesIsReplacedByARowOfItsGroup) {
  // The row without bytes is the last of its group to be decoded (one decoder, in order), so the
  // group must stay held until its substitute is decoded.
  for (const bool last : {true, false}) {
    SCOPED_TRACE(last ? "last row of its group" : "first row of its group");
    Dataset data = MakeDataset();
    const std::vector<int64_t> order = ShuffledWithinGroups({0, 1, 2});
    const size_t position = last ? 2 * kRowsPerGroup - 1 : kRowsPerGroup;  // in group 1's run
    const int64_t bad = order[position];
    data.groups[1] = WithoutBytes(data, 1, static_cast<int>(bad - kRowsPerGroup));
    std::unique_ptr<Loader> loader;
  const Delivered got = RunFed(data, order, ErrorPolicy::kReplace, &loader);
    ASSERT_TRUE(got.errors.empty()) << got.errors.front();
    ASSERT_EQ(got.indices.size(), static_cast<size_t>(kSamples));
    const int64_t substitute = got.indices[position];
    EXPECT_NE(substitute, bad);
    EXPECT_GE(substitute, kRowsPerGroup);
    EXPECT_LT(substitute, 2 * kRowsPerGroup);
    EXPECT_EQ(got.labels[position], data.deferred[static_cast<size_t>(substitute)].label);
    const LoaderStats stats = loader->Stats();
    EXPECT_EQ(stats.replaced, 1);
    EXPECT_EQ(stats.row_group_bytes_held, 0);
  }
}

TEST(DeferredLoaderTest, SubstitutesStayInTheGroupWhenItsFeederHandsOverMoreRows) {
  // The last group handed over with a thousand more rows than it has samples (the extra ones
  // undecodable), so that nearly every draw over the handed-over rows lands past the dataset:
  // a substitute is still one of the group's own samples.
  Dataset data = MakeDataset();
  const int last = kGroups - 1;
  auto padded = std::make_shared<DeferredRows::Group>(*data.groups[last]);
  for (int r = 0; r < 1000; ++r) {
    padded->starts.push_back(0);
    padded->lengths.push_back(1);
  }
  padded->lengths[0] = -1;  // row 0 of the last group has no bytes
  data.groups[last] = padded;
  const std::vector<int64_t> order = ShuffledWithinGroups({last});
  std::unique_ptr<Loader> loader;
  const Delivered got = RunFed(data, order, ErrorPolicy::kReplace, &loader);
  ASSERT_TRUE(got.errors.empty()) << got.errors.front();
  const size_t position = static_cast<size_t>(std::find(order.begin(), order.end(), last * kRowsPerGroup) -
                                              order.begin());
  ASSERT_LT(position, got.indices.size());
  const int64_t substitute = got.indices[position];
  EXPECT_GT(substitute, last * kRowsPerGroup);
  EXPECT_LT(substitute, kSamples);
  EXPECT_EQ(loader->Stats().replaced, 1);
}

TEST(DeferredLoaderTest, ReplacedInAGroupWhoseFirstRowsWereReleased) {
  // Group 1's rows counted per row, decoded (one decoder, in order) 0-4, then row 6 without
  // bytes, then 5 and 7: by row 6 the rows decoded are released (row 0 among them) and only
  // rows 5 and 7 can stand in for it.
  Dataset data = MakeDataset();
  data.groups[1] = WithoutBytes(data, 1, 6);
  std::vector<int64_t> order;
  for (int r : {0, 1, 2, 3, 4, 6, 5, 7}) order.push_back(kRowsPerGroup + r);
  std::unique_ptr<Loader> loader;
  const Delivered got = RunFed(data, order, ErrorPolicy::kReplace, &loader, /*per_row=*/true);
  ASSERT_TRUE(got.errors.empty()) << got.errors.front();
  ASSERT_EQ(got.indices.size(), order.size());
  EXPECT_TRUE(got.indices[5] == kRowsPerGroup + 5 || got.indices[5] == kRowsPerGroup + 7) << got.indices[5];
  const LoaderStats stats = loader->Stats();
  EXPECT_GE(stats.row_group_compactions, 1);
  EXPECT_EQ(stats.replaced, 1);
  EXPECT_EQ(stats.row_group_bytes_held, 0);
}

TEST(DeferredLoaderTest, EpochWaitingForAGroupThatNeverComesStopsPromptly) {
  const Dataset data = MakeDataset();
  const std::vector<int64_t> order = ShuffledWithinGroups({0, 1, 2});
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(data.deferred, Options(ErrorPolicy::kRaise, 2));
  ASSERT_TRUE(loader.ok()) << loader.status();
  DeferredRows* rows = (*loader)->deferred_rows();
  ASSERT_TRUE(rows->Attach(0, data.groups[0], kRowsPerGroup).ok());  // group 1 never comes
  // Takes group 0's batches until Next() times out: the reader then waits for group 1.
  const auto drain_group_0 = [&] {
    int delivered = 0;
    for (int call = 0; call < 10; ++call) {
      absl::StatusOr<Batch> batch = (*loader)->Next(0.05);
      if (absl::IsDeadlineExceeded(batch.status())) break;
      ASSERT_TRUE(batch.ok()) << batch.status();
      for (int r = 0; r < batch->size(); ++r) EXPECT_LT(batch->indices()[r], kRowsPerGroup);
      delivered += batch->size();
    }
    EXPECT_EQ(delivered, kRowsPerGroup);
  };

  // Polls (at most a second) until `n` reader waits began.
  const auto await_waits = [&](int64_t n) {
    for (int i = 0; i < 200 && rows->counts().reader_waits < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(rows->counts().reader_waits, n);
  };

  ASSERT_TRUE((*loader)->StartEpoch(0, 3, order, Offsets(order.size(), 2)).ok());
  drain_group_0();
  await_waits(1);
  EXPECT_FALSE(rows->Held(0));  // every use decoded
  auto start = std::chrono::steady_clock::now();
  (*loader)->Stop();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);

  // A new epoch started while a reader waits stops the old one as promptly.
  rows->Clear();
  ASSERT_TRUE(rows->Attach(0, data.groups[0], kRowsPerGroup).ok());
  ASSERT_TRUE((*loader)->StartEpoch(0, 3, order, Offsets(order.size(), 2)).ok());
  drain_group_0();
  await_waits(2);
  start = std::chrono::steady_clock::now();
  ASSERT_TRUE((*loader)->StartEpoch(1, 3, order, Offsets(order.size(), 2)).ok());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
  // Group 0 is gone too: the new epoch's reader waits at once.
  absl::StatusOr<Batch> batch = (*loader)->Next(0.05);
  EXPECT_TRUE(absl::IsDeadlineExceeded(batch.status())) << batch.status();

  // Destroyed while the new epoch's reader waits: returns too.
  start = std::chrono::steady_clock::now();
  loader->reset();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
}

Sample Deferred(int group, int row) {
  Sample s;
  s.path = "<g" + std::to_string(group) + " r" + std::to_string(row) + ">";
  s.source = SourceKind::kDeferred;
  s.group = group;
  s.offset = static_cast<uint64_t>(row);
  return s;
}

TEST(DeferredLoaderTest, CreateRefusesAGroupWhoseRowsAreNotConsecutiveSamples) {
  const LoaderOptions options = Options(ErrorPolicy::kRaise, 1);
  Sample memory;
  static const uint8_t kByte = 0;
  memory.path = "<memory>";
  memory.source = SourceKind::kMemory;
  memory.memory = &kByte;
  memory.length = 1;
  struct Case {
    const char* name;
    std::vector<Sample> samples;
    const char* names;  // the sample the error must name
  };
  const Case cases[] = {
      {"a row skipped", {Deferred(0, 0), Deferred(0, 2)}, "sample 1 "},
      {"row 0 twice", {Deferred(0, 0), Deferred(0, 1), Deferred(0, 0)}, "sample 2 "},
      {"no row 0", {memory, Deferred(0, 1)}, "sample 1 "},
      {"another group's row in between", {Deferred(0, 0), Deferred(1, 0), Deferred(0, 2)}, "sample 2 "},
      {"another sample in between", {Deferred(0, 0), memory, Deferred(0, 2)}, "sample 2 "},
      {"a negative group", {Deferred(-1, 0)}, "sample 0 "},
      {"a negative row", {Deferred(0, -1)}, "sample 0 "},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(c.samples, options);
    ASSERT_FALSE(loader.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(loader.status())) << loader.status();
    EXPECT_NE(loader.status().message().find(c.names), std::string::npos) << loader.status();
  }
  // Consecutive rows, groups in any order, next to other samples: accepted.
  absl::StatusOr<std::unique_ptr<Loader>> ok = Loader::Create(
      {Deferred(1, 0), Deferred(1, 1), memory, Deferred(0, 0), Deferred(0, 1), Deferred(0, 2)}, options);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->deferred_rows()->num_groups(), 2);
}

}  // namespace
}  // namespace ringloader
