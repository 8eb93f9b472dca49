// MakeDecoder: every LoaderOptions field that shapes decoding reaches the decoder the epoch's
// workers and Loader::DecodeSample use.

#include "pipeline/epoch.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "testing/jpeg_fixtures.h"
#include "transform/image_transform.h"
#include "transform/random.h"

namespace ringloader {
namespace {

using testing::EncodeJpeg;
using testing::JpegFlavor;

TransformPipeline Downscale(int size) {
  ResizeParams resize;
  resize.size_h = size;
  resize.size_w = size;
  absl::StatusOr<TransformPipeline> p = TransformPipeline::Create({resize}, DType::kUint8, Layout::kHWC);
  EXPECT_TRUE(p.ok()) << p.status();
  return *p;
}

absl::Status Decode(const LoaderOptions& options, const std::vector<uint8_t>& jpeg, DecodeStats* stats = nullptr) {
  const TransformPipeline p = Downscale(16);
  std::vector<uint8_t> out(p.SampleBytes());
  SampleRng rng(1);
  return MakeDecoder(options)->DecodeInto(jpeg.data(), jpeg.size(), p, rng, out.data(), stats);
}

TEST(MakeDecoderTest, PixelLimitComesFromTheOptions) {
  JpegFlavor flavor;
  flavor.width = 64;
  flavor.height = 48;
  const std::vector<uint8_t> jpeg = EncodeJpeg(flavor);
  LoaderOptions options;
  EXPECT_TRUE(Decode(options, jpeg).ok());
  options.max_image_pixels = 64 * 48 - 1;
  EXPECT_EQ(Decode(options, jpeg).code(), absl::StatusCode::kOutOfRange);
  options.max_image_pixels = 64 * 48;
  EXPECT_TRUE(Decode(options, jpeg).ok());
}

TEST(MakeDecoderTest, FastDecodeAllowsDctScaling) {
  JpegFlavor flavor;
  flavor.width = 256;
  flavor.height = 256;
  const std::vector<uint8_t> jpeg = EncodeJpeg(flavor);
  LoaderOptions options;
  DecodeStats fast;
  ASSERT_TRUE(Decode(options, jpeg, &fast).ok());
  EXPECT_LT(fast.scale_num, 8);  // 256 -> 16: a reduced DCT scale
  options.fast_decode = false;
  DecodeStats exact;
  ASSERT_TRUE(Decode(options, jpeg, &exact).ok());
  EXPECT_EQ(exact.scale_num, 8);
}

TEST(MakeDecoderTest, StrictDecodeRefusesDataLibjpegOnlyWarnsAbout) {
  JpegFlavor flavor;
  flavor.width = 64;
  flavor.height = 48;
  std::vector<uint8_t> jpeg = EncodeJpeg(flavor);
  jpeg.insert(jpeg.begin() + 20, {0x00, 0x01, 0x02});  // junk between two header segments
  LoaderOptions options;
  EXPECT_EQ(Decode(options, jpeg).code(), absl::StatusCode::kDataLoss);
  options.strict_decode = false;
  EXPECT_TRUE(Decode(options, jpeg).ok());
}

}  // namespace
}  // namespace ringloader
