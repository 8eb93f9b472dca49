// The recipe steps beyond geometry: stage rules, fused padding/cropping, the image stage and
// RandomErasing, through TransformPipeline and the render stage. Pixel parity of each
// operation against torchvision/Pillow is checked from Python (tests/python/test_recipes.py,
// test_image_ops.py); these tests pin the C++ contract.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "ringloader/transforms.h"
#include "transform/augment.h"
#include "transform/image_transform.h"
#include "transform/render.h"

namespace ringloader {
namespace {

namespace T = ringloader::transforms;
using Kind = TransformStep::Kind;

TransformStep AugOpStep(AugOp op, double magnitude = 0, double p = 1.0) {
  AugOpParams s;
  s.aug_op = op;
  s.magnitude = magnitude;
  s.p = p;
  return s;
}

TransformStep PadStep(int l, int t, int r, int b, PadMode mode, float fill = 0) {
  PadParams s;
  s.pad[0] = l, s.pad[1] = t, s.pad[2] = r, s.pad[3] = b;
  s.pad_mode = mode;
  s.fill[0] = s.fill[1] = s.fill[2] = fill;
  return s;
}

std::string CreateError(std::vector<TransformStep> steps, DType dtype = DType::kFloat32) {
  auto p = TransformPipeline::Create(std::move(steps), dtype, Layout::kCHW);
  return p.ok() ? "" : std::string(p.status().message());
}

/// A packed RGB test image whose pixels encode their position.
std::vector<uint8_t> Gradient(int w, int h) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &px[(static_cast<size_t>(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>(x * 7 + 3), p[1] = static_cast<uint8_t>(y * 5 + 1);
      p[2] = static_cast<uint8_t>((x + y) * 3);
    }
  }
  return px;
}

/// Renders `pixels` (w x h RGB) through `p` with the generator of `seed`; uint8 HWC output.
std::vector<uint8_t> Render(const TransformPipeline& p, const std::vector<uint8_t>& pixels, int w,
                            int h, uint64_t seed, absl::Status* status = nullptr) {
  SampleRng rng(seed);
  const SampleGeometry g = p.Plan(w, h, rng);
  std::vector<uint8_t> out(p.OutputBytes(g));
  RenderState state;
  absl::Status s = RenderSample(pixels.data(), static_cast<size_t>(w) * 3, 3, w, h, p, g, rng,
                                state, out.data());
  if (status) *status = s;
  return out;
}

TEST(RecipeStages, FlipsAndCenterCropAfterAnImageStepMoveItsPixels) {
  // The CIFAR recipe: reflect padding runs on the 8-bit image, the flips after it mirror that
  // image and CenterCrop crops it (zero padding where larger), drawing in step order.
  const int w = 12, h = 10;
  const std::vector<uint8_t> px = Gradient(w, h);
  TransformStep reflect = T::RandomCrop(h, w, 3);
  reflect.get<RandomCropParams>().pad_mode = PadMode::kReflect;
  TransformStep pad_only = PadStep(3, 3, 3, 3, PadMode::kReflect);
  const TransformPipeline plain = *TransformPipeline::Create(
      {pad_only, T::CenterCrop(h, w)}, DType::kUint8, Layout::kHWC);
  const std::vector<uint8_t> base = Render(plain, px, w, h, 1);
  // Reflect padding then the centre crop gives the image back.
  ASSERT_EQ(base, px);
  const TransformPipeline flipped = *TransformPipeline::Create(
      {pad_only, T::RandomHorizontalFlip(1.0), T::RandomVerticalFlip(1.0), T::CenterCrop(h + 2, w - 2)},
      DType::kUint8, Layout::kHWC);
  const std::vector<uint8_t> out = Render(flipped, px, w, h, 1);
  ASSERT_EQ(out.size(), static_cast<size_t>(h + 2) * (w - 2) * 3);
  // Padded 18x16, mirrored both ways, centre crop (12 x 10): top = round(4 / 2) = 2, left 4.
  for (int y = 0; y < h + 2; ++y) {
    for (int x = 0; x < w - 2; ++x) {
      const int py = 15 - (y + 2), px_ = 17 - (x + 4);  // position in the padded image
      const auto reflect_index = [](int i, int n) { return i < 0 ? -i : (i >= n ? 2 * n - 2 - i : i); };
      const int sy = reflect_index(py - 3, h), sx = reflect_index(px_ - 3, w);
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(out[(static_cast<size_t>(y) * (w - 2) + x) * 3 + c],
                  px[(static_cast<size_t>(sy) * w + sx) * 3 + c])
            << y << " " << x << " " << c;
      }
    }
  }
  // A CenterCrop larger than the image pads with zeros; p = 0 flips draw but change nothing.
  const TransformPipeline larger = *TransformPipeline::Create(
      {reflect, T::RandomHorizontalFlip(0.0), T::CenterCrop(h + 3, w + 1)}, DType::kUint8,
      Layout::kHWC);
  const std::vector<uint8_t> big = Render(larger, px, w, h, 5);
  ASSERT_EQ(big.size(), static_cast<size_t>(h + 3) * (w + 1) * 3);
  for (int x = 0; x < w + 1; ++x) EXPECT_EQ(big[static_cast<size_t>(x) * 3], 0);  // top row
}

TEST(RecipeStages, OrderRulesNameTheStep) {
  EXPECT_NE(CreateError({T::ColorJitter(0.4), T::Resize(8)})
                .find("step 1 (Resize): a resize after step 0 (ColorJitter runs on the 8-bit image)"),
            std::string::npos);
  TransformStep reflect = T::RandomCrop(8, 8, 2);
  reflect.get<RandomCropParams>().pad_mode = PadMode::kReflect;
  EXPECT_NE(CreateError({reflect, T::RandomHorizontalFlip(), T::RandomResizedCrop(8)})
                .find("RandomCrop with padding_mode='reflect' runs on the 8-bit image"),
            std::string::npos);
  EXPECT_NE(CreateError({T::CenterCrop(8), T::ToTensor(), T::ColorJitter(0.4)}).find("before ToTensor"),
            std::string::npos);
  EXPECT_NE(CreateError({T::CenterCrop(8), T::RandomErasing()}).find("put ToTensor first"),
            std::string::npos);
  TransformStep hue = T::ColorJitter(0, 0, 0, 0.2);
  hue.get<ColorJitterParams>().hue->hi = 0.7;
  EXPECT_NE(CreateError({T::CenterCrop(8), hue}).find("hue range"), std::string::npos);
  GaussianBlurParams blur;
  blur.size_w = 4, blur.size_h = 3;
  blur.sigma = {1.0, 1.0};
  EXPECT_NE(CreateError({T::CenterCrop(8), blur}).find("step 1 (GaussianBlur): kernel size must be odd"),
            std::string::npos);
}

TEST(RecipeStages, StagesAndSizes) {
  auto p = TransformPipeline::Create({T::Resize(40), T::RandomCrop(32, 0, 4), T::RandomVerticalFlip(),
                                      T::TrivialAugmentWide(), PadStep(1, 2, 3, 4, PadMode::kEdge),
                                      T::ToTensor(), T::RandomErasing()},
                                     DType::kFloat32, Layout::kCHW);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->image_begin(), 3u);  // RandomCrop with zero fill and the flip are fused
  EXPECT_EQ(p->image_end(), 5u);
  EXPECT_TRUE(p->has_erasing());
  EXPECT_EQ(p->out_h(), 32 + 2 + 4);
  EXPECT_EQ(p->out_w(), 32 + 1 + 3);
}

TEST(RecipeStages, VariableSizeOnlyWhenAllowed) {
  EXPECT_NE(CreateError({T::ToTensor()}).find("depends on the input image"), std::string::npos);
  auto p = TransformPipeline::Create({T::Resize(20), T::ToTensor()}, DType::kFloat32, Layout::kCHW,
                                     /*allow_variable_size=*/true);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->fixed_size());
  SampleRng rng(1);
  int h = 0, w = 0;
  p->OutputSize(p->Plan(60, 30, rng), &h, &w);
  EXPECT_EQ(h, 20);
  EXPECT_EQ(w, 40);
}

TEST(RecipePlan, VerticalFlipMirrorsRows) {
  auto p = TransformPipeline::Create({T::RandomVerticalFlip(1.0)}, DType::kUint8, Layout::kHWC, true);
  ASSERT_TRUE(p.ok());
  const std::vector<uint8_t> img = Gradient(5, 4);
  const std::vector<uint8_t> out = Render(*p, img, 5, 4, 0);
  for (int y = 0; y < 4; ++y) {
    for (size_t i = 0; i < 15; ++i) EXPECT_EQ(out[y * 15 + i], img[(3 - y) * 15 + i]);
  }
}

TEST(RecipePlan, RandomCropWithPaddingCoversEveryOffset) {
  auto p = TransformPipeline::Create({T::RandomCrop(8, 0, 2)}, DType::kUint8, Layout::kHWC);
  ASSERT_TRUE(p.ok());
  const std::vector<uint8_t> img = Gradient(8, 8);
  std::set<std::pair<int, int>> offsets;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const std::vector<uint8_t> out = Render(*p, img, 8, 8, seed);
    // Find the offset: the output is the zero-padded image shifted by (dy, dx) in [-2, 2].
    bool found = false;
    for (int dy = -2; dy <= 2 && !found; ++dy) {
      for (int dx = -2; dx <= 2 && !found; ++dx) {
        bool same = true;
        for (int y = 0; y < 8 && same; ++y) {
          for (int x = 0; x < 8 && same; ++x) {
            const int sy = y + dy, sx = x + dx;
            for (int c = 0; c < 3; ++c) {
              const uint8_t want = (sy < 0 || sy >= 8 || sx < 0 || sx >= 8) ? 0 : img[(sy * 8 + sx) * 3 + c];
              same = same && out[(y * 8 + x) * 3 + c] == want;
            }
          }
        }
        if (same) offsets.insert({dy, dx}), found = true;
      }
    }
    ASSERT_TRUE(found) << "seed " << seed;
  }
  EXPECT_EQ(offsets.size(), 25u);  // 5 x 5 offsets, each equally likely
}

TEST(RecipePlan, RandomCropLargerThanImageIsASampleError) {
  auto p = TransformPipeline::Create({T::RandomCrop(16)}, DType::kUint8, Layout::kHWC);
  ASSERT_TRUE(p.ok());
  absl::Status status;
  Render(*p, Gradient(8, 8), 8, 8, 0, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  auto padded = TransformPipeline::Create({T::RandomCrop(16, 0, 0, /*pad_if_needed=*/true)},
                                          DType::kUint8, Layout::kHWC);
  ASSERT_TRUE(padded.ok());
  Render(*padded, Gradient(8, 8), 8, 8, 0, &status);
  EXPECT_TRUE(status.ok()) << status;
}

TEST(RecipeRender, ImageStageRunsBeforeTheWriteOut) {
  auto p = TransformPipeline::Create({T::CenterCrop(6), AugOpStep(AugOp::kInvert), T::ToTensor()},
                                     DType::kFloat32, Layout::kHWC);
  ASSERT_TRUE(p.ok());
  const std::vector<uint8_t> img = Gradient(6, 6);
  SampleRng rng(3);
  const SampleGeometry g = p->Plan(6, 6, rng);
  std::vector<float> out(6 * 6 * 3);
  RenderState state;
  ASSERT_TRUE(RenderSample(img.data(), 18, 3, 6, 6, *p, g, rng, state, out.data()).ok());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_FLOAT_EQ(out[i], (255 - img[i]) / 255.0f);
}

TEST(RecipeRender, PadModesChangeTheSize) {
  auto p = TransformPipeline::Create({T::CenterCrop(4), PadStep(1, 0, 2, 1, PadMode::kEdge, 0),
                                      PadStep(1, 1, 1, 1, PadMode::kConstant, 9)},
                                     DType::kUint8, Layout::kHWC);
  ASSERT_TRUE(p.ok());
  const std::vector<uint8_t> img = Gradient(4, 4);
  const std::vector<uint8_t> out = Render(*p, img, 4, 4, 0);
  const int w = 4 + 3 + 2;
  ASSERT_EQ(out.size(), static_cast<size_t>(w) * (4 + 1 + 2) * 3);
  EXPECT_EQ(out[0], 9);                                   // constant border
  EXPECT_EQ(out[(1 * w + 1) * 3 + 0], img[0]);            // edge copy of the first pixel
  EXPECT_EQ(out[(1 * w + 2) * 3 + 0], img[0]);            // the first pixel itself
}

TEST(RecipeRender, RandomErasingErasesOneBoxWithTheValue) {
  TransformStep erase = T::RandomErasing(1.0);
  float* value = erase.get<RandomErasingParams>().fill;
  value[0] = value[1] = value[2] = -7.f;
  auto p = TransformPipeline::Create({T::CenterCrop(32), T::ToTensor(), erase}, DType::kFloat32,
                                     Layout::kCHW);
  ASSERT_TRUE(p.ok());
  const std::vector<uint8_t> img = Gradient(32, 32);
  std::set<int> areas;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    SampleRng rng(seed);
    const SampleGeometry g = p->Plan(32, 32, rng);
    std::vector<float> out(3 * 32 * 32);
    RenderState state;
    ASSERT_TRUE(RenderSample(img.data(), 96, 3, 32, 32, *p, g, rng, state, out.data()).ok());
    int erased = 0, y0 = 32, y1 = -1, x0 = 32, x1 = -1;
    for (int y = 0; y < 32; ++y) {
      for (int x = 0; x < 32; ++x) {
        if (out[y * 32 + x] != -7.f) continue;
        ++erased;
        y0 = std::min(y0, y), y1 = std::max(y1, y), x0 = std::min(x0, x), x1 = std::max(x1, x);
      }
    }
    if (erased == 0) continue;  // 10 attempts may all fail (rare)
    EXPECT_EQ(erased, (y1 - y0 + 1) * (x1 - x0 + 1)) << "one solid box";
    EXPECT_GE(erased, std::floor(0.02 * 1024 * 0.5));
    EXPECT_LE(erased, std::ceil(0.33 * 1024 * 1.5));
    areas.insert(erased);
  }
  EXPECT_GT(areas.size(), 10u);  // scale and ratio are drawn per sample
}

TEST(RecipeRender, SameSeedSameOutputAcrossStates) {
  auto p = TransformPipeline::Create({T::RandomResizedCrop(24), T::RandAugment(), T::ColorJitter(0.4, 0.4, 0.4, 0.1),
                                      T::ToTensor(), T::RandomErasing(0.5, true)},
                                     DType::kFloat32, Layout::kCHW);
  ASSERT_TRUE(p.ok());
  const std::vector<uint8_t> img = Gradient(40, 30);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    EXPECT_EQ(Render(*p, img, 40, 30, seed), Render(*p, img, 40, 30, seed));
  }
  EXPECT_NE(Render(*p, img, 40, 30, 1), Render(*p, img, 40, 30, 2));
}

TEST(RecipeTables, LinspaceMatchesTorchFloat32) {
  // torch.linspace(...)[i].item() values.
  EXPECT_EQ(LinspaceF32(0.0, 0.3, 31, 9), 0.09000000357627869);
  EXPECT_EQ(LinspaceF32(255.0, 0.0, 31, 20), 85.0);
  EXPECT_EQ(LinspaceF32(0.0, 150.0 / 331.0 * 224, 31, 17), 57.52265930175781);
  EXPECT_EQ(LinspaceF32(0.0, 0.99, 31, 30), 0.9900000095367432);
  // Bins where torch's fused multiply-add differs from separate float operations.
  EXPECT_EQ(LinspaceF32(0.0, 32.0, 31, 15), 15.999999046325684);
  EXPECT_EQ(LinspaceF32(1.0, 0.0, 10, 3), 0.6666666865348816);
  EXPECT_EQ(LinspaceF32(0.0, 0.99, 31, 19), 0.6270000338554382);
  EXPECT_EQ(LinspaceF32(0.0, 0.9, 31, 20), 0.5999999642372131);
}

TEST(RecipeTables, TimmOpNames) {
  EXPECT_EQ(TimmOpFromName("AutoContrast"), 0);
  EXPECT_EQ(TimmOpFromName("TranslateYRel"), static_cast<int>(TimmOp::kTranslateYRel));
  EXPECT_EQ(TimmOpFromName("Cutout"), -1);
}

// AugMix's draws follow torchvision's distributions: Beta(alpha, alpha) for the original's
// weight (mean 1/2 at alpha 1), Dirichlet(alpha) chain weights (mean 1/width) summing to 1,
// depths uniform in 1..3 when chain_depth <= 0, ops uniform over the 13 (9 without all_ops),
// bins below severity, a sign only on the signed ops; the same seed gives the same draws.
TEST(AugMixDraws, FollowTorchvisionsDistributions) {
  AugMixParams s;
  s.severity = 3;
  constexpr int kRuns = 4000;
  double m0_sum = 0, m0_sq = 0, w_sum = 0;
  int depth_count[4] = {0, 0, 0, 0};
  std::vector<int> op_count(13, 0);
  for (int run = 0; run < kRuns; ++run) {
    SampleRng rng(1000 + run);
    AugMixDraws d;
    DrawAugMix(s, rng, &d);
    ASSERT_EQ(d.weights.size(), 3u);
    ASSERT_EQ(d.chains.size(), 3u);
    EXPECT_NEAR(d.m0 + d.m1, 1.0, 1e-6);
    EXPECT_NEAR(d.weights[0] + d.weights[1] + d.weights[2], 1.0, 1e-6);
    m0_sum += d.m0;
    m0_sq += d.m0 * d.m0;
    w_sum += d.weights[0];
    for (const auto& chain : d.chains) {
      ASSERT_GE(chain.size(), 1u);
      ASSERT_LE(chain.size(), 3u);
      ++depth_count[chain.size()];
      for (const AugMixDraws::Op& op : chain) {
        ASSERT_GE(op.index, 0);
        ASSERT_LT(op.index, 13);
        ++op_count[op.index];
        EXPECT_LT(op.bin, 3);
        if (op.index == 5 || op.index == 6 || op.index == 7 || op.index == 8) EXPECT_FALSE(op.negate);
      }
    }
    SampleRng again(1000 + run);
    AugMixDraws e;
    DrawAugMix(s, again, &e);
    EXPECT_EQ(e.m0, d.m0);
    EXPECT_EQ(e.weights, d.weights);
  }
  EXPECT_NEAR(m0_sum / kRuns, 0.5, 0.02);                         // Beta(1, 1) mean
  EXPECT_NEAR(m0_sq / kRuns - 0.25, 1.0 / 12.0, 0.01);           // and variance (uniform)
  EXPECT_NEAR(w_sum / kRuns, 1.0 / 3.0, 0.02);                   // Dirichlet(1, 1, 1) mean
  for (int depth = 1; depth <= 3; ++depth) EXPECT_NEAR(depth_count[depth], kRuns, kRuns * 0.1);
  const double per_op = std::accumulate(op_count.begin(), op_count.end(), 0.0) / 13;
  for (int count : op_count) EXPECT_NEAR(count, per_op, per_op * 0.15);

  s.all_ops = false;
  s.depth = 2;
  s.alpha = 0.3;  // Gamma draws below 1 take the boost path
  for (int run = 0; run < 200; ++run) {
    SampleRng rng(run);
    AugMixDraws d;
    DrawAugMix(s, rng, &d);
    EXPECT_TRUE(std::isfinite(d.m0) && d.m0 >= 0 && d.m0 <= 1);
    for (const auto& chain : d.chains) {
      ASSERT_EQ(chain.size(), 2u);
      for (const AugMixDraws::Op& op : chain) EXPECT_LT(op.index, 9);
    }
  }
}

}  // namespace
}  // namespace ringloader
