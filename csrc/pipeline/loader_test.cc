#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "pipeline/slot_pool.h"
#include "ringloader/ringloader.h"
#include "testing/jpeg_fixtures.h"

namespace ringloader {
namespace {

using testing::MakeTempDir;
using testing::WriteFile;

std::vector<Sample> MakeDataset(int n, const std::string& dir) { return testing::WriteJpegDataset(dir, n); }

LoaderOptions TrainOptions() {
  LoaderOptions o;
  o.batch_size = 5;
  o.num_workers = 2;
  o.prefetch_batches = 3;
  o.io_depth = 4;
  RandomResizedCropParams crop;
  crop.size_h = crop.size_w = 64;
  HorizontalFlipParams flip;
  ToTensorParams tensor;
  o.transform = {crop, flip, tensor};
  o.dtype = DType::kFloat32;
  return o;
}

// Runs an epoch and returns (index order, batch bytes).
std::pair<std::vector<int64_t>, std::vector<uint8_t>> RunEpoch(Loader& loader, int64_t epoch) {
  EXPECT_TRUE(loader.StartEpoch(epoch).ok());
  std::vector<int64_t> order;
  std::vector<uint8_t> bytes;
  int64_t expected_number = 0;
  while (true) {
    absl::StatusOr<Batch> batch = loader.Next();
    if (absl::IsOutOfRange(batch.status())) break;
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok()) break;
    EXPECT_EQ(batch->number(), expected_number++);
    for (int r = 0; r < batch->size(); ++r) order.push_back(batch->indices()[r]);
    auto* p = static_cast<uint8_t*>(batch->images());
    bytes.insert(bytes.end(), p, p + batch->size() * batch->sample_bytes());
  }
  return {order, bytes};
}

TEST(LoaderTest, DeliversEveryIndexOnceInOrderWithLabels) {
  const std::string dir = MakeTempDir();
  auto samples = MakeDataset(23, dir);
  LoaderOptions o = TrainOptions();
  o.shuffle = true;
  o.seed = 9;
  auto loader = Loader::Create(samples, o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ((*loader)->BatchesPerEpoch(), 5);
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  std::vector<int64_t> seen;
  while (true) {
    absl::StatusOr<Batch> batch = (*loader)->Next();
    if (absl::IsOutOfRange(batch.status())) break;
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(batch->image_shape(), (std::vector<int64_t>{batch->size(), 3, 64, 64}));
    for (int r = 0; r < batch->size(); ++r) {
      seen.push_back(batch->indices()[r]);
      EXPECT_EQ(batch->labels()[r], samples[batch->indices()[r]].label);
    }
  }
  EXPECT_EQ(seen.size(), 23u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 23u);
  EXPECT_FALSE(std::is_sorted(seen.begin(), seen.end())) << "shuffle=true";
  EXPECT_EQ((*loader)->Stats().samples, 23);
}

TEST(LoaderTest, BitIdenticalForAnyThreadCountAndReader) {
  const std::string dir = MakeTempDir();
  auto samples = MakeDataset(17, dir);
  std::vector<uint8_t> reference;
  for (int workers : {1, 2, 4}) {
    for (IoBackend io : {IoBackend::kPread, IoBackend::kAuto}) {
      LoaderOptions o = TrainOptions();
      o.num_workers = workers;
      o.io = io;
      o.shuffle = true;
      auto loader = Loader::Create(samples, o);
      ASSERT_TRUE(loader.ok());
      auto [order, bytes] = RunEpoch(**loader, 2);
      if (reference.empty()) reference = bytes;
      EXPECT_EQ(bytes, reference) << "workers=" << workers;
    }
  }
  // Each row also equals the single-sample path for the same (seed, epoch, index).
  LoaderOptions o = TrainOptions();
  auto loader = Loader::Create(samples, o);
  ASSERT_TRUE(loader.ok());
  auto [order, bytes] = RunEpoch(**loader, 1);
  const size_t sample_bytes = (*loader)->sample_bytes();
  std::vector<uint8_t> one(sample_bytes);
  for (size_t i = 0; i < order.size(); ++i) {
    ASSERT_TRUE((*loader)->DecodeSample(order[i], o.seed, 1, one.data()).ok());
    ASSERT_EQ(std::memcmp(one.data(), bytes.data() + i * sample_bytes, sample_bytes), 0) << i;
  }
}

TEST(LoaderTest, BadSampleFailsItsBatchAfterEarlierOnesThenContinues) {
  const std::string dir = MakeTempDir();
  auto samples = MakeDataset(12, dir);
  WriteFile(samples[7].path, {'n', 'o', 't', ' ', 'j', 'p', 'e', 'g'});
  samples[9].path = dir + "/does_not_exist.jpg";
  LoaderOptions o = TrainOptions();
  o.batch_size = 3;
  auto loader = Loader::Create(samples, o);
  ASSERT_TRUE(loader.ok());
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  std::vector<std::string> outcomes;
  while (true) {
    absl::StatusOr<Batch> batch = (*loader)->Next();
    if (absl::IsOutOfRange(batch.status()) && !batch.status().GetPayload(kSampleIndexPayload)) break;
    if (batch.ok()) {
      outcomes.push_back(absl::StrCat("ok", batch->number()));
    } else {
      auto index = batch.status().GetPayload(kSampleIndexPayload);
      ASSERT_TRUE(index.has_value()) << batch.status();
      outcomes.push_back(absl::StrCat("err", std::string(*index)));
      EXPECT_NE(batch.status().message().find(samples[std::stoi(std::string(*index))].path),
                std::string::npos);
    }
  }
  // batches: [0,1,2] [3,4,5] [6,7,8] [9,10,11]
  EXPECT_EQ(outcomes, (std::vector<std::string>{"ok0", "ok1", "err7", "err9"}));
  EXPECT_EQ((*loader)->Stats().errors, 2);
}

TEST(LoaderTest, SkipPolicyLeavesBadSamplesOutAndKeepsOrder) {
  const std::string dir = MakeTempDir();
  auto samples = MakeDataset(12, dir);
  WriteFile(samples[4].path, {'b', 'a', 'd'});
  WriteFile(samples[9].path, {'b', 'a', 'd'});
  WriteFile(samples[10].path, {'b', 'a', 'd'});
  WriteFile(samples[11].path, {'b', 'a', 'd'});
  LoaderOptions o = TrainOptions();
  o.batch_size = 3;
  o.on_error = ErrorPolicy::kSkip;
  auto loader = Loader::Create(samples, o);
  ASSERT_TRUE(loader.ok());
  // batches: [0,1,2] [3,x,5] [6,7,8] [x,x,x] -> the last is skipped entirely
  auto [order, bytes] = RunEpoch(**loader, 0);
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 5, 6, 7, 8}));
  LoaderStats stats = (*loader)->Stats();
  EXPECT_EQ(stats.skipped, 4);
  EXPECT_EQ(stats.errors, 4);
  ASSERT_EQ(stats.recent_errors.size(), 4u);
  EXPECT_NE(stats.last_error.find("img_"), std::string::npos);
  // Rows after a gap hold the right images: compare with the single-sample path.
  const size_t sample_bytes = (*loader)->sample_bytes();
  std::vector<uint8_t> one(sample_bytes);
  ASSERT_TRUE((*loader)->DecodeSample(5, o.seed, 0, one.data()).ok());
  EXPECT_EQ(std::memcmp(one.data(), bytes.data() + 4 * sample_bytes, sample_bytes), 0);
}

TEST(LoaderTest, ReplacePolicyKeepsBatchSizeDeterministically) {
  const std::string dir = MakeTempDir();
  auto samples = MakeDataset(12, dir);
  WriteFile(samples[4].path, {'b', 'a', 'd'});
  LoaderOptions o = TrainOptions();
  o.batch_size = 3;
  o.on_error = ErrorPolicy::kReplace;
  std::vector<int64_t> first_order;
  std::vector<uint8_t> first_bytes;
  for (int workers : {1, 3}) {
    o.num_workers = workers;
    auto loader = Loader::Create(samples, o);
    ASSERT_TRUE(loader.ok());
    auto [order, bytes] = RunEpoch(**loader, 0);
    ASSERT_EQ(order.size(), 12u) << "batches keep their size";
    EXPECT_NE(order[4], 4) << "row 4 holds a substitute";
    EXPECT_EQ((*loader)->Stats().replaced, 1);
    if (first_order.empty()) {
      first_order = order;
      first_bytes = bytes;
    } else {
      EXPECT_EQ(order, first_order);
      EXPECT_EQ(bytes, first_bytes);
    }
  }
}

// Whole-file samples as SampleColumns (a path arena, ends and labels), kept by the caller.
struct Columns {
  std::string paths;
  std::vector<int64_t> ends, labels;
  SampleColumns view() const {
    SampleColumns c;
    c.paths = paths.data();
    c.paths_size = paths.size();
    c.ends = ends.data();
    c.labels = labels.data();
    c.size = ends.size();
    return c;
  }
};

Columns ColumnsOf(const std::vector<Sample>& samples) {
  Columns c;
  for (const Sample& s : samples) {
    c.paths += s.path;
    c.ends.push_back(static_cast<int64_t>(c.paths.size()));
    c.labels.push_back(s.label);
  }
  return c;
}

TEST(LoaderTest, ColumnsDeliverWhatTheirSamplesDeliver) {
  const std::string dir = MakeTempDir();
  auto samples = MakeDataset(13, dir);
  for (size_t i = 0; i < samples.size(); ++i) samples[i].label = 100 + 7 * static_cast<int64_t>(i);
  WriteFile(samples[4].path, {'b', 'a', 'd'});
  const Columns columns = ColumnsOf(samples);
  LoaderOptions o = TrainOptions();
  o.batch_size = 3;
  o.shuffle = true;
  o.seed = 5;
  for (ErrorPolicy policy : {ErrorPolicy::kReplace, ErrorPolicy::kSkip, ErrorPolicy::kRaise}) {
    o.on_error = policy;
    auto from_samples = Loader::Create(samples, o);
    auto from_columns = Loader::CreateFromColumns(columns.view(), o);
    ASSERT_TRUE(from_samples.ok() && from_columns.ok()) << from_columns.status();
    EXPECT_EQ((*from_columns)->dataset_size(), 13);
    for (int64_t epoch : {0, 1}) {
      std::vector<std::string> got[2];
      for (int k = 0; k < 2; ++k) {
        Loader& loader = k == 0 ? **from_samples : **from_columns;
        ASSERT_TRUE(loader.StartEpoch(epoch).ok());
        while (true) {
          absl::StatusOr<Batch> batch = loader.Next();
          if (absl::IsOutOfRange(batch.status())) break;
          if (!batch.ok()) {
            // The bad file's error names it, from the arena as from its Sample.
            got[k].push_back(std::string(batch.status().message()));
            continue;
          }
          const auto* p = static_cast<const uint8_t*>(batch->images());
          std::string rows(p, p + batch->size() * batch->sample_bytes());
          for (int r = 0; r < batch->size(); ++r) {
            absl::StrAppend(&rows, " ", batch->indices()[r], ":", batch->labels()[r]);
          }
          got[k].push_back(rows);
        }
      }
      EXPECT_EQ(got[0], got[1]) << "policy " << static_cast<int>(policy) << " epoch " << epoch;
    }
    EXPECT_EQ((*from_columns)->Stats().errors, (*from_samples)->Stats().errors);
    EXPECT_EQ((*from_columns)->Stats().replaced, (*from_samples)->Stats().replaced);
  }
  // One sample on the calling thread, and its failure naming the path.
  std::vector<uint8_t> a(samples.size() * 64 * 64 * 3 * 4), b(a.size());
  auto from_samples = Loader::Create(samples, o);
  auto from_columns = Loader::CreateFromColumns(columns.view(), o);
  ASSERT_TRUE(from_samples.ok() && from_columns.ok());
  ASSERT_TRUE((*from_samples)->DecodeSample(7, 3, 1, a.data()).ok());
  ASSERT_TRUE((*from_columns)->DecodeSample(7, 3, 1, b.data()).ok());
  EXPECT_EQ(a, b);
  const absl::Status bad = (*from_columns)->DecodeSample(4, 3, 1, b.data());
  EXPECT_NE(bad.message().find(samples[4].path), std::string::npos) << bad;
  EXPECT_EQ(bad.message(), (*from_samples)->DecodeSample(4, 3, 1, a.data()).message());
}

TEST(LoaderTest, ColumnsWhosePathEndsRunBackOrPastTheArenaAreRefused) {
  Columns c;
  c.paths = "a.jpgbb.jpg";
  c.ends = {5, 11};
  c.labels = {0, 1};
  LoaderOptions o = TrainOptions();
  c.ends = {5, 12};
  auto past = Loader::CreateFromColumns(c.view(), o);
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().message(), "path arena: end 12 of path 1 is outside [5, 11]");
  c.ends = {5, 4};
  EXPECT_FALSE(Loader::CreateFromColumns(c.view(), o).ok());
  c.ends = {-1, 11};
  EXPECT_FALSE(Loader::CreateFromColumns(c.view(), o).ok());
  SampleColumns none = c.view();
  none.size = 0;
  EXPECT_NE(Loader::CreateFromColumns(none, o).status().message().find("empty"), std::string::npos);
}

// The dataset's files concatenated into one "shard" with junk between them; samples become byte
// ranges of it.
std::vector<Sample> PackIntoShard(const std::vector<Sample>& files, const std::string& shard_path) {
  std::vector<uint8_t> shard(100, 0xAB);
  std::vector<Sample> ranged;
  for (const Sample& file : files) {
    FILE* f = fopen(file.path.c_str(), "rb");
    EXPECT_NE(f, nullptr);
    std::vector<uint8_t> bytes;
    uint8_t chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) bytes.insert(bytes.end(), chunk, chunk + n);
    fclose(f);
    Sample s;
    s.path = shard_path;
    s.label = file.label;
    s.offset = shard.size();
    s.length = static_cast<int64_t>(bytes.size());
    ranged.push_back(s);
    shard.insert(shard.end(), bytes.begin(), bytes.end());
    shard.insert(shard.end(), 37 + shard.size() % 500, 0xCD);
  }
  WriteFile(shard_path, shard);
  return ranged;
}

TEST(LoaderTest, ByteRangeSamplesDecodeLikeTheirFiles) {
  const std::string dir = MakeTempDir();
  auto files = MakeDataset(14, dir);
  auto ranged = PackIntoShard(files, dir + "/shard.bin");
  for (IoBackend io : {IoBackend::kPread, IoBackend::kAuto}) {
    LoaderOptions o = TrainOptions();
    o.shuffle = true;
    o.io = io;
    auto whole = Loader::Create(files, o);
    auto members = Loader::Create(ranged, o);
    ASSERT_TRUE(whole.ok() && members.ok());
    auto [order_a, bytes_a] = RunEpoch(**whole, 3);
    auto [order_b, bytes_b] = RunEpoch(**members, 3);
    EXPECT_EQ(order_a, order_b);
    EXPECT_EQ(bytes_a, bytes_b) << "members read by range decode exactly like their files";
    // Stats count the members' bytes, not the shard's.
    EXPECT_EQ((*members)->Stats().bytes_read, (*whole)->Stats().bytes_read);
    // The single-sample path reads the range too.
    const size_t sample_bytes = (*members)->sample_bytes();
    std::vector<uint8_t> one(sample_bytes), reference(sample_bytes);
    for (int64_t index : {0, 5, 13}) {
      ASSERT_TRUE((*members)->DecodeSample(index, o.seed, 3, one.data()).ok());
      ASSERT_TRUE((*whole)->DecodeSample(index, o.seed, 3, reference.data()).ok());
      EXPECT_EQ(one, reference) << index;
    }
  }
  // A member past the shard's end fails with DataLoss naming index and shard.
  ranged[5].offset = 1u << 30;
  LoaderOptions o = TrainOptions();
  o.batch_size = 7;
  auto loader = Loader::Create(ranged, o);
  ASSERT_TRUE(loader.ok());
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  absl::StatusOr<Batch> batch = (*loader)->Next();
  ASSERT_TRUE(absl::IsDataLoss(batch.status())) << batch.status();
  EXPECT_EQ(std::string(*batch.status().GetPayload(kSampleIndexPayload)), "5");
  EXPECT_NE(batch.status().message().find("truncated: " + dir + "/shard.bin has"), std::string::npos)
      << batch.status();
}

#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif
#else
constexpr bool kThreadSanitizer = false;
#endif

TEST(LoaderTest, AForkedChildRunsItsOwnEpochOverPipeStreams) {
  if (kThreadSanitizer) {
    GTEST_SKIP() << "ThreadSanitizer cannot start threads in the child of a multi-threaded fork "
                    "(the plain and ASan builds run this test)";
  }
  const std::string dir = MakeTempDir();
  auto files = MakeDataset(10, dir);
  std::vector<Sample> piped = PackIntoShard(files, dir + "/shard.bin");
  for (Sample& s : piped) {
    s.path = "pipe:cat " + dir + "/shard.bin";
    s.source = SourceKind::kPipe;
  }
  LoaderOptions o = TrainOptions();
  auto whole = Loader::Create(files, o);
  auto loader = Loader::Create(piped, o);
  ASSERT_TRUE(whole.ok() && loader.ok());
  const auto expected = RunEpoch(**whole, 1);
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  ASSERT_TRUE((*loader)->Next().ok());  // the parent's epoch is mid-way at the fork
  // ... with its threads idle: a thread inside malloc at the fork leaves the allocator's lock
  // held in the child. glibc's malloc takes its locks around fork, ASan's allocator (GCC 12) does
  // not, and the child then hangs in its first malloc under ASan (about 1 run in 5).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((*loader)->Stats().batches_completed < (*loader)->num_batches() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // readers finish exiting
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child abandons the parent's epoch and streams, then runs one of its own.
    const auto got = RunEpoch(**loader, 1);
    const LoaderStats stats = (*loader)->Stats();
    _exit(got == expected && stats.bytes_read > 0 ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  (*loader)->Stop();
}

TEST(LoaderTest, PipeStreamSamplesDecodeLikeTheirFiles) {
  const std::string dir = MakeTempDir();
  auto files = MakeDataset(14, dir);
  auto ranged = PackIntoShard(files, dir + "/shard.bin");
  std::vector<Sample> piped = ranged;
  for (Sample& s : piped) {
    s.path = "pipe:cat " + dir + "/shard.bin";
    s.source = SourceKind::kPipe;
  }
  LoaderOptions o = TrainOptions();
  o.shuffle = true;
  o.reader_threads = 2;
  auto whole = Loader::Create(files, o);
  auto streamed = Loader::Create(piped, o);
  ASSERT_TRUE(whole.ok() && streamed.ok());
  for (int64_t epoch : {0, 1}) {
    auto [order_a, bytes_a] = RunEpoch(**whole, epoch);
    auto [order_b, bytes_b] = RunEpoch(**streamed, epoch);
    EXPECT_EQ(order_a, order_b);
    EXPECT_EQ(bytes_a, bytes_b) << "epoch " << epoch;
  }
  // The epoch in progress owns each stream's command: nothing is queued ahead.
  ASSERT_TRUE((*streamed)->QueueEpoch(2).ok());
  EXPECT_FALSE((*streamed)->HasQueuedEpoch());
  // Every member the epoch wants is kept as the stream passes it: no restarts, whatever the order.
  EXPECT_EQ((*streamed)->Stats().stream_restarts, 0);
  std::vector<uint8_t> one((*streamed)->sample_bytes()), reference(one.size());
  ASSERT_TRUE((*streamed)->DecodeSample(9, 1, 0, one.data()).ok());
  ASSERT_TRUE((*whole)->DecodeSample(9, 1, 0, reference.data()).ok());
  EXPECT_EQ(one, reference);
}

TEST(LoaderTest, PipeStreamErrorsAreSampleErrorsAndReplaceable) {
  const std::string dir = MakeTempDir();
  auto files = MakeDataset(8, dir);
  auto ranged = PackIntoShard(files, dir + "/shard.bin");
  // The stream ends inside member 5: members 5.. fail, with index and path.
  const uint64_t cut = ranged[5].offset + 10;
  const std::string path = absl::StrCat("pipe:cat ", dir, "/shard.bin | head -c ", cut);
  for (Sample& s : ranged) {
    s.path = path;
    s.source = SourceKind::kPipe;
  }
  LoaderOptions o = TrainOptions();
  o.batch_size = 4;
  auto loader = Loader::Create(ranged, o);
  ASSERT_TRUE(loader.ok());
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  ASSERT_TRUE((*loader)->Next().ok());
  absl::StatusOr<Batch> batch = (*loader)->Next();
  ASSERT_TRUE(absl::IsDataLoss(batch.status())) << batch.status();
  EXPECT_EQ(std::string(*batch.status().GetPayload(kSampleIndexPayload)), "5");
  EXPECT_EQ(std::string(*batch.status().GetPayload(kSamplePathPayload)), path);
  EXPECT_NE(batch.status().message().find(absl::StrCat(": stream ended at byte ", cut, " before member at offset ",
                                                       ranged[5].offset)),
            std::string::npos)
      << batch.status();
  // kReplace draws substitutes from the members before the cut (read through the same stream).
  o.on_error = ErrorPolicy::kReplace;
  loader = Loader::Create(ranged, o);
  ASSERT_TRUE(loader.ok());
  auto [order, bytes] = RunEpoch(**loader, 0);
  ASSERT_EQ(order.size(), 8u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(order[i], static_cast<int64_t>(i));
  for (size_t i = 5; i < 8; ++i) EXPECT_LT(order[i], 5) << "row " << i << " holds a substitute";
  EXPECT_EQ((*loader)->Stats().replaced, 3);
  o.on_error = ErrorPolicy::kRaise;
  // A failing command.
  for (Sample& s : ranged) s.path = "pipe:false";  // still kPipe
  loader = Loader::Create(ranged, o);
  ASSERT_TRUE(loader.ok());
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  batch = (*loader)->Next();
  ASSERT_TRUE(absl::IsDataLoss(batch.status()));
  EXPECT_EQ(batch.status().message(), "sample 0 (pipe:false): pipe:false exited with status 1 before member at offset 100");
}

TEST(LoaderTest, APathSpelledLikeAPipeIsReadAsAFile) {
  const std::string dir = MakeTempDir();
  auto files = MakeDataset(5, dir);
  // Files whose names start with pipe: (as a folder scan or a file list could find them), next
  // to the working directory, hold the same images.
  std::vector<Sample> named = files;
  for (size_t i = 0; i < named.size(); ++i) {
    const std::string name = absl::StrCat("pipe:touch PWNED; cat x", i, ".jpg; true .jpg");
    std::ifstream in(files[i].path, std::ios::binary);
    WriteFile(dir + "/" + name, std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {}));
    named[i].path = name;
  }
  char previous[4096];
  ASSERT_NE(getcwd(previous, sizeof(previous)), nullptr);
  ASSERT_EQ(chdir(dir.c_str()), 0);
  LoaderOptions o = TrainOptions();
  auto whole = Loader::Create(files, o);
  auto loader = Loader::Create(named, o);
  ASSERT_TRUE(whole.ok() && loader.ok());
  const auto got = RunEpoch(**loader, 0);
  const bool pwned = access("PWNED", F_OK) == 0;
  ASSERT_EQ(chdir(previous), 0);
  EXPECT_EQ(got, RunEpoch(**whole, 0));
  EXPECT_FALSE(pwned) << "a file name was run as a command";
  EXPECT_EQ((*loader)->Stats().stream_restarts, 0);

  // A kPipe sample must be spelled pipe:COMMAND, with a command.
  std::vector<Sample> marked = files;
  marked[2].source = SourceKind::kPipe;
  auto refused = Loader::Create(marked, o);
  ASSERT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_EQ(refused.status().message(), absl::StrCat("sample 2 is marked as a pipe: stream but its path \"",
                                                     files[2].path, "\" is not pipe:COMMAND"));
  marked[2].path = "pipe:  ";
  refused = Loader::Create(marked, o);
  EXPECT_EQ(refused.status().message(), "sample 2: \"pipe:  \" has no command after pipe:");
}

TEST(LoaderTest, StopWithASlowPipeProducerReturnsPromptly) {
  const std::string dir = MakeTempDir();
  auto files = MakeDataset(6, dir);
  auto ranged = PackIntoShard(files, dir + "/shard.bin");
  for (Sample& s : ranged) {
    s.path = absl::StrCat("pipe:head -c 3000 ", dir, "/shard.bin; sleep 60");
    s.source = SourceKind::kPipe;
  }
  LoaderOptions o = TrainOptions();
  o.batch_size = 3;
  auto loader = Loader::Create(ranged, o);
  ASSERT_TRUE(loader.ok());
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE((*loader)->StartEpoch(round).ok());
    EXPECT_TRUE(absl::IsDeadlineExceeded((*loader)->Next(0.2).status()));
    const auto start = std::chrono::steady_clock::now();
    (*loader)->Stop();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
  }
  loader->reset();  // the destructor too
  int wstatus;
  EXPECT_EQ(waitpid(-1, &wstatus, WNOHANG), -1) << "every command was reaped";
}

TEST(LoaderTest, KnownBadSamplesFailUnderEveryPolicy) {
  const std::string dir = MakeTempDir();
  auto samples = MakeDataset(12, dir);
  const std::string why = "shard-3.tar: sample 'k7' has no image member (.jpg/.jpeg/.png/.webp)";
  samples[7].error = why;
  samples[7].path = dir + "/shard-3.tar";  // need not exist: nothing is read
  LoaderOptions o = TrainOptions();
  o.batch_size = 3;
  {
    auto loader = Loader::Create(samples, o);
    ASSERT_TRUE(loader.ok());
    ASSERT_TRUE((*loader)->StartEpoch(0).ok());
    std::vector<std::string> outcomes;
    while (true) {
      absl::StatusOr<Batch> batch = (*loader)->Next();
      if (absl::IsOutOfRange(batch.status())) break;
      if (batch.ok()) {
        outcomes.push_back(absl::StrCat("ok", batch->number()));
        continue;
      }
      outcomes.push_back("err");
      EXPECT_TRUE(absl::IsDataLoss(batch.status())) << batch.status();
      EXPECT_EQ(batch.status().message(), absl::StrCat("sample 7 (", samples[7].path, "): ", why));
      EXPECT_EQ(std::string(*batch.status().GetPayload(kSampleIndexPayload)), "7");
      EXPECT_EQ(std::string(*batch.status().GetPayload(kSamplePathPayload)), samples[7].path);
    }
    EXPECT_EQ(outcomes, (std::vector<std::string>{"ok0", "ok1", "err", "ok3"}));
    EXPECT_EQ((*loader)->Stats().errors, 1);
    std::vector<uint8_t> one((*loader)->sample_bytes());
    absl::Status single = (*loader)->DecodeSample(7, 0, 0, one.data());
    EXPECT_TRUE(absl::IsDataLoss(single)) << single;
    EXPECT_NE(single.message().find(why), std::string::npos);
  }
  {
    o.on_error = ErrorPolicy::kSkip;
    auto loader = Loader::Create(samples, o);
    ASSERT_TRUE(loader.ok());
    auto [order, bytes] = RunEpoch(**loader, 0);
    EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11}));
    EXPECT_EQ((*loader)->Stats().skipped, 1);
    EXPECT_NE((*loader)->Stats().last_error.find(why), std::string::npos);
  }
  {
    o.on_error = ErrorPolicy::kReplace;
    // Every other sample is known bad too, so substitutes drawn from them must be refused.
    for (int i = 0; i < 12; i += 2) samples[static_cast<size_t>(i)].error = "bad member";
    auto loader = Loader::Create(samples, o);
    ASSERT_TRUE(loader.ok());
    auto [order, bytes] = RunEpoch(**loader, 0);
    ASSERT_EQ(order.size(), 12u);
    for (int64_t index : order) {
      EXPECT_TRUE(samples[static_cast<size_t>(index)].error.empty()) << "row holds bad sample " << index;
    }
    EXPECT_EQ((*loader)->Stats().replaced, 7);
  }
}

TEST(LoaderTest, HeldBatchesStayIntactAndExhaustionIsAnErrorNotAHang) {
  const std::string dir = MakeTempDir();
  auto samples = MakeDataset(30, dir);
  LoaderOptions o = TrainOptions();
  o.batch_size = 2;
  o.prefetch_batches = 2;
  o.max_slots = 4;
  auto loader = Loader::Create(samples, o);
  ASSERT_TRUE(loader.ok());
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  std::vector<Batch> kept;
  std::vector<std::vector<uint8_t>> copies;
  absl::Status exhausted;
  while (true) {
    absl::StatusOr<Batch> batch = (*loader)->Next();
    if (!batch.ok()) {
      exhausted = batch.status();
      break;
    }
    auto* p = static_cast<uint8_t*>(batch->images());
    copies.emplace_back(p, p + batch->size() * batch->sample_bytes());
    kept.push_back(*batch);
  }
  EXPECT_TRUE(absl::IsResourceExhausted(exhausted)) << exhausted;
  EXPECT_EQ(kept.size(), 4u);
  for (size_t i = 0; i < kept.size(); ++i) {
    auto* p = static_cast<uint8_t*>(kept[i].images());
    EXPECT_EQ(std::vector<uint8_t>(p, p + copies[i].size()), copies[i]) << "batch " << i << " rewritten";
  }
  const int64_t next = (*loader)->next_batch();
  kept.clear();  // release: the pipeline continues with the same batch, nothing lost
  int rest = 0;
  while (true) {
    absl::StatusOr<Batch> batch = (*loader)->Next();
    if (absl::IsOutOfRange(batch.status())) break;
    ASSERT_TRUE(batch.ok()) << batch.status();
    if (rest == 0) EXPECT_EQ(batch->number(), next);
    ++rest;
  }
  EXPECT_EQ(4 + rest, 15);
}

TEST(LoaderTest, StopMidEpochAndRestartRepeatedly) {
  const std::string dir = MakeTempDir();
  auto samples = MakeDataset(40, dir);
  LoaderOptions o = TrainOptions();
  o.batch_size = 4;
  auto loader = Loader::Create(samples, o);
  ASSERT_TRUE(loader.ok());
  for (int round = 0; round < 10; ++round) {
    ASSERT_TRUE((*loader)->StartEpoch(round).ok());
    for (int i = 0; i < round % 4; ++i) ASSERT_TRUE((*loader)->Next().ok());
  }
  (*loader)->Stop();
  auto [order, bytes] = RunEpoch(**loader, 0);
  EXPECT_EQ(order.size(), 40u);
  EXPECT_LE((*loader)->Stats().slots_allocated, 2 * o.prefetch_batches + 2);
}

TEST(LoaderTest, ResumeFromBatchYieldsTheRemainingBatches) {
  const std::string dir = MakeTempDir();
  auto samples = MakeDataset(20, dir);
  LoaderOptions o = TrainOptions();
  o.batch_size = 3;
  o.shuffle = true;
  auto loader = Loader::Create(samples, o);
  ASSERT_TRUE(loader.ok());
  auto [full_order, full_bytes] = RunEpoch(**loader, 5);
  ASSERT_TRUE((*loader)->StartEpoch(5, /*first_batch=*/4).ok());
  std::vector<int64_t> rest;
  std::vector<uint8_t> rest_bytes;
  while (true) {
    auto batch = (*loader)->Next();
    if (absl::IsOutOfRange(batch.status())) break;
    ASSERT_TRUE(batch.ok());
    for (int r = 0; r < batch->size(); ++r) rest.push_back(batch->indices()[r]);
    auto* p = static_cast<uint8_t*>(batch->images());
    rest_bytes.insert(rest_bytes.end(), p, p + batch->size() * batch->sample_bytes());
  }
  EXPECT_EQ(rest, std::vector<int64_t>(full_order.begin() + 12, full_order.end()));
  EXPECT_EQ(rest_bytes, std::vector<uint8_t>(full_bytes.end() - rest_bytes.size(), full_bytes.end()));
}

// Rows of one explicit-order epoch: their bytes, one vector per row.
std::vector<std::vector<uint8_t>> ExplicitEpochRows(Loader& loader, std::vector<int64_t> indices,
                                                    std::vector<int64_t> offsets, int64_t first_batch) {
  EXPECT_TRUE(loader.StartEpoch(2, 77, std::move(indices), std::move(offsets), first_batch).ok());
  std::vector<std::vector<uint8_t>> rows;
  while (true) {
    absl::StatusOr<Batch> batch = loader.Next();
    if (absl::IsOutOfRange(batch.status())) break;
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok()) break;
    for (int r = 0; r < batch->size(); ++r) {
      auto* p = static_cast<uint8_t*>(batch->images()) + r * batch->sample_bytes();
      rows.emplace_back(p, p + batch->sample_bytes());
    }
  }
  return rows;
}

TEST(LoaderTest, RepeatedIndicesDrawIndependentAugmentationsAndResumeByPosition) {
  const std::string dir = MakeTempDir();
  auto samples = MakeDataset(4, dir);
  LoaderOptions o = TrainOptions();
  o.batch_size = 4;
  // Index 1 eight times: each copy is seeded by its position, so they differ.
  const std::vector<int64_t> indices(8, 1);
  const std::vector<int64_t> offsets = {0, 4, 8};
  std::vector<std::vector<uint8_t>> rows;
  for (int workers : {1, 3}) {
    o.num_workers = workers;
    auto loader = Loader::Create(samples, o);
    ASSERT_TRUE(loader.ok());
    auto run = ExplicitEpochRows(**loader, indices, offsets, 0);
    ASSERT_EQ(run.size(), 8u);
    if (rows.empty()) rows = run;
    EXPECT_EQ(run, rows);  // any worker count
    // Resumed at batch 1 of the same order: the positions 4..7, as in the full run.
    auto rest = ExplicitEpochRows(**loader, indices, offsets, 1);
    EXPECT_EQ(rest, std::vector<std::vector<uint8_t>>(rows.begin() + 4, rows.end()));
    EXPECT_FALSE((*loader)->StartEpoch(2, 77, indices, offsets, 3).ok());
  }
  EXPECT_EQ(std::set<std::vector<uint8_t>>(rows.begin(), rows.end()).size(), rows.size());
}

TEST(LoaderTest, BadOptionsAreNamed) {
  const std::string dir = MakeTempDir();
  auto samples = MakeDataset(2, dir);
  LoaderOptions o = TrainOptions();
  o.batch_size = 0;
  auto loader = Loader::Create(samples, o);
  EXPECT_TRUE(absl::IsInvalidArgument(loader.status()));
  EXPECT_NE(loader.status().message().find("batch_size"), std::string::npos);
  o = TrainOptions();
  o.num_workers = -1;
  EXPECT_NE(Loader::Create(samples, o).status().message().find("num_workers"), std::string::npos);
  o = TrainOptions();
  EXPECT_NE(Loader::Create({}, o).status().message().find("empty"), std::string::npos);
  o = TrainOptions();
  o.rank = 2;
  o.world_size = 2;
  EXPECT_NE(Loader::Create(samples, o).status().message().find("rank"), std::string::npos);
}

TEST(LoaderTest, NextBeforeStartAndTimeout) {
  const std::string dir = MakeTempDir();
  auto samples = MakeDataset(3, dir);
  auto loader = Loader::Create(samples, TrainOptions());
  ASSERT_TRUE(loader.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition((*loader)->Next().status()));
}

TEST(ImageFolderTest, ScansLikeTorchvision) {
  const std::string dir = MakeTempDir();
  const std::vector<uint8_t> bytes = {1};
  WriteFile(dir + "/b/z.JPG", bytes);
  WriteFile(dir + "/b/a.png", bytes);
  WriteFile(dir + "/b/sub/c.jpeg", bytes);
  WriteFile(dir + "/b/notes.txt", bytes);
  WriteFile(dir + "/a/x.jpg", bytes);
  WriteFile(dir + "/a/sub2/deeper/y.webp", bytes);
  std::vector<std::string> classes;
  auto samples = ScanImageFolder(dir, &classes);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ(classes, (std::vector<std::string>{"a", "b"}));
  std::vector<std::string> rel;
  for (auto& s : *samples) rel.push_back(absl::StrCat(s.label, ":", s.path.substr(dir.size() + 1)));
  EXPECT_EQ(rel, (std::vector<std::string>{"0:a/x.jpg", "0:a/sub2/deeper/y.webp", "1:b/a.png",
                                           "1:b/z.JPG", "1:b/sub/c.jpeg"}));
  EXPECT_TRUE(absl::IsNotFound(ScanImageFolder(dir + "/nope").status()));
  WriteFile(dir + "/c/readme.txt", bytes);
  auto empty_class = ScanImageFolder(dir);
  EXPECT_TRUE(absl::IsNotFound(empty_class.status()));
  EXPECT_NE(empty_class.status().message().find("c"), std::string::npos);
}

}  // namespace
}  // namespace ringloader
