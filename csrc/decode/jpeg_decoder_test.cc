#include "decode/jpeg_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <variant>
#include <vector>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>

#include "absl/status/status.h"
#include "decode/clean_scans.h"
#include "gtest/gtest.h"
#include "testing/jpeg_fixtures.h"
#include "transform/image_transform.h"
#include "transform/random.h"
#include "transform/resample.h"

namespace ringloader {
namespace {

using testing::EncodeJpeg;
using testing::JpegFlavor;
using Color = JpegFlavor::Color;
using Kind = TransformStep::Kind;

// ---------------------------------------------------------------------------------------------
// Helpers.

void FixtureErrorExit(j_common_ptr cinfo) {
  char message[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, message);
  std::fprintf(stderr, "reference libjpeg decode failed: %s\n", message);
  std::abort();  // fixtures are valid: a failure here is a broken test setup
}

/// Plain libjpeg decode of a valid fixture, with the same settings Pillow uses (ISLOW IDCT,
/// fancy upsampling), to `space` (JCS_RGB or JCS_CMYK).
std::vector<uint8_t> ReferenceDecode(const std::vector<uint8_t>& jpeg, J_COLOR_SPACE space,
                                     int* width, int* height) {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jerr.error_exit = FixtureErrorExit;
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, jpeg.data(), jpeg.size());
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = space;
  cinfo.dct_method = JDCT_ISLOW;
  jpeg_start_decompress(&cinfo);
  const size_t stride = static_cast<size_t>(cinfo.output_width) * cinfo.output_components;
  std::vector<uint8_t> out(stride * cinfo.output_height);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out.data() + stride * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  *width = static_cast<int>(cinfo.output_width);
  *height = static_cast<int>(cinfo.output_height);
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return out;
}

JpegFlavor Flavor(int w, int h, int hs, int vs) {
  JpegFlavor f;
  f.width = w;
  f.height = h;
  f.h_samp = hs;
  f.v_samp = vs;
  return f;
}

TransformStep Step(Kind kind, int size = 0) {
  TransformStep s(kind);
  std::visit(
      [&](auto& params) {
        if constexpr (requires { params.size_h; }) {
          params.size_h = size;
          params.size_w = kind == Kind::kResize ? 0 : size;
        }
      },
      s.params);
  return s;
}

TransformPipeline ResizeCrop(DType dtype = DType::kUint8, Layout layout = Layout::kHWC) {
  return *TransformPipeline::Create({Step(Kind::kResize, 256), Step(Kind::kCenterCrop, 224)},
                                    dtype, layout);
}

TransformPipeline RandomCropFlip() {
  TransformStep flip = Step(Kind::kRandomHorizontalFlip);
  flip.get<HorizontalFlipParams>().p = 0.5;
  return *TransformPipeline::Create({Step(Kind::kRandomResizedCrop, 224), flip}, DType::kUint8,
                                    Layout::kHWC);
}

struct Diff {
  double mean = 0;
  int max = 0;
};

Diff Compare(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  Diff d;
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const int e = std::abs(a[i] - b[i]);
    sum += e;
    d.max = std::max(d.max, e);
  }
  d.mean = sum / static_cast<double>(a.size());
  return d;
}

/// Finds the first SOFn marker segment; returns the offset of its 0xFF byte or 0.
size_t FindSof(const std::vector<uint8_t>& j) {
  size_t i = 2;
  while (i + 4 < j.size()) {
    if (j[i] != 0xFF) return 0;
    const uint8_t m = j[i + 1];
    if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) return i;
    i += 2 + ((j[i + 2] << 8) | j[i + 3]);
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// DecodeFull against plain libjpeg.

struct FullCase {
  const char* name;
  JpegFlavor flavor;
};

std::vector<FullCase> FullCases() {
  // Odd sizes leave partial MCUs on the right and bottom edges.
  std::vector<FullCase> cases = {
      {"420", Flavor(203, 157, 2, 2)}, {"422", Flavor(203, 157, 2, 1)},
      {"444", Flavor(203, 157, 1, 1)}, {"411", Flavor(203, 157, 4, 1)},
      {"440", Flavor(203, 157, 1, 2)},
  };
  FullCase c{"progressive", Flavor(203, 157, 2, 2)};
  c.flavor.progressive = true;
  cases.push_back(c);
  c = {"restart", Flavor(203, 157, 2, 2)};
  c.flavor.restart_interval = 3;
  cases.push_back(c);
  c = {"arithmetic", Flavor(203, 157, 2, 2)};
  c.flavor.arithmetic = true;
  cases.push_back(c);
  c = {"arithmetic_progressive", Flavor(203, 157, 2, 1)};
  c.flavor.arithmetic = true;
  c.flavor.progressive = true;
  cases.push_back(c);
  c = {"quality50", Flavor(203, 157, 2, 2)};
  c.flavor.quality = 50;
  cases.push_back(c);
  return cases;
}

TEST(JpegDecoderFull, BitExactWithLibjpeg) {
  JpegDecoder decoder;
  for (const FullCase& c : FullCases()) {
    SCOPED_TRACE(c.name);
    const std::vector<uint8_t> jpeg = EncodeJpeg(c.flavor);
    int w = 0, h = 0;
    const std::vector<uint8_t> want = ReferenceDecode(jpeg, JCS_RGB, &w, &h);
    auto got = decoder.DecodeFull(jpeg.data(), jpeg.size());
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->width, w);
    ASSERT_EQ(got->height, h);
    ASSERT_EQ(got->pixels, want);
    // And the content is the texture (sanity check on the fixtures themselves).
    const RgbImage tex = testing::MakeTexture(c.flavor.width, c.flavor.height, c.flavor.seed);
    EXPECT_LT(Compare(got->pixels, tex.pixels).mean, c.flavor.quality >= 90 ? 7.0 : 10.0);
  }
}

TEST(JpegDecoderFull, GrayIsReplicated) {
  JpegFlavor f = Flavor(131, 77, 1, 1);
  f.color = Color::kGray;
  const std::vector<uint8_t> jpeg = EncodeJpeg(f);
  int w = 0, h = 0;
  const std::vector<uint8_t> gray = ReferenceDecode(jpeg, JCS_GRAYSCALE, &w, &h);
  JpegDecoder decoder;
  auto got = decoder.DecodeFull(jpeg.data(), jpeg.size());
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->width, 131);
  ASSERT_EQ(got->height, 77);
  for (size_t i = 0; i < gray.size(); ++i) {
    ASSERT_EQ(got->pixels[i * 3 + 0], gray[i]);
    ASSERT_EQ(got->pixels[i * 3 + 1], gray[i]);
    ASSERT_EQ(got->pixels[i * 3 + 2], gray[i]);
  }
  auto info = decoder.ReadInfo(jpeg.data(), jpeg.size());
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->components, 1);
}

TEST(JpegDecoderFull, CmykAndYcckConvertLikePillow) {
  for (Color color : {Color::kCmyk, Color::kYcck}) {
    SCOPED_TRACE(color == Color::kCmyk ? "CMYK" : "YCCK");
    JpegFlavor f = Flavor(97, 66, 2, 2);
    f.color = color;
    const std::vector<uint8_t> jpeg = EncodeJpeg(f);
    int w = 0, h = 0;
    const std::vector<uint8_t> cmyk = ReferenceDecode(jpeg, JCS_CMYK, &w, &h);
    JpegDecoder decoder;
    auto got = decoder.DecodeFull(jpeg.data(), jpeg.size());
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->width, 97);
    for (size_t i = 0; i < static_cast<size_t>(w) * h; ++i) {
      // Pillow reads Adobe-inverted CMYK: true C = 255 - stored, and converts with
      // r = (255 - K) - round(C * (255 - K) / 255); with nk = stored K that is:
      const int nk = cmyk[i * 4 + 3];
      for (int c = 0; c < 3; ++c) {
        const int true_c = 255 - cmyk[i * 4 + c];
        const int expected = nk - static_cast<int>(std::floor(true_c * nk / 255.0 + 0.5));
        ASSERT_EQ(got->pixels[i * 3 + c], expected) << i;
      }
    }
    // The fixture stored inverted CMYK made from the texture, so the result looks like it.
    const RgbImage tex = testing::MakeTexture(97, 66, f.seed);
    EXPECT_LT(Compare(got->pixels, tex.pixels).mean, 8.0);
    auto info = decoder.ReadInfo(jpeg.data(), jpeg.size());
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->components, 4);
  }
}

TEST(JpegDecoderInfo, ReadsHeader) {
  JpegFlavor f = Flavor(321, 123, 2, 2);
  f.progressive = true;
  const std::vector<uint8_t> jpeg = EncodeJpeg(f);
  JpegDecoder decoder;
  auto info = decoder.ReadInfo(jpeg.data(), jpeg.size());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->width, 321);
  EXPECT_EQ(info->height, 123);
  EXPECT_EQ(info->components, 3);
  EXPECT_TRUE(info->progressive);
}

// ---------------------------------------------------------------------------------------------
// DecodeInto: fast paths (DCT scaling + region of interest) against the reference path.

struct PathCase {
  const char* name;
  JpegFlavor flavor;
};

std::vector<PathCase> PathCases() {
  std::vector<PathCase> cases = {{"420_800x600", Flavor(800, 600, 2, 2)},
                                 {"422_640x480", Flavor(640, 480, 2, 1)},
                                 {"444_500x375", Flavor(500, 375, 1, 1)},
                                 {"440_375x500", Flavor(375, 500, 1, 2)}};
  PathCase c{"progressive_700x525", Flavor(700, 525, 2, 2)};
  c.flavor.progressive = true;
  cases.push_back(c);
  c = {"gray_600x450", Flavor(600, 450, 1, 1)};
  c.flavor.color = Color::kGray;
  cases.push_back(c);
  c = {"cmyk_520x390", Flavor(520, 390, 1, 1)};
  c.flavor.color = Color::kCmyk;
  cases.push_back(c);
  c = {"restart_arith_900x500", Flavor(900, 500, 2, 2)};
  c.flavor.restart_interval = 5;
  c.flavor.arithmetic = true;
  cases.push_back(c);
  return cases;
}

TEST(JpegDecoderInto, FastPathsMatchReferencePath) {
  JpegDecoder fast, ref;
  ref.set_fast_paths(false);
  const TransformPipeline rc = ResizeCrop();
  const TransformPipeline rrc = RandomCropFlip();
  std::vector<uint8_t> a(224 * 224 * 3), b(224 * 224 * 3);
  double worst_mean = 0;
  int worst_max = 0;
  for (const PathCase& c : PathCases()) {
    SCOPED_TRACE(c.name);
    const std::vector<uint8_t> jpeg = EncodeJpeg(c.flavor);
    for (int sample = 0; sample < 6; ++sample) {
      const TransformPipeline& p = sample == 0 ? rc : rrc;
      SampleRng ra(SampleSeed(3, 0, sample)), rb(SampleSeed(3, 0, sample));
      DecodeStats stats;
      ASSERT_TRUE(fast.DecodeInto(jpeg.data(), jpeg.size(), p, ra, a.data(), &stats).ok());
      ASSERT_TRUE(ref.DecodeInto(jpeg.data(), jpeg.size(), p, rb, b.data()).ok());
      const Diff d = Compare(a, b);
      // DCT-domain downscaling is a different (slightly sharper) low-pass than decoding at full
      // size and filtering with Pillow's wider triangle: on this noisy, striped texture that is
      // under a level on average, with isolated pixels at hard edges off by more.
      EXPECT_LT(d.mean, 1.5) << "sample " << sample << " scale " << stats.scale_num;
      EXPECT_LE(d.max, 48) << "sample " << sample << " scale " << stats.scale_num;
      if (std::getenv("RL_VERBOSE")) {
        std::printf("%s sample %d scale %d/8: mean %.3f max %d\n", c.name, sample,
                    stats.scale_num, d.mean, d.max);
      }
      worst_mean = std::max(worst_mean, d.mean);
      worst_max = std::max(worst_max, d.max);
    }
  }
  std::printf("fast vs reference: worst mean abs diff %.3f, worst max diff %d\n", worst_mean,
              worst_max);
}

TEST(JpegDecoderInto, UsesScaledAndCroppedDecode) {
  const std::vector<uint8_t> jpeg = EncodeJpeg(Flavor(800, 600, 2, 2));
  JpegDecoder decoder;
  std::vector<uint8_t> out(224 * 224 * 3);
  SampleRng rng(1);
  DecodeStats stats;
  ASSERT_TRUE(decoder.DecodeInto(jpeg.data(), jpeg.size(), ResizeCrop(), rng, out.data(), &stats)
                  .ok());
  // The crop covers 525x525 source pixels; 525 * 4/8 >= 224 > 525 * 3/8.
  EXPECT_EQ(stats.scale_num, 4);
  // Scaled image is 400x300; the crop's columns (68..331 plus taps) widened to 16-pixel iMCUs.
  EXPECT_LT(stats.decoded_width, 400);
  EXPECT_GE(stats.decoded_width, 264);
  EXPECT_LE(stats.decoded_height, 300);

  // A small random crop of a big image: strong scaling and a narrow ROI.
  TransformStep rrc = Step(Kind::kRandomResizedCrop, 64);
  rrc.get<RandomResizedCropParams>().scale_min = 0.05;
  rrc.get<RandomResizedCropParams>().scale_max = 0.06;
  const TransformPipeline small =
      *TransformPipeline::Create({rrc}, DType::kUint8, Layout::kHWC);
  std::vector<uint8_t> o(64 * 64 * 3);
  ASSERT_TRUE(decoder.DecodeInto(jpeg.data(), jpeg.size(), small, rng, o.data(), &stats).ok());
  EXPECT_LT(stats.scale_num, 8);
  EXPECT_LT(stats.decoded_width, 800 * stats.scale_num / 8);
  EXPECT_LT(stats.decoded_height, 600 * stats.scale_num / 8);

  // With fast paths off nothing is scaled or cropped.
  decoder.set_fast_paths(false);
  ASSERT_TRUE(decoder.DecodeInto(jpeg.data(), jpeg.size(), ResizeCrop(), rng, out.data(), &stats)
                  .ok());
  EXPECT_EQ(stats.scale_num, 8);
  EXPECT_EQ(stats.decoded_width, 800);
  EXPECT_EQ(stats.decoded_height, 600);
}

TEST(JpegDecoderInto, RegionOfInterestAtFullScaleIsExact) {
  // When no DCT scaling applies, cropping and skipping must not change a single pixel: the
  // fast path equals the reference path bit for bit.
  TransformStep rrc = Step(Kind::kRandomResizedCrop, 200);
  rrc.get<RandomResizedCropParams>().scale_min = 0.3;
  rrc.get<RandomResizedCropParams>().scale_max = 0.5;
  const TransformPipeline p = *TransformPipeline::Create({rrc}, DType::kUint8, Layout::kHWC);
  JpegDecoder fast, ref;
  ref.set_fast_paths(false);
  std::vector<uint8_t> a(200 * 200 * 3), b(200 * 200 * 3);
  for (const PathCase& c : PathCases()) {
    SCOPED_TRACE(c.name);
    const std::vector<uint8_t> jpeg = EncodeJpeg(c.flavor);
    for (int sample = 0; sample < 4; ++sample) {
      SampleRng ra(sample), rb(sample);
      DecodeStats stats;
      ASSERT_TRUE(fast.DecodeInto(jpeg.data(), jpeg.size(), p, ra, a.data(), &stats).ok());
      ASSERT_TRUE(ref.DecodeInto(jpeg.data(), jpeg.size(), p, rb, b.data()).ok());
      if (stats.scale_num != 8) continue;  // the crop was large enough to scale
      const Diff d = Compare(a, b);
      EXPECT_EQ(d.max, 0) << "sample " << sample << " decoded " << stats.decoded_width << "x"
                          << stats.decoded_height;
    }
  }
}

TEST(JpegDecoderInto, ReferencePathIsFullDecodePlusResample) {
  const std::vector<uint8_t> jpeg = EncodeJpeg(Flavor(333, 250, 2, 2));
  JpegDecoder decoder;
  decoder.set_fast_paths(false);
  auto full = decoder.DecodeFull(jpeg.data(), jpeg.size());
  ASSERT_TRUE(full.ok());
  const TransformPipeline p = RandomCropFlip();
  for (int s = 0; s < 5; ++s) {
    SampleRng r1(s), r2(s);
    std::vector<uint8_t> got(224 * 224 * 3), want(224 * 224 * 3);
    ASSERT_TRUE(decoder.DecodeInto(jpeg.data(), jpeg.size(), p, r1, got.data()).ok());
    const SampleGeometry g = p.Plan(333, 250, r2);
    AxisMapping ax, ay;
    GeometryToAxes(g, 1.0, 333, 250, &ax, &ay);
    Resampler rs;
    rs.Resample(full->pixels.data(), 333 * 3, 3, 333, 250, ax, ay,
                OutputFormat::FromPipeline(p), want.data());
    EXPECT_EQ(got, want);
  }
}

TEST(JpegDecoderInto, SameSeedSameBytesAndFloatOutput) {
  const std::vector<uint8_t> jpeg = EncodeJpeg(Flavor(500, 375, 2, 2));
  TransformStep norm = Step(Kind::kNormalize);
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
  std::copy(mean, mean + 3, norm.get<NormalizeParams>().mean);
  std::copy(stdv, stdv + 3, norm.get<NormalizeParams>().std);
  TransformStep flip = Step(Kind::kRandomHorizontalFlip);
  const TransformPipeline f32 = *TransformPipeline::Create(
      {Step(Kind::kRandomResizedCrop, 224), flip, Step(Kind::kToTensor), norm}, DType::kFloat32,
      Layout::kCHW);
  const TransformPipeline u8 = *TransformPipeline::Create(
      {Step(Kind::kRandomResizedCrop, 224), flip}, DType::kUint8, Layout::kHWC);
  JpegDecoder decoder;
  std::vector<float> x(224 * 224 * 3), y(224 * 224 * 3);
  std::vector<uint8_t> levels(224 * 224 * 3);
  for (int s = 0; s < 4; ++s) {
    SampleRng r1(SampleSeed(1, 2, s)), r2(SampleSeed(1, 2, s)), r3(SampleSeed(1, 2, s));
    ASSERT_TRUE(decoder.DecodeInto(jpeg.data(), jpeg.size(), f32, r1, x.data()).ok());
    ASSERT_TRUE(decoder.DecodeInto(jpeg.data(), jpeg.size(), f32, r2, y.data()).ok());
    ASSERT_TRUE(decoder.DecodeInto(jpeg.data(), jpeg.size(), u8, r3, levels.data()).ok());
    ASSERT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0);
    // float CHW normalised output is the uint8 HWC output through (v / 255 - mean) / std.
    for (int c = 0; c < 3; ++c) {
      for (int i = 0; i < 224 * 224; ++i) {
        const double want = (levels[i * 3 + c] / 255.0 - mean[c]) / stdv[c];
        ASSERT_NEAR(x[c * 224 * 224 + i], want, 2e-6);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Bad input: every case returns a Status, nothing crashes.

TEST(JpegDecoderErrors, NotAJpeg) {
  JpegDecoder decoder;
  const TransformPipeline p = ResizeCrop();
  std::vector<uint8_t> out(p.SampleBytes());
  SampleRng rng(1);
  auto expect = [&](const std::vector<uint8_t>& bytes, const char* needle) {
    const absl::Status s = decoder.DecodeInto(bytes.data(), bytes.size(), p, rng, out.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s;
    EXPECT_EQ(decoder.ReadInfo(bytes.data(), bytes.size()).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(decoder.DecodeFull(bytes.data(), bytes.size()).status().code(),
              absl::StatusCode::kInvalidArgument);
  };
  expect({}, "empty file");
  expect({0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13}, "PNG");
  expect({'G', 'I', 'F', '8', '9', 'a', 1, 0}, "GIF");
  expect({'B', 'M', 0x36, 0, 0, 0}, "BMP");
  expect({'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P'}, "WebP");
  expect({'I', 'I', '*', 0, 8, 0, 0, 0}, "TIFF");
  expect({'h', 'e', 'l', 'l', 'o', '\n'}, "text");
  expect({0x00, 0x01, 0x02, 0xfe}, "00 01 02 fe");
  // A null pointer with a zero size is an empty file too.
  EXPECT_EQ(decoder.DecodeInto(nullptr, 0, p, rng, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(JpegDecoderErrors, TruncatedIsDataLoss) {
  JpegFlavor f = Flavor(300, 200, 2, 2);
  for (bool progressive : {false, true}) {
    f.progressive = progressive;
    const std::vector<uint8_t> jpeg = EncodeJpeg(f);
    JpegDecoder decoder;
    const TransformPipeline p = ResizeCrop();
    std::vector<uint8_t> out(p.SampleBytes());
    for (size_t cut : {size_t{1}, size_t{2}, size_t{20}, size_t{200}, size_t{700},
                       jpeg.size() / 3, jpeg.size() / 2, jpeg.size() - 100, jpeg.size() - 2,
                       jpeg.size() - 1}) {
      SCOPED_TRACE(cut);
      SampleRng rng(1);
      const absl::Status s = decoder.DecodeInto(jpeg.data(), cut, p, rng, out.data());
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
      EXPECT_NE(s.message().find("truncated"), std::string::npos) << s;
      EXPECT_EQ(decoder.DecodeFull(jpeg.data(), cut).status().code(),
                absl::StatusCode::kDataLoss);
    }
    // The header alone: ReadInfo runs out of data before the first scan.
    for (size_t cut : {size_t{3}, size_t{100}, size_t{150}}) {
      const absl::Status s = decoder.ReadInfo(jpeg.data(), cut).status();
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << cut << " " << s;
    }
    // After all those failures the decoder still works.
    SampleRng rng(1);
    EXPECT_TRUE(decoder.DecodeInto(jpeg.data(), jpeg.size(), p, rng, out.data()).ok());
  }
}

// Junk after the end-of-image marker is common in the wild and Pillow accepts it; the end-marker
// check must find the real EOI however much junk follows.
TEST(JpegDecoderErrors, TrailingJunkAfterEndMarkerIsAccepted) {
  const std::vector<uint8_t> jpeg = EncodeJpeg(Flavor(300, 200, 2, 2));
  JpegDecoder decoder;
  const TransformPipeline p = ResizeCrop();
  std::vector<uint8_t> clean(p.SampleBytes()), junked(p.SampleBytes());
  SampleRng rng_a(3), rng_b(3);
  ASSERT_TRUE(decoder.DecodeInto(jpeg.data(), jpeg.size(), p, rng_a, clean.data()).ok());
  std::vector<uint8_t> with_junk = jpeg;
  for (int i = 0; i < 20000; ++i) with_junk.push_back(static_cast<uint8_t>(i * 7 % 251));
  const absl::Status s = decoder.DecodeInto(with_junk.data(), with_junk.size(), p, rng_b, junked.data());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(clean, junked);
}

/// Offset of the first entropy-coded byte (just after the first SOS header).
size_t ScanStart(const std::vector<uint8_t>& j) {
  size_t i = 2;
  while (i + 4 <= j.size()) {
    const size_t len = (size_t{j[i + 2]} << 8) | j[i + 3];
    if (j[i + 1] == 0xDA) return i + 2 + len;
    i += 2 + len;
  }
  ADD_FAILURE() << "no SOS";
  return j.size();
}

/// `jpeg` with `insert` placed just before its end-of-image marker.
std::vector<uint8_t> BeforeEoi(std::vector<uint8_t> jpeg, std::vector<uint8_t> insert) {
  jpeg.insert(jpeg.end() - 2, insert.begin(), insert.end());
  return jpeg;
}

/// A small crop in the middle: region-of-interest decoding needs only a few rows of it.
TransformPipeline SmallCenterCrop() {
  return *TransformPipeline::Create({Step(Kind::kCenterCrop, 16)}, DType::kUint8, Layout::kHWC);
}

struct Damage {
  const char* name;
  std::vector<uint8_t> bytes;
};

/// Damage libjpeg decodes past with a "Corrupt JPEG data" warning (Pillow accepts all of them).
std::vector<Damage> WarnedDamage() {
  const std::vector<uint8_t> jpeg = EncodeJpeg(Flavor(320, 240, 2, 2));
  const size_t sos = ScanStart(jpeg);
  std::vector<Damage> out;
  // Cut in the middle of the scan and re-terminated: "premature end of data segment".
  std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + static_cast<ptrdiff_t>(jpeg.size() / 2));
  cut.insert(cut.end(), {0xFF, 0xD9});
  out.push_back({"eoi mid-scan", cut});
  std::vector<uint8_t> removed = jpeg;  // the scan runs out of data before its last MCU
  removed.erase(removed.begin() + static_cast<ptrdiff_t>(sos + 100),
                removed.begin() + static_cast<ptrdiff_t>(sos + 160));
  out.push_back({"60 scan bytes removed", removed});
  std::vector<uint8_t> rst = jpeg;  // a restart marker where none may be
  rst.insert(rst.begin() + static_cast<ptrdiff_t>(sos + 100), {0xFF, 0xD0});
  out.push_back({"RST0 in the scan", rst});
  std::vector<uint8_t> junk = jpeg;  // junk between two header segments
  junk.insert(junk.begin() + 20, {0x00, 0x01, 0x02});
  out.push_back({"junk between headers", junk});
  // Damage near the end of a tall image: below any small centre crop.
  const std::vector<uint8_t> tall = EncodeJpeg(Flavor(256, 1024, 2, 2));
  std::vector<uint8_t> bottom = tall;
  bottom.erase(bottom.end() - 200, bottom.end() - 140);
  out.push_back({"damage below the crop", bottom});
  return out;
}

TEST(JpegDecoderErrors, CorruptDataIsDataLossUnlessLenient) {
  for (const Damage& d : WarnedDamage()) {
    SCOPED_TRACE(d.name);
    for (bool fast : {true, false}) {
      for (const TransformPipeline& p : {ResizeCrop(), SmallCenterCrop()}) {
        std::vector<uint8_t> out(p.SampleBytes());
        JpegDecoder decoder;
        decoder.set_fast_paths(fast);
        SampleRng rng(1);
        const absl::Status strict = decoder.DecodeInto(d.bytes.data(), d.bytes.size(), p, rng,
                                                       out.data());
        EXPECT_EQ(strict.code(), absl::StatusCode::kDataLoss) << strict;
        EXPECT_NE(std::string(strict.message()).find("corrupt JPEG data"), std::string::npos)
            << strict;
        EXPECT_EQ(decoder.DecodeFull(d.bytes.data(), d.bytes.size()).status().code(),
                  absl::StatusCode::kDataLoss);

        decoder.set_strict(false);
        SampleRng rng2(1);
        DecodeStats stats;
        const absl::Status lenient = decoder.DecodeInto(d.bytes.data(), d.bytes.size(), p, rng2,
                                                        out.data(), &stats);
        EXPECT_TRUE(lenient.ok()) << lenient;
        EXPECT_GT(stats.warnings, 0);
        EXPECT_TRUE(decoder.DecodeFull(d.bytes.data(), d.bytes.size()).ok());
      }
    }
  }
}

// Strict mode reads a file's scan to its end once; the same bytes again stop after their crop.
TEST(JpegDecoderStrict, ACleanScanIsRememberedForTheSameBytesOnly) {
  // The memo may be shared with other processes and earlier runs (RINGLOADER_SCAN_MEMO): a
  // comment segment of random bytes keeps these bytes new to it.
  decode_internal::CleanScanTable* shared = decode_internal::ProcessWideCleanScans();
  if (shared == nullptr) GTEST_SKIP() << "RINGLOADER_SCAN_MEMO=off";
  decode_internal::CleanScanTable& memo = *shared;
  std::vector<uint8_t> tall = EncodeJpeg(Flavor(256, 1024, 2, 2));
  std::random_device random;
  std::vector<uint8_t> comment = {0xFF, 0xFE, 0x00, 0x0A};
  for (int i = 0; i < 8; ++i) comment.push_back(static_cast<uint8_t>(random()));
  tall.insert(tall.begin() + 2, comment.begin(), comment.end());
  const uint64_t fingerprint = memo.Fingerprint(tall.data(), tall.size());
  ASSERT_FALSE(memo.Contains(fingerprint));
  const TransformPipeline p = SmallCenterCrop();
  std::vector<uint8_t> first(p.SampleBytes()), second(p.SampleBytes());

  JpegDecoder lenient;
  lenient.set_strict(false);
  SampleRng rng0(3);
  ASSERT_TRUE(lenient.DecodeInto(tall.data(), tall.size(), p, rng0, first.data()).ok());
  EXPECT_FALSE(memo.Contains(fingerprint));  // only a strict read vouches for the scan

  JpegDecoder decoder;
  SampleRng rng1(3), rng2(3);
  ASSERT_TRUE(decoder.DecodeInto(tall.data(), tall.size(), p, rng1, first.data()).ok());
  EXPECT_TRUE(memo.Contains(fingerprint));
  ASSERT_TRUE(decoder.DecodeInto(tall.data(), tall.size(), p, rng2, second.data()).ok());
  EXPECT_EQ(first, second);

  // Damage below the crop in a copy: other bytes, so the scan is read to its end again.
  std::vector<uint8_t> bottom = tall;
  bottom.erase(bottom.end() - 200, bottom.end() - 140);
  SampleRng rng3(3);
  const absl::Status s = decoder.DecodeInto(bottom.data(), bottom.size(), p, rng3, first.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_FALSE(memo.Contains(memo.Fingerprint(bottom.data(), bottom.size())));
}

/// Scan flavours for the tail tests: interleaved (4:2:0, 4:2:2, 4:4:4, four-component CMYK), one
/// component (gray), restart markers, progressive, and arithmetic coding with restarts (the
/// library's own skip).
/// Odd sizes leave partial MCUs at the right and bottom edges.
std::vector<FullCase> TailCases(int w, int h) {
  std::vector<FullCase> cases = {
      {"420", Flavor(w, h, 2, 2)}, {"422", Flavor(w, h, 2, 1)}, {"444", Flavor(w, h, 1, 1)}};
  FullCase c{"gray", Flavor(w, h, 1, 1)};
  c.flavor.color = Color::kGray;
  cases.push_back(c);
  c = {"cmyk", Flavor(w, h, 2, 2)};
  c.flavor.color = Color::kCmyk;
  cases.push_back(c);
  c = {"restart", Flavor(w, h, 2, 2)};
  c.flavor.restart_interval = 4;
  cases.push_back(c);
  c = {"progressive", Flavor(w, h, 2, 2)};
  c.flavor.progressive = true;
  cases.push_back(c);
  c = {"arithmetic_restart", Flavor(w, h, 2, 2)};
  c.flavor.arithmetic = true;
  c.flavor.restart_interval = 3;
  cases.push_back(c);
  return cases;
}

// The scan past the crop is read by the entropy decoder alone: for clean files of every scan
// layout it must end exactly at the end of the scan (one MCU too many or too few is a
// corrupt-data error), wherever the crop ends.
TEST(JpegDecoderStrict, CleanFilesOfEveryScanLayoutPassWhateverTheCrop) {
  TransformStep rrc = Step(Kind::kRandomResizedCrop, 24);
  const TransformPipeline p = *TransformPipeline::Create({rrc}, DType::kUint8, Layout::kHWC);
  std::vector<uint8_t> out(p.SampleBytes());
  static uint8_t run = 0;  // the memo is process-wide: new bytes when the test repeats
  ++run;
  for (const FullCase& c : TailCases(203, 157)) {
    SCOPED_TRACE(c.name);
    const std::vector<uint8_t> jpeg = EncodeJpeg(c.flavor);
    for (uint8_t seed = 0; seed < 12; ++seed) {
      // A comment segment numbering the copy keeps the memo from vouching for it.
      std::vector<uint8_t> bytes = jpeg;
      bytes.insert(bytes.begin() + 2, {0xFF, 0xFE, 0x00, 0x04, seed, run});
      JpegDecoder decoder;
      SampleRng rng(seed);
      DecodeStats stats;
      const absl::Status s = decoder.DecodeInto(bytes.data(), bytes.size(), p, rng, out.data(),
                                                &stats);
      ASSERT_TRUE(s.ok()) << s << " seed " << int{seed};
      EXPECT_EQ(stats.warnings, 0);
    }
  }
}

// Damage below the crop: the strict (and the lenient) verdict of a small centre crop is the
// verdict of a full decode, which reads every row, for each scan layout and kind of damage.
TEST(JpegDecoderStrict, DamageBelowTheCropGetsTheFullDecodesVerdict) {
  const TransformPipeline p = SmallCenterCrop();
  std::vector<uint8_t> out(p.SampleBytes());
  SampleRng chaos(2024);
  for (const FullCase& c : TailCases(160, 480)) {
    SCOPED_TRACE(c.name);
    const std::vector<uint8_t> jpeg = EncodeJpeg(c.flavor);
    const size_t scan = ScanStart(jpeg);
    // The last fifth of the file: far below the 16-pixel centre crop's rows.
    const size_t from = scan + (jpeg.size() - scan) * 4 / 5;
    const size_t to = jpeg.size() - 2;  // the end-of-image marker stays
    int refused = 0;
    for (int iter = 0; iter < 32; ++iter) {
      std::vector<uint8_t> bytes = jpeg;
      const size_t pos = static_cast<size_t>(chaos.RandInt(static_cast<int64_t>(from),
                                                           static_cast<int64_t>(to)));
      switch (iter % 4) {
        case 0:  // bit flips
          for (int k = 0; k < 3; ++k) {
            const size_t at = std::min(to - 1, pos + static_cast<size_t>(chaos.RandInt(0, 64)));
            bytes[at] ^= static_cast<uint8_t>(1u << chaos.RandInt(0, 8));
          }
          break;
        case 1:  // bytes removed
          bytes.erase(bytes.begin() + static_cast<ptrdiff_t>(pos),
                      bytes.begin() + static_cast<ptrdiff_t>(std::min(to, pos + 1 + iter)));
          break;
        case 2:  // cut and re-terminated: the scan runs out of data
          bytes.resize(pos);
          bytes.insert(bytes.end(), {0xFF, 0xD9});
          break;
        default:  // a restart marker where the data or another restart marker should be
          bytes.insert(bytes.begin() + static_cast<ptrdiff_t>(pos),
                       {0xFF, static_cast<uint8_t>(0xD0 + chaos.RandInt(0, 8))});
          break;
      }
      for (bool strict : {true, false}) {
        JpegDecoder roi, full;
        roi.set_strict(strict);
        full.set_strict(strict);
        SampleRng rng(iter);
        const absl::Status s = roi.DecodeInto(bytes.data(), bytes.size(), p, rng, out.data());
        const absl::Status f = full.DecodeFull(bytes.data(), bytes.size()).status();
        EXPECT_EQ(s.code(), f.code()) << "damage " << iter % 4 << " at " << pos << " strict "
                                      << strict << ": crop " << s << ", full " << f;
        if (strict && !s.ok()) ++refused;
      }
    }
    EXPECT_GE(refused, 8);  // the cuts at least are refused by every layout
  }
}

// Pillow reads the markers up to end-of-image and refuses a broken one, whatever the crop.
TEST(JpegDecoderErrors, BrokenMarkerAfterTheScanIsDataLossInBothModes) {
  const std::vector<uint8_t> tall = EncodeJpeg(Flavor(256, 1024, 2, 2));
  const std::vector<Damage> cases = {
      {"second SOF", BeforeEoi(tall, {0xFF, 0xC0, 0x00, 0x03, 0x08})},
      {"DHT with a bogus length", BeforeEoi(tall, {0xFF, 0xC4, 0x00, 0x05, 0x00, 0x01, 0x02})},
  };
  for (const Damage& d : cases) {
    SCOPED_TRACE(d.name);
    for (bool strict : {true, false}) {
      JpegDecoder decoder;
      decoder.set_strict(strict);
      const TransformPipeline p = SmallCenterCrop();
      std::vector<uint8_t> out(p.SampleBytes());
      SampleRng rng(1);
      EXPECT_EQ(decoder.DecodeInto(d.bytes.data(), d.bytes.size(), p, rng, out.data()).code(),
                absl::StatusCode::kDataLoss);
      EXPECT_EQ(decoder.DecodeFull(d.bytes.data(), d.bytes.size()).status().code(),
                absl::StatusCode::kDataLoss);
    }
  }
}

TEST(JpegDecoderErrors, OdditiesJudgedAsPillowDoes) {
  // Pillow identifies a JPEG by FF D8 FF: junk right after SOI is refused in both modes.
  std::vector<uint8_t> jpeg = EncodeJpeg(Flavor(64, 48, 2, 2));
  std::vector<uint8_t> junk_after_soi = jpeg;
  junk_after_soi.insert(junk_after_soi.begin() + 2, {0x00, 0x00, 0x00});
  JpegDecoder decoder;
  decoder.set_strict(false);
  const absl::Status s = decoder.DecodeFull(junk_after_soi.data(), junk_after_soi.size()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  // Accepted in strict mode: bytes after the last entropy-coded byte (no pixel is touched), an
  // empty segment before EOI, and a progressive file whose last scan is missing.
  decoder.set_strict(true);
  const std::vector<uint8_t> padded = BeforeEoi(jpeg, {0x12, 0x34, 0x56});
  const std::vector<uint8_t> empty_segment = BeforeEoi(jpeg, {0xFF, 0xC4, 0x00, 0x02});
  JpegFlavor prog_flavor = Flavor(64, 48, 2, 2);
  prog_flavor.progressive = true;
  std::vector<uint8_t> prog = EncodeJpeg(prog_flavor);
  size_t last_sos = 0;
  for (size_t i = 0; i + 1 < prog.size(); ++i) {
    if (prog[i] == 0xFF && prog[i + 1] == 0xDA) last_sos = i;
  }
  prog.resize(last_sos);
  prog.insert(prog.end(), {0xFF, 0xD9});
  const std::vector<uint8_t>* accepted[] = {&padded, &empty_segment, &prog};
  for (const std::vector<uint8_t>* bytes : accepted) {
    const TransformPipeline p = SmallCenterCrop();
    std::vector<uint8_t> out(p.SampleBytes());
    SampleRng rng(1);
    const absl::Status st = decoder.DecodeInto(bytes->data(), bytes->size(), p, rng, out.data());
    EXPECT_TRUE(st.ok()) << st;
    EXPECT_TRUE(decoder.DecodeFull(bytes->data(), bytes->size()).ok());
  }
}

TEST(JpegDecoderErrors, RandomCorruptionNeverCrashes) {
  JpegFlavor f = Flavor(96, 72, 2, 2);
  std::vector<std::vector<uint8_t>> sources;
  sources.push_back(EncodeJpeg(f));
  f.progressive = true;
  sources.push_back(EncodeJpeg(f));
  f.progressive = false;
  f.arithmetic = true;
  f.restart_interval = 2;
  sources.push_back(EncodeJpeg(f));
  TransformStep rrc = Step(Kind::kRandomResizedCrop, 32);
  const TransformPipeline p = *TransformPipeline::Create({rrc}, DType::kUint8, Layout::kCHW);
  std::vector<uint8_t> out(p.SampleBytes());
  JpegDecoder decoder;
  decoder.set_max_image_pixels(4 << 20);  // corrupted dimensions must not allocate gigabytes
  SampleRng chaos(77);
  int ok = 0, failed = 0;
  for (int iter = 0; iter < 900; ++iter) {
    std::vector<uint8_t> bytes = sources[iter % sources.size()];
    const int flips = 1 + static_cast<int>(chaos.RandInt(0, 8));
    for (int k = 0; k < flips; ++k) {
      // Half the flips land in the header, where they do the most damage.
      const size_t limit = (k % 2 == 0) ? std::min<size_t>(bytes.size(), 700) : bytes.size();
      const size_t pos = static_cast<size_t>(chaos.RandInt(0, static_cast<int64_t>(limit)));
      bytes[pos] ^= static_cast<uint8_t>(1u << chaos.RandInt(0, 8));
    }
    SampleRng rng(iter);
    decoder.set_fast_paths(iter % 3 != 0);
    const absl::Status s = decoder.DecodeInto(bytes.data(), bytes.size(), p, rng, out.data());
    (s.ok() ? ok : failed)++;
    auto full = decoder.DecodeFull(bytes.data(), bytes.size());
    (void)decoder.ReadInfo(bytes.data(), bytes.size());
    if (!s.ok()) {
      EXPECT_NE(s.code(), absl::StatusCode::kUnknown) << s;
      EXPECT_FALSE(s.message().empty());
    }
  }
  EXPECT_GT(ok + failed, 0);
  std::printf("bit flips: %d decoded, %d rejected\n", ok, failed);
}

TEST(JpegDecoderErrors, HugeDimensionsAreRefusedBeforeAllocating) {
  std::vector<uint8_t> jpeg = EncodeJpeg(Flavor(64, 48, 2, 2));
  const size_t sof = FindSof(jpeg);
  ASSERT_GT(sof, 0u);
  // SOF: FF C0, length(2), precision(1), height(2), width(2).
  jpeg[sof + 5] = 60000 >> 8;
  jpeg[sof + 6] = 60000 & 0xff;
  jpeg[sof + 7] = 60000 >> 8;
  jpeg[sof + 8] = 60000 & 0xff;
  JpegDecoder decoder;
  const TransformPipeline p = ResizeCrop();
  std::vector<uint8_t> out(p.SampleBytes());
  SampleRng rng(1);
  const absl::Status s = decoder.DecodeInto(jpeg.data(), jpeg.size(), p, rng, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_NE(s.message().find("60000 x 60000 = 3600000000 pixels exceeds the limit 178956970"),
            std::string::npos)
      << s;
  EXPECT_EQ(decoder.ReadInfo(jpeg.data(), jpeg.size()).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(decoder.DecodeFull(jpeg.data(), jpeg.size()).status().code(),
            absl::StatusCode::kOutOfRange);
  // The limit is configurable.
  const std::vector<uint8_t> ok = EncodeJpeg(Flavor(64, 48, 2, 2));
  decoder.set_max_image_pixels(64 * 48 - 1);
  EXPECT_EQ(decoder.ReadInfo(ok.data(), ok.size()).status().code(), absl::StatusCode::kOutOfRange);
  decoder.set_max_image_pixels(64 * 48);
  EXPECT_TRUE(decoder.ReadInfo(ok.data(), ok.size()).ok());
}

TEST(JpegDecoderErrors, LosslessAndTwelveBitAreUnsupported) {
  // Real lossless and 12-bit files need an encoder this libjpeg build lacks, so patch the frame
  // header of a baseline file: the decoder rejects both while reading the header.
  const std::vector<uint8_t> base = EncodeJpeg(Flavor(64, 48, 2, 2));
  const size_t sof = FindSof(base);
  ASSERT_GT(sof, 0u);
  JpegDecoder decoder;
  const TransformPipeline p = ResizeCrop();
  std::vector<uint8_t> out(p.SampleBytes());
  SampleRng rng(1);

  std::vector<uint8_t> lossless = base;
  lossless[sof + 1] = 0xC3;  // SOF3: lossless, Huffman
  absl::Status s = decoder.DecodeInto(lossless.data(), lossless.size(), p, rng, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("lossless"), std::string::npos) << s;

  std::vector<uint8_t> twelve = base;
  twelve[sof + 1] = 0xC1;  // extended sequential, where 12-bit precision is legal
  twelve[sof + 4] = 12;
  s = decoder.DecodeInto(twelve.data(), twelve.size(), p, rng, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("8-bit"), std::string::npos) << s;
  EXPECT_EQ(decoder.DecodeFull(twelve.data(), twelve.size()).status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST(JpegDecoderEdge, OnePixelImage) {
  const std::vector<uint8_t> jpeg = EncodeJpeg(Flavor(1, 1, 2, 2));
  JpegDecoder decoder;
  auto full = decoder.DecodeFull(jpeg.data(), jpeg.size());
  ASSERT_TRUE(full.ok()) << full.status();
  ASSERT_EQ(full->pixels.size(), 3u);
  for (bool fast : {true, false}) {
    decoder.set_fast_paths(fast);
    for (const TransformPipeline& p : {ResizeCrop(), RandomCropFlip()}) {
      std::vector<uint8_t> out(p.SampleBytes());
      SampleRng rng(3);
      ASSERT_TRUE(decoder.DecodeInto(jpeg.data(), jpeg.size(), p, rng, out.data()).ok());
      for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], full->pixels[i % 3]) << i;
    }
  }
}

TEST(JpegDecoderEdge, ExtremeAspectAndPaddedCrop) {
  // 2000x8 through Resize(256) + CenterCrop(224): the resized view is 64000x256 and the crop
  // samples a thin horizontal slice; CenterCrop(300) on a small image pads with zeros.
  JpegDecoder fast, ref;
  ref.set_fast_paths(false);
  const std::vector<uint8_t> thin = EncodeJpeg(Flavor(2000, 8, 2, 2));
  std::vector<uint8_t> a(224 * 224 * 3), b(224 * 224 * 3);
  SampleRng r1(1), r2(1);
  ASSERT_TRUE(fast.DecodeInto(thin.data(), thin.size(), ResizeCrop(), r1, a.data()).ok());
  ASSERT_TRUE(ref.DecodeInto(thin.data(), thin.size(), ResizeCrop(), r2, b.data()).ok());
  EXPECT_LT(Compare(a, b).mean, 1.5);

  const std::vector<uint8_t> small = EncodeJpeg(Flavor(120, 90, 2, 2));
  const TransformPipeline pad = *TransformPipeline::Create({Step(Kind::kCenterCrop, 150)},
                                                           DType::kUint8, Layout::kHWC);
  std::vector<uint8_t> o(150 * 150 * 3);
  SampleRng r3(1);
  ASSERT_TRUE(fast.DecodeInto(small.data(), small.size(), pad, r3, o.data()).ok());
  auto full = fast.DecodeFull(small.data(), small.size());
  ASSERT_TRUE(full.ok());
  // Padding is (150 - 120) // 2 = 15 columns and (150 - 90) // 2 = 30 rows on the leading side.
  for (int y = 0; y < 150; ++y) {
    for (int x = 0; x < 150; ++x) {
      const int sx = x - 15, sy = y - 30;
      const bool inside = sx >= 0 && sx < 120 && sy >= 0 && sy < 90;
      for (int c = 0; c < 3; ++c) {
        const uint8_t want = inside ? full->pixels[(sy * 120 + sx) * 3 + c] : 0;
        ASSERT_EQ(o[(y * 150 + x) * 3 + c], want) << x << "," << y;
      }
    }
  }
}

TEST(JpegDecoderRoi, FullScaleRegionDecodeEqualsFullDecode) {
  // Without DCT scaling the region-of-interest path (skipped rows, cropped iMCU columns) must
  // give exactly the pixels of a whole decode for any geometry, including those the fast path
  // would have scaled (RegionOfInterestAtFullScaleIsExact covers only unscaled ones).
  JpegDecoder roi, ref;
  roi.set_dct_scaling(false);
  ref.set_fast_paths(false);
  const JpegFlavor flavours[] = {Flavor(500, 375, 2, 2), Flavor(333, 500, 2, 1), Flavor(97, 61, 1, 1)};
  for (const JpegFlavor& f : flavours) {
    for (bool progressive : {false, true}) {
      JpegFlavor g = f;
      g.progressive = progressive;
      const std::vector<uint8_t> jpeg = EncodeJpeg(g);
      for (const TransformPipeline& p : {ResizeCrop(), RandomCropFlip()}) {
        for (uint64_t seed = 0; seed < 4; ++seed) {
          std::vector<uint8_t> a(p.SampleBytes()), b(p.SampleBytes());
          SampleRng r1(seed), r2(seed);
          ASSERT_TRUE(roi.DecodeInto(jpeg.data(), jpeg.size(), p, r1, a.data()).ok());
          ASSERT_TRUE(ref.DecodeInto(jpeg.data(), jpeg.size(), p, r2, b.data()).ok());
          ASSERT_EQ(a, b) << g.width << "x" << g.height << " progressive " << progressive
                          << " seed " << seed;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// fast_decode levels: the DCT scale rule and what each level decodes.

SampleGeometry Crop(double w, double h, int out_w, int out_h) {
  SampleGeometry g;
  g.x0 = 10;
  g.x1 = 10 + w;
  g.y0 = 5;
  g.y1 = 5 + h;
  g.out_w = out_w;
  g.out_h = out_h;
  return g;
}

TEST(JpegDecoderScale, ChoosesTheSmallestSimdScaleThatCoversTheCrop) {
  // "scale": the decoded crop (crop * M/8) is at least the output in both dimensions, and the
  // next smaller SIMD scale would not be.
  EXPECT_EQ(ChooseDctScale(Crop(448, 448, 224, 224), FastDecode::kScale), 4);
  EXPECT_EQ(ChooseDctScale(Crop(447, 900, 224, 224), FastDecode::kScale), 8);
  EXPECT_EQ(ChooseDctScale(Crop(1792, 1792, 224, 224), FastDecode::kScale), 1);
  EXPECT_EQ(ChooseDctScale(Crop(1791, 1792, 224, 224), FastDecode::kScale), 2);
  // "fastest": 3/4 of the output suffices (the resampler enlarges by up to 4/3).
  EXPECT_EQ(ChooseDctScale(Crop(336, 336, 224, 224), FastDecode::kFastest), 4);
  EXPECT_EQ(ChooseDctScale(Crop(335, 336, 224, 224), FastDecode::kFastest), 8);
  EXPECT_EQ(ChooseDctScale(Crop(1344, 1344, 224, 224), FastDecode::kFastest), 1);
  // A flipped crop (x0 > x1) counts by its size.
  SampleGeometry flipped = Crop(448, 448, 224, 224);
  std::swap(flipped.x0, flipped.x1);
  EXPECT_EQ(ChooseDctScale(flipped, FastDecode::kScale), 4);
  // Off, and a nearest filter (which picks source pixels), never scale.
  EXPECT_EQ(ChooseDctScale(Crop(4000, 4000, 224, 224), FastDecode::kOff), 8);
  SampleGeometry nearest = Crop(4000, 4000, 224, 224);
  nearest.filter = Interpolation::kNearest;
  EXPECT_EQ(ChooseDctScale(nearest, FastDecode::kFastest), 8);
  // Exhaustively: the choice covers the output (at the level's fraction) and is minimal.
  for (FastDecode level : {FastDecode::kScale, FastDecode::kFastest}) {
    const double cover = level == FastDecode::kFastest ? 0.75 : 1.0;
    for (int w = 20; w <= 3000; w += 7) {
      for (int out : {64, 224, 256}) {
        const SampleGeometry g = Crop(w, w * 0.75, out, out * 3 / 4);
        const int m = ChooseDctScale(g, level);
        ASSERT_TRUE(m == 1 || m == 2 || m == 4 || m == 8) << m;
        if (m < 8) {
          EXPECT_GE(w * m / 8.0, cover * out - 1e-9) << w << " -> " << out;
        }
        if (m > 1) {
          EXPECT_LT(w * (m / 2) / 8.0, cover * out) << w << " -> " << out << " chose " << m;
        }
      }
    }
  }
}

TEST(JpegDecoderScale, LevelsByName) {
  EXPECT_EQ(*ParseFastDecode("off"), FastDecode::kOff);
  EXPECT_EQ(*ParseFastDecode("scale"), FastDecode::kScale);
  EXPECT_EQ(*ParseFastDecode("fastest"), FastDecode::kFastest);
  for (FastDecode level : {FastDecode::kOff, FastDecode::kScale, FastDecode::kFastest}) {
    EXPECT_EQ(*ParseFastDecode(FastDecodeName(level)), level);
  }
  const absl::StatusOr<FastDecode> bad = ParseFastDecode("fast");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("fast_decode"), absl::string_view::npos);
  EXPECT_NE(bad.status().message().find("'fast'"), absl::string_view::npos);
}

TEST(JpegDecoderScale, FastestScalesAnOrdinaryPhotoThatScaleDecodesWhole) {
  // 500x375 with Resize(224) + CenterCrop(224): the crop is 375x375 source pixels. At 4/8
  // that is 187 pixels: below 224 ("scale" keeps 8/8) but at least 3/4 of it ("fastest" decodes
  // at 4/8 and enlarges).
  const std::vector<uint8_t> jpeg = EncodeJpeg(Flavor(500, 375, 2, 2));
  const TransformPipeline p = *TransformPipeline::Create(
      {Step(Kind::kResize, 224), Step(Kind::kCenterCrop, 224)}, DType::kUint8, Layout::kHWC);
  JpegDecoder ref, scale, fastest;
  ref.set_fast_paths(false);
  scale.set_fast_decode(FastDecode::kScale);
  fastest.set_fast_decode(FastDecode::kFastest);
  std::vector<uint8_t> r(p.SampleBytes()), a(p.SampleBytes()), b(p.SampleBytes());
  SampleRng r0(1), r1(1), r2(1);
  DecodeStats sa, sb;
  ASSERT_TRUE(ref.DecodeInto(jpeg.data(), jpeg.size(), p, r0, r.data()).ok());
  ASSERT_TRUE(scale.DecodeInto(jpeg.data(), jpeg.size(), p, r1, a.data(), &sa).ok());
  ASSERT_TRUE(fastest.DecodeInto(jpeg.data(), jpeg.size(), p, r2, b.data(), &sb).ok());
  EXPECT_EQ(sa.scale_num, 8);
  EXPECT_EQ(a, r);  // 8/8 with the accurate IDCT: exactly the reference
  EXPECT_EQ(sb.scale_num, 4);
  EXPECT_LT(sb.decoded_width, 250);
  const Diff d = Compare(b, r);
  // Half-scale decode enlarged by 224/187: a softer image, a few levels off on average.
  EXPECT_LT(d.mean, 12.0);
  EXPECT_GT(d.max, 0);
  // The same decoder at "off" is exact again: the IDCT choice does not stick to the next image.
  fastest.set_fast_decode(FastDecode::kOff);
  SampleRng r3(1);
  ASSERT_TRUE(fastest.DecodeInto(jpeg.data(), jpeg.size(), p, r3, b.data(), &sb).ok());
  EXPECT_EQ(sb.scale_num, 8);
  EXPECT_EQ(b, r);
}

}  // namespace
}  // namespace ringloader
