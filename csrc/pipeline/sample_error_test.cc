// A sample failing with a cause that absl spells OutOfRange (the pixel limit, a file over
// max_file_bytes) is a sample error, never the end of the epoch: under every policy, through
// Next(), the range-for API and DecodeSample.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ringloader/range.h"
#include "ringloader/ringloader.h"
#include "testing/jpeg_fixtures.h"

namespace ringloader {
namespace {

constexpr int kBig = 7;  // the oversized sample, in the middle batch of three

struct Limit {
  const char* name;
  void (*apply)(LoaderOptions*);
};

// Small JPEGs (at most 209 x 179, a few KiB) and one 700 x 600 at index kBig.
std::vector<Sample> Dataset(const std::string& dir) {
  std::vector<Sample> samples = testing::WriteJpegDataset(dir, 15);
  testing::JpegFlavor big;
  big.width = 700;
  big.height = 600;
  big.quality = 98;
  testing::WriteFile(samples[kBig].path, testing::EncodeJpeg(big));
  return samples;
}

const Limit kLimits[] = {
    {"pixel limit", [](LoaderOptions* o) { o->max_image_pixels = 100000; }},
    {"file size limit", [](LoaderOptions* o) { o->max_file_bytes = 40000; }},
};

LoaderOptions Options(const Limit& limit, ErrorPolicy policy) {
  LoaderOptions o;
  o.batch_size = 5;
  o.num_workers = 2;
  o.on_error = policy;
  ResizeParams resize;
  resize.size_h = resize.size_w = 16;
  o.transform = {resize};
  limit.apply(&o);
  return o;
}

void ExpectOversized(const absl::Status& status) {
  EXPECT_TRUE(IsSampleError(status)) << status;
  EXPECT_FALSE(IsEndOfEpoch(status)) << status;
  EXPECT_EQ(status.GetPayload(kSampleIndexPayload).value(), absl::Cord(std::to_string(kBig)));
  EXPECT_EQ(status.GetPayload(kSampleCausePayload).value(), absl::Cord("OUT_OF_RANGE"));
  EXPECT_NE(std::string(status.GetPayload(kSampleReasonPayload).value()).find("limit"), std::string::npos)
      << status;
}

TEST(SampleErrorTest, OversizedSampleIsNotTheEndOfTheEpochThroughNext) {
  const std::string dir = testing::MakeTempDir();
  const std::vector<Sample> samples = Dataset(dir);
  for (const Limit& limit : kLimits) {
    for (ErrorPolicy policy : {ErrorPolicy::kRaise, ErrorPolicy::kSkip, ErrorPolicy::kReplace}) {
      SCOPED_TRACE(std::string(limit.name) + " policy " + std::to_string(static_cast<int>(policy)));
      auto loader = Loader::Create(samples, Options(limit, policy));
      ASSERT_TRUE(loader.ok()) << loader.status();
      ASSERT_TRUE((*loader)->StartEpoch(0).ok());
      std::vector<int64_t> numbers;
      int64_t rows = 0;
      int errors = 0;
      for (int call = 0; call < 10; ++call) {
        absl::StatusOr<Batch> batch = (*loader)->Next(30);
        if (IsEndOfEpoch(batch.status())) break;
        if (!batch.ok()) {
          ExpectOversized(batch.status());
          ++errors;
          continue;
        }
        numbers.push_back(batch->number());
        rows += batch->size();
      }
      switch (policy) {
        case ErrorPolicy::kRaise:
          EXPECT_EQ(errors, 1);
          EXPECT_EQ(numbers, (std::vector<int64_t>{0, 2}));
          EXPECT_EQ(rows, 10);
          break;
        case ErrorPolicy::kSkip:
          EXPECT_EQ(numbers, (std::vector<int64_t>{0, 1, 2}));
          EXPECT_EQ(rows, 14);
          break;
        case ErrorPolicy::kReplace:
          EXPECT_EQ(numbers, (std::vector<int64_t>{0, 1, 2}));
          EXPECT_EQ(rows, 15);
          break;
      }
      const LoaderStats stats = (*loader)->Stats();
      EXPECT_EQ(stats.errors, 1);
      ASSERT_EQ(stats.recent_errors.size(), 1u);
      EXPECT_NE(stats.recent_errors[0].find(samples[kBig].path), std::string::npos);
    }
  }
}

TEST(SampleErrorTest, OversizedSampleIsNotTheEndOfTheEpochThroughTheRange) {
  const std::string dir = testing::MakeTempDir();
  const std::vector<Sample> samples = Dataset(dir);
  for (const Limit& limit : kLimits) {
    SCOPED_TRACE(limit.name);
    auto loader = Loader::Create(samples, Options(limit, ErrorPolicy::kRaise));
    ASSERT_TRUE(loader.ok()) << loader.status();
    EpochRange range = EpochBatches(**loader, 0);
    std::vector<int64_t> numbers;
    int thrown = 0;
    while (true) {
      try {
        for (Batch& batch : range) numbers.push_back(batch.number());
        break;
      } catch (const LoaderError& e) {
        ExpectOversized(e.status());
        ++thrown;
      }
    }
    EXPECT_EQ(thrown, 1);
    EXPECT_EQ(numbers, (std::vector<int64_t>{0, 2}));
  }
}

TEST(SampleErrorTest, OversizedSampleDecodedAloneIsASampleError) {
  const std::string dir = testing::MakeTempDir();
  const std::vector<Sample> samples = Dataset(dir);
  for (const Limit& limit : kLimits) {
    SCOPED_TRACE(limit.name);
    auto loader = Loader::Create(samples, Options(limit, ErrorPolicy::kRaise));
    ASSERT_TRUE(loader.ok()) << loader.status();
    std::vector<uint8_t> out((*loader)->sample_bytes());
    ExpectOversized((*loader)->DecodeSample(kBig, 0, 0, out.data()));
    EXPECT_TRUE((*loader)->DecodeSample(kBig - 1, 0, 0, out.data()).ok());
  }
}

}  // namespace
}  // namespace ringloader
