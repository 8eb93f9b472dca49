// Bursts of samples that fail before or at their read (missing, empty, a directory, a FIFO, a
// symlink loop, a failing pipe: command, known bad) never stop an epoch: every batch arrives or
// fails once, under every policy, backend and thread count. A watchdog (Next's timeout) turns
// a hang into a failure that says which stage holds what.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ringloader/ringloader.h"
#include "testing/jpeg_fixtures.h"

namespace ringloader {
namespace {

using testing::MakeTempDir;
using testing::WriteFile;

constexpr double kWatchdogSeconds = 30;

enum class Backend { kPread, kUring, kPipe };

// Resize((size, size)): the cheapest transform, so a case costs its I/O and scheduling.
TransformStep Resize(int size) {
  ResizeParams resize;
  resize.size_h = resize.size_w = size;
  return resize;
}

// A sample read from a command's stdout (only ever built from a command the caller wrote).
Sample Pipe(std::string command, int64_t label, uint64_t offset, int64_t length) {
  Sample s(std::move(command), label, offset, length);
  s.source = SourceKind::kPipe;
  return s;
}

const char* Name(Backend b) {
  switch (b) {
    case Backend::kPread: return "pread";
    case Backend::kUring: return "io_uring";
    case Backend::kPipe: return "pipe";
  }
  return "?";
}

const char* Name(ErrorPolicy p) {
  switch (p) {
    case ErrorPolicy::kRaise: return "raise";
    case ErrorPolicy::kSkip: return "skip";
    case ErrorPolicy::kReplace: return "replace";
  }
  return "?";
}

// A dataset of good JPEGs with failing samples mixed in, on disk under `dir`.
class Mix {
 public:
  Mix(const std::string& dir, Backend backend) : dir_(dir), backend_(backend) {
    goods_ = testing::WriteJpegDataset(dir, 12);
    if (backend == Backend::kPipe) {
      // The good samples become byte ranges of one blob streamed by `cat`.
      const std::string blob = dir + "/blob.bin";
      std::ofstream out(blob, std::ios::binary);
      uint64_t offset = 0;
      for (Sample& s : goods_) {
        std::ifstream in(s.path, std::ios::binary);
        std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        s = Pipe(absl::StrCat("pipe:cat ", blob), s.label, offset, static_cast<int64_t>(bytes.size()));
        offset += bytes.size();
      }
    }
  }

  Sample Good(int i) const { return goods_[static_cast<size_t>(i) % goods_.size()]; }

  // The k-th failing sample: cycles through the ways a read fails before any byte is read.
  Sample Bad(int k) {
    const std::string path = absl::StrCat(dir_, "/bad_", k, ".jpg");
    switch (k % 7) {
      case 0:
        return Sample(path, 0);  // missing
      case 1:
        WriteFile(path, {});  // empty
        return Sample(path, 0);
      case 2:
        mkdir(path.c_str(), 0755);  // a directory named like an image
        return Sample(path, 0);
      case 3:
        mkfifo(path.c_str(), 0644);  // a FIFO: must not block the reader
        return Sample(path, 0);
      case 4:
        (void)symlink(path.c_str(), path.c_str());  // a symlink loop: ELOOP
        return Sample(path, 0);
      case 5:
        return Sample(path, 0, 0, -1, "known bad: a shard group without an image");
      default:
        if (backend_ == Backend::kPipe) return Pipe(absl::StrCat("pipe:cat ", path, " 2>/dev/null"), 0, 0, 100);
        return Sample(dir_ + "/no_such_dir/x.jpg", 0);  // missing parent
    }
  }

 private:
  std::string dir_;
  Backend backend_;
  std::vector<Sample> goods_;
};

struct Outcome {
  int64_t delivered_batches = 0;
  int64_t delivered_rows = 0;
  int64_t failed_batches = 0;
  std::set<int64_t> delivered_indices;
  std::string problem;  // empty when the epoch ended properly
};

Outcome RunEpoch(Loader& loader, int64_t batches_per_epoch) {
  Outcome out;
  if (absl::Status s = loader.StartEpoch(0); !s.ok()) {
    out.problem = s.ToString();
    return out;
  }
  for (int64_t calls = 0; calls <= batches_per_epoch + 1; ++calls) {
    absl::StatusOr<Batch> batch = loader.Next(kWatchdogSeconds);
    if (batch.ok()) {
      ++out.delivered_batches;
      out.delivered_rows += batch->size();
      for (int r = 0; r < batch->size(); ++r) out.delivered_indices.insert(batch->indices()[r]);
      continue;
    }
    if (absl::IsDeadlineExceeded(batch.status())) {
      out.problem = absl::StrCat("hang: ", batch.status().message(), "; ", loader.Stats().pipeline_state);
      return out;
    }
    if (absl::IsOutOfRange(batch.status()) && loader.next_batch() >= loader.num_batches()) return out;
    ++out.failed_batches;  // a sample error under kRaise: the next call goes on
  }
  out.problem = "more Next() calls than batches";
  return out;
}

struct Case {
  Backend backend;
  ErrorPolicy policy;
  int workers;
  bool shuffle;
  int burst;
  int where;  // 0: start, 1: middle, 2: end of the epoch
};

void CheckCase(const Case& c) {
  SCOPED_TRACE(absl::StrCat(Name(c.backend), " ", Name(c.policy), " workers=", c.workers, " shuffle=",
                            c.shuffle, " burst=", c.burst, " at ", c.where));
  const std::string dir = MakeTempDir();
  Mix mix(dir, c.backend);
  constexpr int kGood = 24;
  std::vector<Sample> samples;
  std::set<int64_t> bad_indices;
  const int insert_at = c.where == 0 ? 0 : c.where == 1 ? kGood / 2 : kGood;
  for (int i = 0; i <= kGood; ++i) {
    if (i == insert_at) {
      for (int k = 0; k < c.burst; ++k) {
        bad_indices.insert(static_cast<int64_t>(samples.size()));
        samples.push_back(mix.Bad(k));
      }
    }
    if (i < kGood) samples.push_back(mix.Good(i));
  }
  LoaderOptions o;
  o.batch_size = 5;
  o.num_workers = c.workers;
  o.reader_threads = 1;
  o.io_depth = 4;
  o.prefetch_batches = 2;
  o.io = c.backend == Backend::kUring ? IoBackend::kUring : IoBackend::kPread;
  o.on_error = c.policy;
  o.shuffle = c.shuffle;
  o.seed = 3;
  o.transform = {Resize(16)};
  auto loader = Loader::Create(samples, o);
  if (!loader.ok() && c.backend == Backend::kUring) GTEST_SKIP() << "io_uring unavailable: " << loader.status();
  ASSERT_TRUE(loader.ok()) << loader.status();
  const int64_t batches = (*loader)->BatchesPerEpoch();
  Outcome out = RunEpoch(**loader, batches);
  ASSERT_EQ(out.problem, "");
  const LoaderStats stats = (*loader)->Stats();
  const int64_t n = static_cast<int64_t>(samples.size());
  switch (c.policy) {
    case ErrorPolicy::kSkip:
      EXPECT_EQ(out.delivered_rows, kGood);
      EXPECT_EQ(out.failed_batches, 0);
      EXPECT_EQ(stats.skipped, c.burst);
      for (int64_t i : out.delivered_indices) EXPECT_EQ(bad_indices.count(i), 0u) << i;
      break;
    case ErrorPolicy::kReplace:
      EXPECT_EQ(out.delivered_rows, n);
      EXPECT_EQ(out.failed_batches, 0);
      EXPECT_EQ(stats.replaced, c.burst);
      break;
    case ErrorPolicy::kRaise: {
      // Each batch holding a failing sample fails once; every other batch arrives whole.
      EXPECT_EQ(out.delivered_batches + out.failed_batches, batches);
      for (int64_t i : out.delivered_indices) EXPECT_EQ(bad_indices.count(i), 0u) << i;
      if (!c.shuffle) {
        std::set<int64_t> failing;
        for (int64_t i : bad_indices) failing.insert(i / o.batch_size);
        int64_t lost_rows = 0;
        for (int64_t b : failing) lost_rows += std::min<int64_t>(o.batch_size, n - b * o.batch_size);
        EXPECT_EQ(out.failed_batches, static_cast<int64_t>(failing.size()));
        EXPECT_EQ(out.delivered_rows, n - lost_rows);
      }
      break;
    }
  }
  // Every failing sample is counted (a replacement that fails too counts again).
  if (c.policy == ErrorPolicy::kReplace) {
    EXPECT_GE(stats.errors, c.burst);
  } else {
    EXPECT_EQ(stats.errors, c.burst);
  }
  EXPECT_FALSE(stats.recent_errors.empty());
  EXPECT_FALSE(stats.stalled);
}

TEST(FailureBurstTest, NoBurstStopsAnEpoch) {
  for (Backend backend : {Backend::kPread, Backend::kUring}) {
    for (ErrorPolicy policy : {ErrorPolicy::kRaise, ErrorPolicy::kSkip, ErrorPolicy::kReplace}) {
      for (int workers : {1, 2}) {
        for (bool shuffle : {false, true}) {
          for (int burst : {1, 9, 64}) {
            for (int where : {0, 1, 2}) CheckCase({backend, policy, workers, shuffle, burst, where});
          }
        }
      }
    }
  }
}

TEST(FailureBurstTest, NoBurstOfPipeMembersStopsAnEpoch) {
  for (ErrorPolicy policy : {ErrorPolicy::kRaise, ErrorPolicy::kSkip, ErrorPolicy::kReplace}) {
    for (int burst : {1, 9, 33}) {
      for (int where : {0, 1, 2}) CheckCase({Backend::kPipe, policy, 2, false, burst, where});
    }
  }
}

// A seeded mix of good and failing samples, many seeds: every epoch ends, skip delivers exactly
// the good ones once. (The sanitizer builds run this too, TSan included.)
TEST(FailureBurstTest, RandomMixesAlwaysEnd) {
  const std::string dir = MakeTempDir();
  Mix mix(dir, Backend::kPread);
  for (uint32_t seed = 0; seed < 24; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    std::mt19937 rng(seed);
    const int bad_percent = static_cast<int>(rng() % 90) + 5;
    std::vector<Sample> samples;
    int good = 0, bad = 0;
    for (int i = 0; i < 60; ++i) {
      if (static_cast<int>(rng() % 100) < bad_percent) {
        samples.push_back(mix.Bad(static_cast<int>(rng() % 7) + 7 * static_cast<int>(rng() % 4)));
        ++bad;
      } else {
        samples.push_back(mix.Good(i));
        ++good;
      }
    }
    LoaderOptions o;
    o.batch_size = 1 + static_cast<int>(rng() % 9);
    o.num_workers = 1 + static_cast<int>(rng() % 2);
    o.io_depth = 1 + static_cast<int>(rng() % 6);
    o.prefetch_batches = 1 + static_cast<int>(rng() % 3);
    o.io = rng() % 2 ? IoBackend::kAuto : IoBackend::kPread;
    o.on_error = ErrorPolicy::kSkip;
    o.shuffle = rng() % 2;
    o.seed = seed;
    o.transform = {Resize(8)};
    auto loader = Loader::Create(samples, o);
    ASSERT_TRUE(loader.ok()) << loader.status();
    Outcome out = RunEpoch(**loader, (*loader)->BatchesPerEpoch());
    ASSERT_EQ(out.problem, "");
    EXPECT_EQ(out.delivered_rows, good);
    EXPECT_EQ((*loader)->Stats().skipped, bad);
  }
}

// The stall report: a reader stuck on a pipe: command that never writes is named, and Stop()
// still ends the epoch at once.
TEST(FailureBurstTest, StallReportNamesTheStuckStage) {
  const std::string dir = MakeTempDir();
  std::vector<Sample> samples = testing::WriteJpegDataset(dir, 4);
  samples.push_back(Pipe("pipe:sleep 30", 0, 0, 100));
  LoaderOptions o;
  o.batch_size = 5;
  o.num_workers = 1;
  o.stall_seconds = 0.2;
  o.transform = {Resize(8)};
  auto loader = Loader::Create(samples, o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded((*loader)->Next(0.5).status()));
  const LoaderStats stats = (*loader)->Stats();
  EXPECT_TRUE(stats.stalled);
  EXPECT_GE(stats.seconds_since_progress, 0.2);
  EXPECT_NE(stats.pipeline_state.find("1 streaming a pipe: command"), std::string::npos) << stats.pipeline_state;
  EXPECT_NE(stats.pipeline_state.find("batches in flight 1 (0 complete)"), std::string::npos)
      << stats.pipeline_state;
  const auto start = std::chrono::steady_clock::now();
  (*loader)->Stop();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  EXPECT_EQ((*loader)->Stats().pipeline_state, "");
}

TEST(FailureBurstTest, StallSecondsMustBePositive) {
  const std::string dir = MakeTempDir();
  LoaderOptions o;
  o.stall_seconds = 0;
  auto loader = Loader::Create(testing::WriteJpegDataset(dir, 2), o);
  ASSERT_FALSE(loader.ok());
  EXPECT_NE(loader.status().message().find("stall_seconds"), std::string::npos);
}

}  // namespace
}  // namespace ringloader
