#include "transform/photometric.h"

#include <cstdint>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "transform/augment.h"

namespace ringloader {
namespace {


std::vector<uint8_t> Texture(int w, int h) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((i * 37 + (i / 7) * 11) & 255);
  return px;
}

// Brightness, contrast, saturation, hue: PhotometricDraws' order.
constexpr Range kRanges[4] = {{0.875, 1.125}, {0.5, 1.5}, {0.5, 1.5}, {-0.05, 0.05}};

ColorJitterParams Distort(double p, int mode) {
  ColorJitterParams s;
  s.photometric = mode;
  s.p = p;
  s.brightness = kRanges[0];
  s.contrast = kRanges[1];
  s.saturation = kRanges[2];
  s.hue = kRanges[3];
  return s;
}

TEST(PhotometricTest, PermutationTakesInputChannelsInItsOrder) {
  std::vector<uint8_t> px = Texture(5, 4);
  const std::vector<uint8_t> before = px;
  PhotometricDraws d;
  d.permutation[0] = 2, d.permutation[1] = 0, d.permutation[2] = 1;  // image[:, [2, 0, 1]]
  ApplyPhotometric(d, RgbView{px.data(), 5, 4, 15});
  for (size_t i = 0; i < px.size(); i += 3) {
    EXPECT_EQ(px[i], before[i + 2]);
    EXPECT_EQ(px[i + 1], before[i]);
    EXPECT_EQ(px[i + 2], before[i + 1]);
  }
}

TEST(PhotometricTest, DrawsFollowTheProbabilityAndCoverEveryPermutation) {
  const ColorJitterParams s = Distort(0.5, 1);
  int applied[4] = {0, 0, 0, 0}, before = 0;
  std::set<std::vector<int>> perms;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    SampleRng rng(static_cast<uint64_t>(i) * 7919u + 3u);
    PhotometricDraws d;
    DrawPhotometric(s, rng, &d);
    for (int k = 0; k < 4; ++k) {
      applied[k] += d.apply[k];
      if (d.apply[k]) EXPECT_TRUE(d.factor[k] >= kRanges[k].lo && d.factor[k] < kRanges[k].hi);
    }
    before += d.contrast_before;
    perms.insert({d.permutation[0], d.permutation[1], d.permutation[2]});
  }
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(applied[k], n / 2, n / 20) << k;
  EXPECT_NEAR(before, n / 2, n / 20);
  EXPECT_EQ(perms.size(), 6u);  // the identity (not drawn, or drawn) and the five others

  SampleRng rng(5);
  PhotometricDraws none;
  DrawPhotometric(Distort(0.0, 1), rng, &none);
  for (int k = 0; k < 4; ++k) EXPECT_FALSE(none.apply[k]);
  EXPECT_EQ(none.permutation[0] * 100 + none.permutation[1] * 10 + none.permutation[2], 12);
}

TEST(PhotometricTest, BeforeThePaddingOnlyTheShownPixelsAreDistorted) {
  // A 9x7 source shown at (3, 2) in a 16x12 output padded with a fill level: the step distorts
  // the source as v2 does before RandomZoomOut pads it (contrast from the source's own mean),
  // and leaves the fill alone.
  const int sw = 9, sh = 7, ow = 16, oh = 12, left = 3, top = 2;
  const std::vector<uint8_t> source = Texture(sw, sh);
  for (uint64_t seed = 0; seed < 40; ++seed) {
    std::vector<uint8_t> out(static_cast<size_t>(ow) * oh * 3, 117);
    for (int y = 0; y < sh; ++y) {
      std::copy(source.begin() + y * sw * 3, source.begin() + (y + 1) * sw * 3,
                out.begin() + ((y + top) * ow + left) * 3);
    }
    AugmentScratch scratch;
    scratch.shown[0] = left, scratch.shown[1] = top;
    scratch.shown[2] = left + sw, scratch.shown[3] = top + sh;
    RgbView img{out.data(), ow, oh, static_cast<size_t>(ow) * 3};
    SampleRng rng(seed);
    ASSERT_TRUE(ApplyColorJitterStep(Distort(0.5, 2), rng, scratch, &img).ok());

    std::vector<uint8_t> want = source;
    SampleRng same(seed);
    PhotometricDraws d;
    DrawPhotometric(Distort(0.5, 2), same, &d);
    ApplyPhotometric(d, RgbView{want.data(), sw, sh, static_cast<size_t>(sw) * 3});
    for (int y = 0; y < oh; ++y) {
      for (int x = 0; x < ow; ++x) {
        const bool inside = x >= left && x < left + sw && y >= top && y < top + sh;
        for (int c = 0; c < 3; ++c) {
          const uint8_t got = out[(y * ow + x) * 3 + c];
          const uint8_t expected = inside ? want[((y - top) * sw + x - left) * 3 + c] : 117;
          ASSERT_EQ(got, expected) << "seed " << seed << " at " << x << "," << y;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ringloader
