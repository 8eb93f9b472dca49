#include "transform/image_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace ringloader {
namespace {

// A packed RGB image owning its pixels.
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> pixels;

  Image(int w, int h) : width(w), height(h), pixels(static_cast<size_t>(w) * h * 3) {}
  RgbView view() { return RgbView{pixels.data(), width, height, static_cast<size_t>(width) * 3}; }
  uint8_t* at(int x, int y) { return pixels.data() + (static_cast<size_t>(y) * width + x) * 3; }
};

// Deterministic texture with every channel different: smooth ramps plus a hash.
Image Textured(int w, int h, uint32_t seed = 1) {
  Image img(w, h);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) {
        uint32_t v = (x * 73856093u) ^ (y * 19349663u) ^ ((c + seed) * 83492791u);
        v ^= v >> 13;
        img.at(x, y)[c] = static_cast<uint8_t>((x * 255 / std::max(w - 1, 1) + y * 3 + c * 40 + (v & 31)) & 255);
      }
    }
  }
  return img;
}

// A 3x2 image whose pixel (x, y) has levels (10y + x, 100 + 10y + x, 200 + 10y + x).
Image Small3x2() {
  Image img(3, 2);
  for (int y = 0; y < 2; ++y) {
    for (int x = 0; x < 3; ++x) {
      img.at(x, y)[0] = static_cast<uint8_t>(10 * y + x);
      img.at(x, y)[1] = static_cast<uint8_t>(100 + 10 * y + x);
      img.at(x, y)[2] = static_cast<uint8_t>(200 + 10 * y + x);
    }
  }
  return img;
}

const uint8_t kBlack[3] = {0, 0, 0};

TEST(ImageOpsTest, IdentityParametersLeaveTheImageUnchanged) {
  const Image original = Textured(37, 23);
  ImageOpScratch scratch;
  auto expect_identity = [&](const char* what, auto op) {
    Image img = original;
    op(img.view());
    EXPECT_EQ(img.pixels, original.pixels) << what;
  };
  expect_identity("brightness 1", [](RgbView v) { AdjustBrightness(v, 1.0); });
  expect_identity("contrast 1", [](RgbView v) { AdjustContrast(v, 1.0); });
  expect_identity("saturation 1", [](RgbView v) { AdjustSaturation(v, 1.0); });
  expect_identity("sharpness 1", [&](RgbView v) { AdjustSharpness(v, 1.0, scratch); });
  expect_identity("posterize 8", [](RgbView v) { Posterize(v, 8); });
  expect_identity("solarize 256", [](RgbView v) { Solarize(v, 256); });
  expect_identity("solarize_add 0", [](RgbView v) { SolarizeAdd(v, 0, 128); });
  expect_identity("blur 1x1", [&](RgbView v) { GaussianBlur(v, 1, 1, 1.0, 1.0, scratch); });
  expect_identity("rotate 0", [&](RgbView v) { Rotate(v, 0, Interpolation::kBilinear, kBlack, false, 0, 0, scratch); });
  expect_identity("rotate 360", [&](RgbView v) { Rotate(v, -360, Interpolation::kBicubic, kBlack, false, 0, 0, scratch); });
  for (Interpolation filter : {Interpolation::kNearest, Interpolation::kBilinear, Interpolation::kBicubic}) {
    expect_identity("affine identity", [&](RgbView v) {
      Affine(v, 0, 0, 0, 1.0, 0, 0, filter, kBlack, false, 0, 0, scratch);
    });
    expect_identity("aug op identity", [&](RgbView v) { ApplyAugOp(AugOp::kIdentity, 5, filter, kBlack, v, scratch); });
    expect_identity("timm shear 0", [&](RgbView v) { ApplyTimmOp(AugOp::kShearX, 0, filter, kBlack, v, scratch); });
  }
  expect_identity("timm posterize 8", [&](RgbView v) {
    ApplyTimmOp(AugOp::kPosterize, 8, Interpolation::kNearest, kBlack, v, scratch);
  });
  expect_identity("brightness magnitude 0", [&](RgbView v) {
    ApplyAugOp(AugOp::kBrightness, 0, Interpolation::kNearest, kBlack, v, scratch);
  });
}

TEST(ImageOpsTest, InvertIsAnInvolution) {
  const Image original = Textured(16, 9);
  Image img = original;
  Invert(img.view());
  for (size_t i = 0; i < img.pixels.size(); ++i) ASSERT_EQ(img.pixels[i], 255 - original.pixels[i]);
  Invert(img.view());
  EXPECT_EQ(img.pixels, original.pixels);
}

TEST(ImageOpsTest, DegenerateFactorsGiveTheBlendTarget) {
  Image img = Textured(8, 8);
  Image black = img;
  AdjustBrightness(black.view(), 0.0);
  for (uint8_t v : black.pixels) ASSERT_EQ(v, 0);

  Image gray = img;
  AdjustSaturation(gray.view(), 0.0);
  Image luma = img;
  ToGrayscale(luma.view());
  EXPECT_EQ(gray.pixels, luma.pixels);

  Image flat = img;
  AdjustContrast(flat.view(), 0.0);
  for (uint8_t v : flat.pixels) ASSERT_EQ(v, flat.pixels[0]);
}

TEST(ImageOpsTest, GrayscaleUsesPillowWeightsAndRounding) {
  Image img(4, 1);
  const uint8_t colours[4][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {10, 20, 30}};
  for (int x = 0; x < 4; ++x) std::copy(colours[x], colours[x] + 3, img.at(x, 0));
  ToGrayscale(img.view());
  // (r * 19595 + g * 38470 + b * 7471 + 32768) >> 16
  const uint8_t expected[4] = {76, 150, 29, 18};
  for (int x = 0; x < 4; ++x) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(img.at(x, 0)[c], expected[x]) << x;
  }
}

TEST(ImageOpsTest, PointOperationsOnHandPickedLevels) {
  Image img(4, 1);
  const uint8_t levels[4] = {0, 100, 128, 255};
  for (int x = 0; x < 4; ++x) img.at(x, 0)[0] = img.at(x, 0)[1] = img.at(x, 0)[2] = levels[x];
  auto channel0 = [](Image& i) {
    std::vector<int> out;
    for (int x = 0; x < i.width; ++x) out.push_back(i.at(x, 0)[0]);
    return out;
  };
  Image p = img;
  Posterize(p.view(), 1);
  EXPECT_EQ(channel0(p), (std::vector<int>{0, 0, 128, 128}));
  Posterize(p.view(), 0);
  EXPECT_EQ(channel0(p), (std::vector<int>{0, 0, 0, 0}));
  Image s = img;
  Solarize(s.view(), 128);
  EXPECT_EQ(channel0(s), (std::vector<int>{0, 100, 127, 0}));
  Image f = img;
  Solarize(f.view(), 100.5);  // fractional thresholds compare as Python does
  EXPECT_EQ(channel0(f), (std::vector<int>{0, 100, 127, 0}));
  Solarize(f.view(), 99.5);
  EXPECT_EQ(channel0(f), (std::vector<int>{0, 155, 128, 0}));
  Image a = img;
  SolarizeAdd(a.view(), 30, 128);
  EXPECT_EQ(channel0(a), (std::vector<int>{30, 130, 128, 255}));
  SolarizeAdd(a.view(), 240, 128);  // 30 + 240 clips; 130 is above the threshold
  EXPECT_EQ(channel0(a), (std::vector<int>{255, 130, 128, 255}));
}

TEST(ImageOpsTest, AutoContrastStretchesEachChannel) {
  Image img(2, 1);
  const uint8_t first[3] = {55, 0, 7}, second[3] = {140, 255, 7};  // channel 0: scale 3
  std::copy(first, first + 3, img.at(0, 0));
  std::copy(second, second + 3, img.at(1, 0));
  AutoContrast(img.view());
  EXPECT_EQ(img.at(0, 0)[0], 0);
  EXPECT_EQ(img.at(1, 0)[0], 255);
  EXPECT_EQ(img.at(0, 0)[1], 0);
  EXPECT_EQ(img.at(1, 0)[1], 255);
  EXPECT_EQ(img.at(0, 0)[2], 7);  // a single level is left alone
  EXPECT_EQ(img.at(1, 0)[2], 7);
}

TEST(ImageOpsTest, EqualizeClipsLevelsAbove255) {
  // 300 zeros and one 1: step = (301 - 1) // 255 = 1, so level 1 maps to 300, clipped to 255.
  Image img(301, 1);
  img.at(300, 0)[0] = img.at(300, 0)[1] = img.at(300, 0)[2] = 1;
  Equalize(img.view());
  EXPECT_EQ(img.at(0, 0)[0], 0);
  EXPECT_EQ(img.at(300, 0)[0], 255);
  EXPECT_EQ(img.at(300, 0)[2], 255);
}

TEST(ImageOpsTest, PadSizesAndModesOnA3x2Image) {
  Image src = Small3x2();
  const uint8_t fill[3] = {1, 2, 3};
  // (left, top, right, bottom) = (2, 1, 1, 0): 6x3 output.
  auto pad = [&](PadMode mode) {
    Image dst(3 + 2 + 1, 2 + 1 + 0);
    Pad(src.view(), 2, 1, 1, 0, mode, fill, dst.view());
    return dst;
  };
  // Source column / row of each output column / row, or -1 for fill.
  auto check = [&](Image& dst, const std::vector<int>& cols, const std::vector<int>& rows, const char* what) {
    ASSERT_EQ(dst.width, static_cast<int>(cols.size()));
    ASSERT_EQ(dst.height, static_cast<int>(rows.size()));
    for (int y = 0; y < dst.height; ++y) {
      for (int x = 0; x < dst.width; ++x) {
        for (int c = 0; c < 3; ++c) {
          const int expected = cols[x] < 0 || rows[y] < 0 ? fill[c] : src.at(cols[x], rows[y])[c];
          ASSERT_EQ(dst.at(x, y)[c], expected) << what << " at " << x << "," << y;
        }
      }
    }
  };
  Image constant = pad(PadMode::kConstant);
  check(constant, {-1, -1, 0, 1, 2, -1}, {-1, 0, 1}, "constant");
  Image edge = pad(PadMode::kEdge);
  check(edge, {0, 0, 0, 1, 2, 2}, {0, 0, 1}, "edge");
  Image reflect = pad(PadMode::kReflect);
  check(reflect, {2, 1, 0, 1, 2, 1}, {1, 0, 1}, "reflect");
  Image symmetric = pad(PadMode::kSymmetric);
  check(symmetric, {1, 0, 0, 1, 2, 2}, {0, 0, 1}, "symmetric");

  // Negative padding crops: (-1, 0, 0, -1) leaves columns 1..2 of row 0.
  Image cropped(2, 1);
  Pad(src.view(), -1, 0, 0, -1, PadMode::kReflect, fill, cropped.view());
  check(cropped, {1, 2}, {0}, "crop");
  // Pads wider than the image repeat the reflection (numpy.pad).
  Image wide(3 + 5 + 5, 2);
  Pad(src.view(), 5, 0, 5, 0, PadMode::kReflect, fill, wide.view());
  check(wide, {1, 0, 1, 2, 1, 0, 1, 2, 1, 0, 1, 2, 1}, {0, 1}, "wide reflect");
}

TEST(ImageOpsTest, QuarterTurnsOnASquareAreTransposes) {
  const Image original = Textured(5, 5);
  ImageOpScratch scratch;
  for (Interpolation filter : {Interpolation::kNearest, Interpolation::kBilinear, Interpolation::kBicubic}) {
    Image ccw = original;
    Rotate(ccw.view(), 90, filter, kBlack, false, 0, 0, scratch);
    Image cw = original;
    Rotate(cw.view(), -90, filter, kBlack, false, 0, 0, scratch);
    Image half = original;
    Rotate(half.view(), 180, filter, kBlack, false, 0, 0, scratch);
    Image src = original;
    for (int y = 0; y < 5; ++y) {
      for (int x = 0; x < 5; ++x) {
        for (int c = 0; c < 3; ++c) {
          // Counter-clockwise: output (x, y) shows input (4 - y, x).
          ASSERT_EQ(ccw.at(x, y)[c], src.at(4 - y, x)[c]);
          ASSERT_EQ(cw.at(x, y)[c], src.at(y, 4 - x)[c]);
          ASSERT_EQ(half.at(x, y)[c], src.at(4 - x, 4 - y)[c]);
        }
      }
    }
    // The general matrix path about the same centre lands on the same pixels.
    Image general = original;
    Rotate(general.view(), 90, filter, kBlack, true, 2.5, 2.5, scratch);
    EXPECT_EQ(general.pixels, ccw.pixels);
  }
}

TEST(ImageOpsTest, IntegerTranslationsShiftAndFill) {
  const Image original = Textured(6, 4);
  const uint8_t fill[3] = {9, 8, 7};
  ImageOpScratch scratch;
  for (Interpolation filter : {Interpolation::kNearest, Interpolation::kBilinear, Interpolation::kBicubic}) {
    Image moved = original;
    Affine(moved.view(), 0, 2, 1, 1.0, 0, 0, filter, fill, false, 0, 0, scratch);
    Image timm = original;
    ApplyTimmOp(AugOp::kTranslateX, -2, filter, fill, timm.view(), scratch);  // samples x - 2
    Image src = original;
    for (int y = 0; y < 4; ++y) {
      for (int x = 0; x < 6; ++x) {
        const bool inside = x >= 2 && y >= 1;
        for (int c = 0; c < 3; ++c) {
          ASSERT_EQ(moved.at(x, y)[c], inside ? src.at(x - 2, y - 1)[c] : fill[c]) << x << "," << y;
          ASSERT_EQ(timm.at(x, y)[c], x >= 2 ? src.at(x - 2, y)[c] : fill[c]) << x << "," << y;
        }
      }
    }
  }
}

TEST(ImageOpsTest, PolicyOpsMatchTheDirectOps) {
  const Image original = Textured(19, 11);
  ImageOpScratch scratch;
  Image via_policy = original, direct = original;
  ApplyAugOp(AugOp::kContrast, -0.4, Interpolation::kNearest, kBlack, via_policy.view(), scratch);
  AdjustContrast(direct.view(), 0.6);
  EXPECT_EQ(via_policy.pixels, direct.pixels);
  via_policy = original, direct = original;
  ApplyAugOp(AugOp::kPosterize, 5.9, Interpolation::kNearest, kBlack, via_policy.view(), scratch);
  Posterize(direct.view(), 5);
  EXPECT_EQ(via_policy.pixels, direct.pixels);
  via_policy = original, direct = original;
  ApplyTimmOp(AugOp::kSharpness, 1.7, Interpolation::kNearest, kBlack, via_policy.view(), scratch);
  AdjustSharpness(direct.view(), 1.7, scratch);
  EXPECT_EQ(via_policy.pixels, direct.pixels);
}

TEST(ImageOpsTest, BlurKeepsAFlatImageFlat) {
  Image img(9, 7);
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>(40 + i % 3 * 90);
  const std::vector<uint8_t> original = img.pixels;
  ImageOpScratch scratch;
  GaussianBlur(img.view(), 5, 3, 1.7, 0.4, scratch);
  EXPECT_EQ(img.pixels, original);
}

TEST(ImageOpsTest, WorksOnStridedViewsAndLeavesRowPaddingAlone) {
  const Image packed = Textured(7, 5);
  const size_t stride = 7 * 3 + 5;
  std::vector<uint8_t> buffer(stride * 5, 0xAB);
  for (int y = 0; y < 5; ++y) std::copy_n(packed.pixels.data() + y * 21, 21, buffer.data() + y * stride);
  RgbView strided{buffer.data(), 7, 5, stride};
  ImageOpScratch scratch;
  Rotate(strided, 30, Interpolation::kBicubic, kBlack, false, 0, 0, scratch);
  AdjustSharpness(strided, 2.0, scratch);
  GaussianBlur(strided, 3, 3, 1.0, 1.0, scratch);
  Equalize(strided);

  Image reference = packed;
  Rotate(reference.view(), 30, Interpolation::kBicubic, kBlack, false, 0, 0, scratch);
  AdjustSharpness(reference.view(), 2.0, scratch);
  GaussianBlur(reference.view(), 3, 3, 1.0, 1.0, scratch);
  Equalize(reference.view());
  for (int y = 0; y < 5; ++y) {
    for (int i = 0; i < 21; ++i) ASSERT_EQ(buffer[y * stride + i], reference.pixels[y * 21 + i]);
    for (size_t i = 21; i < stride; ++i) ASSERT_EQ(buffer[y * stride + i], 0xAB);
  }
}

TEST(ImageOpsTest, ScratchIsReusedOnceGrown) {
  Image img = Textured(64, 48);
  ImageOpScratch scratch;
  Rotate(img.view(), 12, Interpolation::kNearest, kBlack, false, 0, 0, scratch);
  GaussianBlur(img.view(), 7, 7, 2.0, 2.0, scratch);
  const uint8_t* image_data = scratch.image.data();
  const float* float_data = scratch.floats.data();
  const size_t image_size = scratch.image.size(), float_size = scratch.floats.size();
  for (int i = 0; i < 3; ++i) {
    Rotate(img.view(), 12, Interpolation::kNearest, kBlack, false, 0, 0, scratch);
    AdjustSharpness(img.view(), 0.5, scratch);
    GaussianBlur(img.view(), 7, 7, 2.0, 2.0, scratch);
  }
  EXPECT_EQ(scratch.image.data(), image_data);
  EXPECT_EQ(scratch.image.size(), image_size);
  EXPECT_EQ(scratch.floats.data(), float_data);
  EXPECT_EQ(scratch.floats.size(), float_size);
}

TEST(ImageOpsTest, TestingDispatcherValidatesItsArguments) {
  Image img = Small3x2();
  int w = img.width, h = img.height;
  using Args = std::map<std::string, std::vector<double>>;
  EXPECT_EQ(ApplyImageOpForTesting("NoSuchOp", {}, &img.pixels, &w, &h).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ApplyImageOpForTesting("ApplyAugOp:NoSuchOp", Args{{"magnitude", {1}}}, &img.pixels, &w, &h).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ApplyImageOpForTesting("AdjustBrightness", {}, &img.pixels, &w, &h).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ApplyImageOpForTesting("Rotate", Args{{"angle", {10}}, {"interpolation", {1}}, {"fill", {0}}},
                                   &img.pixels, &w, &h)
                .code(),
            absl::StatusCode::kInvalidArgument);  // Lanczos is not a transform filter
  ASSERT_TRUE(ApplyImageOpForTesting("Pad", Args{{"padding", {1, 0, 2, 3}}, {"mode", {1}}, {"fill", {0}}},
                                     &img.pixels, &w, &h)
                  .ok());
  EXPECT_EQ(w, 6);
  EXPECT_EQ(h, 5);
  EXPECT_EQ(img.pixels.size(), 6u * 5u * 3u);
  ASSERT_TRUE(ApplyImageOpForTesting("ApplyTimmOp:Invert", Args{{"arg", {0}}, {"interpolation", {0}}, {"fill", {0}}},
                                     &img.pixels, &w, &h)
                  .ok());
}

// Pillow's rgb2hsv and hsv2rgb (Convert.c) written directly, dividing per pixel: what
// AdjustHue, which takes the quotients from tables built once, must equal level for level.
// (Separate IEEE operations, as Pillow evaluates them: no fused multiply-add.)
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
void ReferenceHue(uint8_t* p, uint8_t shift) {
  const auto clip8 = [](int v) { return static_cast<uint8_t>(v <= 0 ? 0 : v >= 255 ? 255 : v); };
  const int r = p[0], g = p[1], b = p[2];
  const int maxc = std::max(r, std::max(g, b)), minc = std::min(r, std::min(g, b));
  int h = 0, s = 0;
  if (minc != maxc) {
    const float cr = static_cast<float>(maxc - minc);
    const float sf = cr / static_cast<float>(maxc);
    const float rc = static_cast<float>(maxc - r) / cr, gc = static_cast<float>(maxc - g) / cr,
                bc = static_cast<float>(maxc - b) / cr;
    float hf = r == maxc   ? bc - gc
               : g == maxc ? static_cast<float>(2.0 + static_cast<double>(rc) - static_cast<double>(bc))
                           : static_cast<float>(4.0 + static_cast<double>(gc) - static_cast<double>(rc));
    const double turns = static_cast<double>(hf) / 6.0 + 1.0;
    hf = static_cast<float>(turns >= 1.0 ? turns - 1.0 : turns);
    h = clip8(static_cast<int>(static_cast<double>(hf) * 255.0));
    s = clip8(static_cast<int>(static_cast<double>(sf) * 255.0));
  }
  h = static_cast<uint8_t>(h + shift);
  if (s == 0) {
    p[0] = p[1] = p[2] = static_cast<uint8_t>(maxc);
    return;
  }
  const auto round = [](double x) { return static_cast<int>(std::round(x)); };
  const double h6 = static_cast<double>(static_cast<float>(h)) * 6.0 / 255.0;
  const int i = static_cast<int>(h6);
  const float f = static_cast<float>(h6 - static_cast<double>(static_cast<float>(i)));
  const float fs = static_cast<float>(static_cast<double>(static_cast<float>(s)) / 255.0);
  const double fv = static_cast<double>(static_cast<float>(maxc));
  const uint8_t pp = clip8(round(fv * (1.0 - static_cast<double>(fs))));
  const uint8_t q = clip8(round(fv * (1.0 - static_cast<double>(fs * f))));
  const uint8_t t = clip8(round(fv * (1.0 - static_cast<double>(fs) * (1.0 - static_cast<double>(f)))));
  const uint8_t v = static_cast<uint8_t>(maxc);
  const uint8_t out[6][3] = {{v, t, pp}, {q, v, pp}, {pp, v, t}, {pp, q, v}, {t, pp, v}, {v, pp, q}};
  std::copy(out[i % 6], out[i % 6] + 3, p);
}

TEST(ImageOpsTest, AdjustHueEqualsPillowsConversionsForEveryColour) {
  // Every 24-bit colour once, then a stretch where colours repeat (the last result reused).
  Image img(4096, 4096 + 8);
  for (uint32_t k = 0; k < (1u << 24); ++k) {
    uint8_t* p = img.pixels.data() + static_cast<size_t>(k) * 3;
    p[0] = static_cast<uint8_t>(k >> 16), p[1] = static_cast<uint8_t>(k >> 8), p[2] = static_cast<uint8_t>(k);
  }
  for (int k = 0; k < 4096 * 8; ++k) {
    uint8_t* p = img.at(k % 4096, 4096 + k / 4096);
    p[0] = static_cast<uint8_t>(k / 7 * 37), p[1] = static_cast<uint8_t>(k / 5 * 11), p[2] = static_cast<uint8_t>(k / 3);
  }
  for (double factor : {0.37, -0.5, 0.02}) {
    Image got = img, want = img;
    AdjustHue(got.view(), factor);
    const uint8_t shift = static_cast<uint8_t>(static_cast<int32_t>(factor * 255));
    for (size_t i = 0; i < want.pixels.size(); i += 3) ReferenceHue(want.pixels.data() + i, shift);
    ASSERT_TRUE(got.pixels == want.pixels) << "hue factor " << factor;
  }
  // Rows whose width is not a multiple of the SIMD step (4 pixels): the last ones the scalar way.
  for (int width : {1, 3, 5, 7, 4099}) {
    Image got(width, 41), want(width, 41);
    for (size_t i = 0; i < got.pixels.size(); ++i) got.pixels[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
    want.pixels = got.pixels;
    AdjustHue(got.view(), 0.21);
    const uint8_t shift = static_cast<uint8_t>(static_cast<int32_t>(0.21 * 255));
    for (size_t i = 0; i < want.pixels.size(); i += 3) ReferenceHue(want.pixels.data() + i, shift);
    ASSERT_TRUE(got.pixels == want.pixels) << "width " << width;
  }
}

}  // namespace
}  // namespace ringloader
