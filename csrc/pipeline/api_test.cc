// The public C++ API as a LibTorch user sees it: ringloader/ringloader.h plus the transform
// builders of ringloader/transforms.h. Complements loader_test.cc (pipeline internals).

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeline/loader_stats_fields.h"
#include "ringloader/range.h"
#include "ringloader/ringloader.h"
#include "ringloader/transforms.h"
#include "testing/jpeg_fixtures.h"

namespace ringloader {
namespace {

using testing::EncodeJpeg;
using testing::JpegFlavor;
using testing::MakeTempDir;
using testing::WriteFile;

// An ImageFolder tree of `n` small JPEGs in 3 classes.
std::string MakeFolder(int n) {
  const std::string dir = MakeTempDir();
  for (int i = 0; i < n; ++i) {
    JpegFlavor f;
    f.width = 90 + (i * 29) % 70;
    f.height = 80 + (i * 41) % 60;
    f.seed = static_cast<uint64_t>(i) + 7;
    WriteFile(absl::StrCat(dir, "/cls_", i % 3, "/img_", 100 + i, ".jpg"), EncodeJpeg(f));
  }
  return dir;
}

LoaderOptions SmallOptions() {
  LoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  o.io_depth = 4;
  o.prefetch_batches = 2;
  o.transform = {transforms::RandomResizedCrop(32), transforms::RandomHorizontalFlip(),
                 transforms::ToTensor(),
                 transforms::Normalize(transforms::kImageNetMean, transforms::kImageNetStd)};
  return o;
}

struct EpochResult {
  std::vector<int64_t> order;
  std::vector<int64_t> labels;
  std::vector<uint8_t> bytes;
};

EpochResult Drain(Loader& loader, int64_t epoch) {
  EpochResult r;
  EXPECT_TRUE(loader.StartEpoch(epoch).ok());
  while (true) {
    absl::StatusOr<Batch> batch = loader.Next();
    if (absl::IsOutOfRange(batch.status())) break;
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok()) break;
    for (int i = 0; i < batch->size(); ++i) {
      r.order.push_back(batch->indices()[i]);
      r.labels.push_back(batch->labels()[i]);
    }
    const auto* p = static_cast<const uint8_t*>(batch->images());
    r.bytes.insert(r.bytes.end(), p, p + batch->size() * batch->sample_bytes());
  }
  return r;
}

TEST(ApiTest, ImageFolderLoaderRunsSeveralEpochsWithLabelsAndShapes) {
  const std::string root = MakeFolder(14);
  std::vector<std::string> classes;
  absl::StatusOr<std::vector<Sample>> samples = ScanImageFolder(root, &classes);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 14u);
  EXPECT_EQ(classes, (std::vector<std::string>{"cls_0", "cls_1", "cls_2"}));

  LoaderOptions o = SmallOptions();
  o.shuffle = true;
  o.seed = 3;
  auto loader = Loader::Create(*samples, o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ((*loader)->BatchesPerEpoch(), 4);  // 14 = 4 + 4 + 4 + 2

  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  absl::StatusOr<Batch> first = (*loader)->Next();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->number(), 0);
  EXPECT_EQ(first->size(), 4);
  EXPECT_EQ(first->image_shape(), (std::vector<int64_t>{4, 3, 32, 32}));
  EXPECT_EQ(first->dtype(), DType::kFloat32);
  EXPECT_EQ(first->layout(), Layout::kCHW);
  EXPECT_EQ(first->sample_bytes(), 3u * 32 * 32 * sizeof(float));
  EXPECT_FALSE(first->pinned());
  first = absl::CancelledError("released");

  std::vector<EpochResult> epochs;
  for (int64_t e = 0; e < 3; ++e) epochs.push_back(Drain(**loader, e));
  for (const EpochResult& r : epochs) {
    ASSERT_EQ(r.order.size(), 14u);
    EXPECT_EQ(std::set<int64_t>(r.order.begin(), r.order.end()).size(), 14u);
    for (size_t i = 0; i < r.order.size(); ++i) {
      EXPECT_EQ(r.labels[i], (*samples)[static_cast<size_t>(r.order[i])].label);
    }
  }
  // Each epoch has its own order and its own augmentation draws.
  EXPECT_NE(epochs[0].order, epochs[1].order);
  EXPECT_NE(epochs[1].order, epochs[2].order);
  // Batches were released as they went out of scope: nothing is held now.
  EXPECT_EQ((*loader)->Stats().slots_held, 0);
  // The first StartEpoch(0) run was cut short after one batch; its prefetched rows count too.
  EXPECT_GE((*loader)->Stats().samples, 3 * 14 + 4);
  EXPECT_LE((*loader)->Stats().samples, 4 * 14);
}

TEST(ApiTest, ShuffleAndAugmentationAreDeterministicInSeedAndEpoch) {
  auto samples = ScanImageFolder(MakeFolder(10));
  ASSERT_TRUE(samples.ok());
  LoaderOptions o = SmallOptions();
  o.shuffle = true;
  o.seed = 11;
  auto a = Loader::Create(*samples, o);
  o.num_workers = 3;  // thread count must not matter
  o.io = IoBackend::kPread;
  auto b = Loader::Create(*samples, o);
  o.seed = 12;
  auto c = Loader::Create(*samples, o);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const EpochResult ra = Drain(**a, 4), rb = Drain(**b, 4), rc = Drain(**c, 4);
  EXPECT_EQ(ra.order, rb.order);
  EXPECT_EQ(ra.bytes, rb.bytes);
  EXPECT_NE(ra.order, rc.order);

  o.shuffle = false;
  auto sequential = Loader::Create(*samples, o);
  ASSERT_TRUE(sequential.ok());
  const EpochResult rs = Drain(**sequential, 0);
  std::vector<int64_t> expected(10);
  for (int i = 0; i < 10; ++i) expected[static_cast<size_t>(i)] = i;
  EXPECT_EQ(rs.order, expected);
}

TEST(ApiTest, RanksSplitTheDatasetIntoDisjointShards) {
  auto samples = ScanImageFolder(MakeFolder(13));
  ASSERT_TRUE(samples.ok());
  std::set<int64_t> all;
  size_t total = 0;
  for (int rank = 0; rank < 3; ++rank) {
    LoaderOptions o = SmallOptions();
    o.shuffle = true;
    o.seed = 5;
    o.rank = rank;
    o.world_size = 3;
    auto loader = Loader::Create(*samples, o);
    ASSERT_TRUE(loader.ok()) << loader.status();
    const EpochResult r = Drain(**loader, 1);
    EXPECT_GE(r.order.size(), 4u);
    EXPECT_LE(r.order.size(), 5u);  // DistributedSampler pads to equal shards
    total += r.order.size();
    all.insert(r.order.begin(), r.order.end());
  }
  EXPECT_EQ(all.size(), 13u);
  EXPECT_EQ(total, 15u);  // 13 padded up to 3 x 5
}

TEST(ApiTest, FileListWithLabelsAndExactEvalChain) {
  const std::string root = MakeFolder(5);
  auto scanned = ScanImageFolder(root);
  ASSERT_TRUE(scanned.ok());
  // A file list: any paths, any labels.
  std::vector<Sample> list;
  for (size_t i = 0; i < scanned->size(); ++i) list.push_back({(*scanned)[i].path, 100 + int64_t(i)});
  LoaderOptions o = SmallOptions();
  o.transform = transforms::ImageNetEval(48);
  o.dtype = DType::kUint8;
  o.layout = Layout::kHWC;
  o.transform.resize(2);  // Resize + CenterCrop, raw uint8 pixels
  auto loader = Loader::Create(list, o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ((*loader)->output_height(), 48);
  EXPECT_EQ((*loader)->output_width(), 48);
  const EpochResult r = Drain(**loader, 0);
  EXPECT_EQ(r.labels, (std::vector<int64_t>{100, 101, 102, 103, 104}));
  ASSERT_EQ(r.bytes.size(), 5u * 48 * 48 * 3);
  // Each row equals the single-sample path (eval chain: no randomness).
  std::vector<uint8_t> one((*loader)->sample_bytes());
  for (int64_t i = 0; i < 5; ++i) {
    ASSERT_TRUE((*loader)->DecodeSample(i, 0, 0, one.data()).ok());
    EXPECT_EQ(0, std::memcmp(one.data(), r.bytes.data() + i * one.size(), one.size())) << i;
  }
}

// What a loader tells about its output, from the public API alone (no TransformPipeline): the
// shape, dtype and layout its batches have, the bytes of a row, the chain; 0 x 0 and no row size
// when the size depends on the image.
TEST(ApiTest, OutputFormatIsReadFromTheLoader) {
  const std::string root = MakeFolder(3);
  auto scanned = ScanImageFolder(root);
  ASSERT_TRUE(scanned.ok());
  LoaderOptions o = SmallOptions();
  o.transform = {transforms::Resize({30, 20}), transforms::ToTensor()};
  o.dtype = DType::kFloat16;
  o.layout = Layout::kCHW;
  auto loader = Loader::Create(*scanned, o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  const Loader& l = **loader;
  EXPECT_EQ(l.output_height(), 30);
  EXPECT_EQ(l.output_width(), 20);
  EXPECT_EQ(l.dtype(), DType::kFloat16);
  EXPECT_EQ(l.layout(), Layout::kCHW);
  EXPECT_EQ(l.sample_bytes(), size_t{3} * 30 * 20 * 2);
  EXPECT_NE(l.DescribeTransform().find("ToTensor"), std::string::npos) << l.DescribeTransform();
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  absl::StatusOr<Batch> batch = (*loader)->Next();
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->image_shape(), (std::vector<int64_t>{batch->size(), 3, 30, 20}));
  EXPECT_EQ(batch->sample_bytes(), l.sample_bytes());

  o.transform = {transforms::Resize(16)};  // shorter side 16: the other depends on the image
  o.variable_size = true;
  auto variable = Loader::Create(*scanned, o);
  ASSERT_TRUE(variable.ok()) << variable.status();
  EXPECT_EQ((*variable)->output_height(), 0);
  EXPECT_EQ((*variable)->output_width(), 0);
  EXPECT_EQ((*variable)->sample_bytes(), 0u);
}

TEST(ApiTest, ReadFileListResolvesPathsAndNamesBadLines) {
  const std::string root = MakeFolder(3);
  auto scanned = ScanImageFolder(root);
  ASSERT_TRUE(scanned.ok());
  const std::string rel = (*scanned)[1].path.substr(root.size() + 1);  // relative to the list
  const std::string list = root + "/train list.txt";
  WriteFile(list, [&] {
    const std::string text = absl::StrCat("# path label\n", (*scanned)[0].path, " 7\n\n", rel,
                                          "\t3\n", (*scanned)[2].path, "   0  \n");
    return std::vector<uint8_t>(text.begin(), text.end());
  }());
  auto samples = ReadFileList(list);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 3u);
  EXPECT_EQ((*samples)[0].path, (*scanned)[0].path);
  EXPECT_EQ((*samples)[0].label, 7);
  EXPECT_EQ((*samples)[1].path, root + "/" + rel);
  EXPECT_EQ((*samples)[1].label, 3);
  EXPECT_EQ((*samples)[2].label, 0);
  auto loader = Loader::Create(*samples, SmallOptions());
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ(Drain(**loader, 0).labels, (std::vector<int64_t>{7, 3, 0}));

  const std::string bad = root + "/bad.txt";
  WriteFile(bad, {'a', '.', 'j', 'p', 'g', ' ', 'x', '\n'});
  auto refused = ReadFileList(bad);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status()));
  EXPECT_NE(refused.status().message().find("bad.txt:1"), std::string::npos) << refused.status();
  EXPECT_TRUE(absl::IsNotFound(ReadFileList(root + "/missing.txt").status()));
}

TEST(ApiTest, BadPathsAreStatusesNamingThePath) {
  EXPECT_TRUE(absl::IsNotFound(ScanImageFolder("/nonexistent/ringloader/root").status()));
  const std::string empty = MakeTempDir();
  EXPECT_FALSE(ScanImageFolder(empty).ok());

  auto samples = ScanImageFolder(MakeFolder(6));
  ASSERT_TRUE(samples.ok());
  const std::string missing = "/nonexistent/ringloader/missing.jpg";
  (*samples)[5].path = missing;
  LoaderOptions o = SmallOptions();
  o.batch_size = 3;
  auto loader = Loader::Create(*samples, o);
  ASSERT_TRUE(loader.ok());
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  absl::StatusOr<Batch> good = (*loader)->Next();
  ASSERT_TRUE(good.ok()) << good.status();
  absl::StatusOr<Batch> bad = (*loader)->Next();
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(IsSampleError(bad.status())) << bad.status();
  EXPECT_FALSE(IsEndOfEpoch(bad.status()));
  EXPECT_EQ(bad.status().GetPayload(kSampleCausePayload).value(), absl::Cord("NOT_FOUND"));
  EXPECT_NE(bad.status().message().find(missing), std::string::npos) << bad.status();
  EXPECT_EQ(bad.status().GetPayload(kSampleIndexPayload).value(), absl::Cord("5"));
  EXPECT_EQ(bad.status().GetPayload(kSamplePathPayload).value(), absl::Cord(missing));
  EXPECT_TRUE(absl::IsOutOfRange((*loader)->Next().status()));
}

TEST(ApiTest, BadOptionsAndChainsAreInvalidArgument) {
  auto samples = ScanImageFolder(MakeFolder(2));
  ASSERT_TRUE(samples.ok());
  auto expect_invalid = [&](LoaderOptions o, const std::string& mention) {
    absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(*samples, std::move(o));
    EXPECT_TRUE(absl::IsInvalidArgument(loader.status())) << mention << ": " << loader.status();
    EXPECT_NE(loader.status().message().find(mention), std::string::npos) << loader.status();
  };
  LoaderOptions o = SmallOptions();
  o.reader_threads = 0;
  expect_invalid(o, "reader_threads");
  o = SmallOptions();
  o.io_depth = 0;
  expect_invalid(o, "io_depth");
  o = SmallOptions();
  o.prefetch_batches = 0;
  expect_invalid(o, "prefetch_batches");
  o = SmallOptions();
  o.world_size = 0;
  expect_invalid(o, "world_size");
  // Normalize needs ToTensor first, as in torchvision.
  o = SmallOptions();
  o.transform = {transforms::CenterCrop(16),
                 transforms::Normalize(transforms::kImageNetMean, transforms::kImageNetStd)};
  EXPECT_TRUE(absl::IsInvalidArgument(Loader::Create(*samples, o).status()));
  // Batches need one output size: Resize(shorter side) alone does not fix it.
  o = SmallOptions();
  o.transform = {transforms::Resize(32), transforms::ToTensor()};
  EXPECT_TRUE(absl::IsInvalidArgument(Loader::Create(*samples, o).status()));
}

TEST(ApiTest, BatchOutlivesItsLoaderAndReleasesItsSlotWhenDestroyed) {
  auto samples = ScanImageFolder(MakeFolder(8));
  ASSERT_TRUE(samples.ok());
  Batch kept;
  std::vector<uint8_t> copy;
  std::vector<int64_t> labels;
  {
    auto loader = Loader::Create(*samples, SmallOptions());
    ASSERT_TRUE(loader.ok());
    ASSERT_TRUE((*loader)->StartEpoch(0).ok());
    absl::StatusOr<Batch> batch = (*loader)->Next();
    ASSERT_TRUE(batch.ok());
    {
      Batch second_copy = *batch;  // copies share one lease
      EXPECT_EQ(second_copy.images(), batch->images());
      EXPECT_EQ((*loader)->Stats().slots_held, 1);
    }
    EXPECT_EQ((*loader)->Stats().slots_held, 1);
    kept = *batch;
    batch = absl::CancelledError("dropped");
    EXPECT_EQ((*loader)->Stats().slots_held, 1) << "`kept` still holds the slot";
    const auto* p = static_cast<const uint8_t*>(kept.images());
    copy.assign(p, p + kept.size() * kept.sample_bytes());
    labels.assign(kept.labels(), kept.labels() + kept.size());
    // Drain the rest while `kept` is held: its slot must not be reused.
    while ((*loader)->Next().ok()) {
    }
    EXPECT_EQ(0, std::memcmp(kept.images(), copy.data(), copy.size()));
    kept.lease();  // still valid
    kept = Batch();
    EXPECT_EQ((*loader)->Stats().slots_held, 0) << "destroying the last copy releases the slot";
    ASSERT_TRUE((*loader)->StartEpoch(1).ok());
    batch = (*loader)->Next();
    ASSERT_TRUE(batch.ok());
    kept = *batch;
    copy.assign(static_cast<const uint8_t*>(kept.images()),
                static_cast<const uint8_t*>(kept.images()) + kept.size() * kept.sample_bytes());
  }  // the loader is destroyed here; `kept` keeps its slot's memory alive
  EXPECT_EQ(0, std::memcmp(kept.images(), copy.data(), copy.size()));
  EXPECT_NE(kept.lease(), nullptr);
  kept = Batch();  // releases into the (now orphaned) pool without touching the loader
}

TEST(ApiTest, RangeForDeliversTheEpochAndThrowsLoaderErrorForABadSample) {
  auto samples = ScanImageFolder(MakeFolder(9));
  ASSERT_TRUE(samples.ok());
  LoaderOptions o = SmallOptions();
  o.batch_size = 3;
  o.shuffle = true;
  auto loader = Loader::Create(*samples, o);
  ASSERT_TRUE(loader.ok());
  const EpochResult reference = Drain(**loader, 2);
  std::vector<int64_t> order;
  for (Batch& batch : EpochBatches(**loader, 2)) {
    EXPECT_EQ((*loader)->Stats().slots_held, 1) << "the previous batch was released";
    for (int i = 0; i < batch.size(); ++i) order.push_back(batch.indices()[i]);
  }
  EXPECT_EQ(order, reference.order);
  EXPECT_EQ((*loader)->Stats().slots_held, 0);

  // A bad sample in the middle batch: LoaderError carries Next()'s status; iterating the same
  // range again continues with the batch after it.
  (*samples)[reference.order[4]].path = "/nonexistent/ringloader/bad.jpg";
  auto bad_loader = Loader::Create(*samples, o);
  ASSERT_TRUE(bad_loader.ok());
  EpochRange range = EpochBatches(**bad_loader, 2);
  std::vector<int64_t> numbers;
  absl::Status thrown;
  try {
    for (Batch& batch : range) numbers.push_back(batch.number());
  } catch (const LoaderError& e) {
    thrown = e.status();
    EXPECT_NE(std::string(e.what()).find("bad.jpg"), std::string::npos);
  }
  EXPECT_TRUE(IsSampleError(thrown)) << thrown;
  EXPECT_EQ(thrown.GetPayload(kSampleCausePayload).value(), absl::Cord("NOT_FOUND"));
  EXPECT_EQ(thrown.GetPayload(kSamplePathPayload).value(), absl::Cord("/nonexistent/ringloader/bad.jpg"));
  for (Batch& batch : range) numbers.push_back(batch.number());
  EXPECT_EQ(numbers, (std::vector<int64_t>{0, 2}));

  // Any other failure of Next() throws too: here, iterating before any epoch started.
  auto fresh = Loader::Create(*samples, o);
  ASSERT_TRUE(fresh.ok());
  EpochRange unstarted(**fresh);
  try {
    (void)unstarted.begin();
    ADD_FAILURE() << "no LoaderError";
  } catch (const LoaderError& e) {
    EXPECT_TRUE(absl::IsFailedPrecondition(e.status())) << e.status();
  }
}

TEST(ApiTest, TransformBuildersMatchTorchvisionNames) {
  const TransformStep rrc = transforms::RandomResizedCrop(224);
  EXPECT_EQ(rrc.kind(), TransformStep::Kind::kRandomResizedCrop);
  EXPECT_EQ(rrc.get<RandomResizedCropParams>().size_h, 224);
  EXPECT_EQ(rrc.get<RandomResizedCropParams>().size_w, 224);
  EXPECT_DOUBLE_EQ(rrc.get<RandomResizedCropParams>().scale_min, 0.08);
  EXPECT_DOUBLE_EQ(rrc.get<RandomResizedCropParams>().ratio_max, 4.0 / 3.0);
  const TransformStep resize = transforms::Resize({256, 320});
  EXPECT_EQ(resize.get<ResizeParams>().size_h, 256);
  EXPECT_EQ(resize.get<ResizeParams>().size_w, 320);
  EXPECT_EQ(transforms::Resize(256).get<ResizeParams>().size_w, 0);
  const std::vector<TransformStep> eval = transforms::ImageNetEval();
  ASSERT_EQ(eval.size(), 4u);
  EXPECT_EQ(eval[0].get<ResizeParams>().size_h, 256);
  EXPECT_EQ(eval[1].get<CenterCropParams>().size_h, 224);
  auto pipeline = TransformPipeline::Create(transforms::ImageNetTrain(), DType::kFloat32, Layout::kCHW);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  EXPECT_EQ(pipeline->out_h(), 224);
  EXPECT_TRUE(pipeline->to_unit());
}

// ColorJitter and RandomErasing put each parameter in the field named for it, which the
// augmentation code reads by the same name.
TEST(ApiTest, TransformBuildersFillTheNamedParameters) {
  const ColorJitterParams jitter =
      transforms::ColorJitter(/*brightness=*/0.4, /*contrast=*/0, /*saturation=*/1.5, /*hue=*/0.1)
          .get<ColorJitterParams>();
  ASSERT_TRUE(jitter.brightness.has_value());
  EXPECT_DOUBLE_EQ(jitter.brightness->lo, 0.6);
  EXPECT_DOUBLE_EQ(jitter.brightness->hi, 1.4);
  EXPECT_FALSE(jitter.contrast.has_value());
  ASSERT_TRUE(jitter.saturation.has_value());
  EXPECT_DOUBLE_EQ(jitter.saturation->lo, 0.0);  // 1 - 1.5 clamped, as torchvision
  EXPECT_DOUBLE_EQ(jitter.saturation->hi, 2.5);
  ASSERT_TRUE(jitter.hue.has_value());
  EXPECT_DOUBLE_EQ(jitter.hue->lo, -0.1);
  EXPECT_DOUBLE_EQ(jitter.hue->hi, 0.1);
  const TransformStep erase = transforms::RandomErasing();
  EXPECT_DOUBLE_EQ(erase.get<RandomErasingParams>().scale.lo, 0.02);
  EXPECT_DOUBLE_EQ(erase.get<RandomErasingParams>().scale.hi, 0.33);
  EXPECT_DOUBLE_EQ(erase.get<RandomErasingParams>().ratio.lo, 0.3);
  EXPECT_DOUBLE_EQ(erase.get<RandomErasingParams>().ratio.hi, 3.3);
  EXPECT_TRUE(TransformPipeline::Create({transforms::ToTensor(), erase}, DType::kFloat32,
                                        Layout::kCHW, /*allow_variable_size=*/true)
                  .ok());
}

// The binding's stats() dict and the bench walk LoaderStats through its one field list.
TEST(LoaderStatsFields, EveryFieldOnceByNameAndWindowsSubtractNumbers) {
  LoaderStats before, after;
  std::vector<std::string> names;
  ForEachStat(before, [&names](const char* name, const auto&) { names.push_back(name); });
  EXPECT_EQ(names.size(), std::size(stats_internal::kStatNames));
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  EXPECT_EQ(names.front(), "samples");
  EXPECT_EQ(names.back(), "recent_errors");
  before.samples = 10, after.samples = 25;
  before.decode_seconds = 1.5, after.decode_seconds = 4.0;
  before.stalled = true, after.stalled = true;
  after.io_backend = "pread";
  after.recent_errors = {"a"};
  const LoaderStats window = StatsSince(before, after);
  EXPECT_EQ(window.samples, 15);
  EXPECT_DOUBLE_EQ(window.decode_seconds, 2.5);
  EXPECT_TRUE(window.stalled);  // flags are after's, not a difference
  EXPECT_EQ(window.io_backend, "pread");
  EXPECT_EQ(window.recent_errors, std::vector<std::string>{"a"});
}

}  // namespace
}  // namespace ringloader
