#include "transform/image_transform.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <array>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "testing/jpeg_fixtures.h"
#include "ringloader/transforms.h"
#include "transform/augment.h"
#include "transform/random.h"
#include "transform/render.h"
#include "transform/resample.h"
#include "transform/tensor_resize.h"

namespace ringloader {
namespace {

using Kind = TransformStep::Kind;

TransformStep Resize(int size, int max_size = 0) {
  ResizeParams s;
  s.size_h = size;
  s.max_size = max_size;
  return s;
}
TransformStep ResizeHW(int h, int w) {
  ResizeParams s;
  s.size_h = h;
  s.size_w = w;
  return s;
}
TransformStep CenterCrop(int h, int w) {
  CenterCropParams s;
  s.size_h = h;
  s.size_w = w;
  return s;
}
TransformStep Rrc(int size, double scale_min = 0.08, double scale_max = 1.0) {
  RandomResizedCropParams s;
  s.size_h = size;
  s.size_w = size;
  s.scale_min = scale_min;
  s.scale_max = scale_max;
  return s;
}
TransformStep Flip(double p) {
  HorizontalFlipParams s;
  s.p = p;
  return s;
}
TransformStep ToTensor() { return ToTensorParams{}; }
TransformStep Normalize(const float mean[3], const float std[3]) {
  NormalizeParams s;
  for (int c = 0; c < 3; ++c) {
    s.mean[c] = mean[c];
    s.std[c] = std[c];
  }
  return s;
}

TransformStep Apply(double p, int steps) {
  RandomApplyParams s;
  s.p = p;
  s.apply_steps = steps;
  return s;
}

constexpr float kMean[3] = {0.485f, 0.456f, 0.406f};
constexpr float kStd[3] = {0.229f, 0.224f, 0.225f};

TransformPipeline MustCreate(std::vector<TransformStep> steps, DType dtype = DType::kUint8,
                             Layout layout = Layout::kHWC) {
  auto p = TransformPipeline::Create(std::move(steps), dtype, layout);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

absl::StatusCode CreateCode(std::vector<TransformStep> steps, DType dtype = DType::kFloat32) {
  return TransformPipeline::Create(std::move(steps), dtype, Layout::kCHW).status().code();
}

// ---------------------------------------------------------------------------------------------
// Create: validation and precomputed output mapping.

TEST(TransformPipelineCreate, RejectsInvalidChains) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(CreateCode({}), kInvalid);
  EXPECT_EQ(CreateCode({Resize(0), CenterCrop(4, 4)}), kInvalid);
  EXPECT_EQ(CreateCode({CenterCrop(-1, 4)}), kInvalid);
  EXPECT_EQ(CreateCode({Resize(256, 200), CenterCrop(224, 224)}), kInvalid);  // max_size <= size
  TransformStep hw_with_max = ResizeHW(10, 10);
  hw_with_max.get<ResizeParams>().max_size = 20;
  EXPECT_EQ(CreateCode({hw_with_max}), kInvalid);
  EXPECT_EQ(CreateCode({Rrc(224, 0.5, 0.2)}), kInvalid);  // scale range reversed
  EXPECT_EQ(CreateCode({Rrc(224, 0.0, 1.0)}), kInvalid);  // scale not positive
  TransformStep bad_ratio = Rrc(224);
  bad_ratio.get<RandomResizedCropParams>().ratio_min = -1;
  EXPECT_EQ(CreateCode({bad_ratio}), kInvalid);
  bad_ratio.get<RandomResizedCropParams>().ratio_min = 2.0;
  bad_ratio.get<RandomResizedCropParams>().ratio_max = 1.0;
  EXPECT_EQ(CreateCode({bad_ratio}), kInvalid);
  EXPECT_EQ(CreateCode({CenterCrop(8, 8), Flip(1.5)}), kInvalid);
  EXPECT_EQ(CreateCode({CenterCrop(8, 8), Flip(-0.1)}), kInvalid);
  EXPECT_EQ(CreateCode({CenterCrop(8, 8), Normalize(kMean, kStd)}), kInvalid);  // no ToTensor
  EXPECT_EQ(CreateCode({CenterCrop(8, 8), ToTensor(), ToTensor()}), kInvalid);
  EXPECT_EQ(CreateCode({ToTensor(), CenterCrop(8, 8)}), kInvalid);  // geometry after ToTensor
  const float zero_std[3] = {0.2f, 0.f, 0.2f};
  EXPECT_EQ(CreateCode({CenterCrop(8, 8), ToTensor(), Normalize(kMean, zero_std)}), kInvalid);
  EXPECT_EQ(CreateCode({CenterCrop(8, 8), ToTensor()}, DType::kUint8), kInvalid);
}

TEST(StepKinds, OneRowPerKindInKindOrderWithDistinctKeys) {
  const std::vector<StepKindInfo>& kinds = StepKinds();
  ASSERT_EQ(kinds.size(), static_cast<size_t>(Kind::kAugMix) + 1);
  for (size_t i = 0; i < kinds.size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(kinds[i].kind), i) << kinds[i].key;
    EXPECT_EQ(&KindInfo(kinds[i].kind), &kinds[i]);
    EXPECT_EQ(KindFromKey(kinds[i].key), &kinds[i]) << "duplicate key " << kinds[i].key;
  }
  EXPECT_EQ(KindFromKey("Resize"), nullptr);
  EXPECT_EQ(KindFromKey(""), nullptr);
  // Parameters are whole words of the kind's list.
  EXPECT_TRUE(KindInfo(Kind::kResize).Takes("size_h"));
  EXPECT_TRUE(KindInfo(Kind::kResize).Takes("interpolation"));
  EXPECT_FALSE(KindInfo(Kind::kResize).Takes("size"));
  EXPECT_FALSE(KindInfo(Kind::kResize).Takes(""));
  EXPECT_FALSE(KindInfo(Kind::kCenterCrop).Takes("p"));
  EXPECT_FALSE(KindInfo(Kind::kToTensor).Takes("kind"));
}

// A step's parameters held as strings, for the rows' parse functions; records every key asked.
class FakeParams final : public StepParamReader {
 public:
  std::map<std::string, std::vector<double>> numbers;
  std::map<std::string, std::vector<std::string>> names;
  std::set<std::string> asked;

  bool Int(const char* key, int* out) override { return One(key, out); }
  bool Double(const char* key, double* out) override { return One(key, out); }
  bool Bool(const char* key, bool* out) override { return One(key, out); }
  bool String(const char* key, std::string* out) override {
    asked.insert(key);
    auto it = names.find(key);
    if (it == names.end()) return false;
    *out = it->second.at(0);
    return true;
  }
  bool Pair(const char* key, double out[2]) override {
    asked.insert(key);
    auto it = numbers.find(key);
    if (it == numbers.end()) return false;
    out[0] = it->second.at(0);
    out[1] = it->second.at(1);
    return true;
  }
  bool OptionalPair(const char* key, double out[2]) override { return Pair(key, out); }
  bool Floats(const char* key, std::vector<float>* out) override { return Many(key, out); }
  bool Ints(const char* key, std::vector<int>* out) override { return Many(key, out); }
  bool Strings(const char* key, std::vector<std::string>* out) override {
    asked.insert(key);
    auto it = names.find(key);
    if (it == names.end()) return false;
    *out = it->second;
    return true;
  }
  bool Pairs(const char* key, std::vector<std::optional<std::array<double, 2>>>* out) override {
    asked.insert(key);
    auto it = numbers.find(key);
    if (it == numbers.end()) return false;
    out->clear();
    for (size_t i = 0; i + 1 < it->second.size(); i += 2) {
      if (std::isnan(it->second[i])) {
        out->emplace_back();  // NaN stands for None
      } else {
        out->push_back(std::array<double, 2>{it->second[i], it->second[i + 1]});
      }
    }
    return true;
  }

 private:
  template <typename T>
  bool One(const char* key, T* out) {
    asked.insert(key);
    auto it = numbers.find(key);
    if (it == numbers.end()) return false;
    *out = static_cast<T>(it->second.at(0));
    return true;
  }
  template <typename T>
  bool Many(const char* key, std::vector<T>* out) {
    asked.insert(key);
    auto it = numbers.find(key);
    if (it == numbers.end()) return false;
    out->assign(it->second.begin(), it->second.end());
    return true;
  }
};

// The binding refuses a key outside a row's `params`, and a listed key its parse never reads:
// the two must name the same keys.
TEST(StepKinds, ParseReadsExactlyTheListedParameters) {
  for (const StepKindInfo& info : StepKinds()) {
    ASSERT_NE(info.parse, nullptr) << info.key;
    FakeParams params;
    TransformStep step(info.kind);
    ASSERT_TRUE(info.parse(params, &step).ok()) << info.key;
    std::set<std::string> listed;
    for (std::string_view key : info.params) listed.insert(std::string(key));
    EXPECT_EQ(params.asked, listed) << info.key;
  }
}

// Create lets every kind but the resizes and the output steps reach the image stage (flips and
// CenterCrop do after an image step), so each of those rows needs its image-stage function;
// RandomApply is run by ApplyImageSteps itself (it skips the steps it guards).
TEST(StepKinds, KindsThatCanRunOnTheImageHaveAnImageFunction) {
  for (const StepKindInfo& info : StepKinds()) {
    const bool reaches_image = !info.resizes && info.stage != StepStage::kOutput &&
                               info.kind != Kind::kRandomApply;
    EXPECT_EQ(info.apply_image != nullptr, reaches_image) << info.key;
  }
}

TEST(StepKinds, ParseFillsTheFieldsAndDescribeShowsThem) {
  const StepKindInfo& resize = KindInfo(Kind::kResize);
  FakeParams params;
  params.numbers = {{"size_h", {256}}, {"max_size", {300}}};
  params.names = {{"interpolation", {"bicubic"}}};
  TransformStep s(Kind::kResize);
  ASSERT_TRUE(resize.parse(params, &s).ok());
  EXPECT_EQ(s.get<ResizeParams>().size_h, 256);
  EXPECT_EQ(s.get<ResizeParams>().size_w, 0);
  EXPECT_EQ(s.get<ResizeParams>().max_size, 300);
  EXPECT_EQ(s.get<ResizeParams>().interpolation, Interpolation::kBicubic);
  EXPECT_EQ(resize.describe(s), "Resize(256, max_size=300, bicubic)");

  FakeParams jitter;
  const double none = std::nan("");
  jitter.numbers = {{"ranges", {0.6, 1.4, none, none, 0.9, 1.1}}};
  TransformStep j(Kind::kColorJitter);
  ASSERT_TRUE(KindInfo(Kind::kColorJitter).parse(jitter, &j).ok());
  EXPECT_TRUE(j.get<ColorJitterParams>().brightness.has_value());
  EXPECT_FALSE(j.get<ColorJitterParams>().contrast.has_value());
  EXPECT_TRUE(j.get<ColorJitterParams>().saturation.has_value());
  EXPECT_EQ(j.get<ColorJitterParams>().saturation->hi, 1.1);
  EXPECT_EQ(KindInfo(Kind::kColorJitter).describe(j), "ColorJitter");  // photometric: its own

  FakeParams fill;
  fill.numbers = {{"fill", {1, 2}}};
  TransformStep p(Kind::kPad);
  const absl::Status bad_fill = KindInfo(Kind::kPad).parse(fill, &p);
  EXPECT_EQ(bad_fill.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_fill.message(), "fill needs 1 or 3 values");

  FakeParams filter;
  filter.names = {{"interpolation", {"cubic"}}};
  TransformStep rrc(Kind::kRandomResizedCrop);
  const absl::Status bad_filter = KindInfo(Kind::kRandomResizedCrop).parse(filter, &rrc);
  EXPECT_EQ(bad_filter.message(), "unknown interpolation 'cubic'");

  FakeParams timm;
  timm.names = {{"timm_ops", {"Rotate", "NoSuchOp"}}};
  TransformStep t(Kind::kTimmRandAugment);
  EXPECT_EQ(KindInfo(Kind::kTimmRandAugment).parse(timm, &t).message(),
            "unknown timm op 'NoSuchOp'");

  FakeParams apply;
  apply.numbers = {{"p", {0.8}}, {"num_steps", {2}}};
  TransformStep a(Kind::kRandomApply);
  ASSERT_TRUE(KindInfo(Kind::kRandomApply).parse(apply, &a).ok());
  EXPECT_EQ(a.get<RandomApplyParams>().p, 0.8);
  EXPECT_EQ(a.get<RandomApplyParams>().apply_steps, 2);
  EXPECT_EQ(KindInfo(Kind::kRandomApply).describe(a), "RandomApply(p=0.8, 2 steps)");
}

// StageOrderError and Create walk the same rules: where one refuses a chain for its order, so
// does the other, at the same step.
TEST(StageOrderError, RefusesWhatCreateRefusesForItsOrder) {
  const TransformStep jitter(Kind::kColorJitter);
  PadParams reflect;
  reflect.pad[0] = reflect.pad[1] = reflect.pad[2] = reflect.pad[3] = 2;
  reflect.pad_mode = PadMode::kReflect;
  RandomErasingParams erase;
  erase.scale = {0.02, 0.33};
  erase.ratio = {0.3, 3.3};
  const struct {
    std::vector<TransformStep> steps;
    const char* reason;  // "" when the order is fine
    const char* create;  // what Create says about the same step
  } kCases[] = {
      {{Resize(8), CenterCrop(8, 8), Flip(0.5), ToTensor(), Normalize(kMean, kStd), erase}, "", ""},
      {{Resize(8), ResizeHW(6, 6)},
       "a second resize would need a second resample, which is not native",
       "step 1 (Resize): a second resize (after step 0, Resize)"},
      {{Rrc(8), Flip(0.5), Resize(6)},
       "a second resize would need a second resample, which is not native",
       "step 2 (Resize): a second resize (after step 0, RandomResizedCrop)"},
      {{Resize(8), jitter, CenterCrop(8, 8), ResizeHW(6, 6)},
       "a resize after an earlier step that cannot fuse into the resample (ColorJitter runs on "
       "the 8-bit image) would need a second resample, which is not native",
       "step 3 (Resize): a resize after step 1 (ColorJitter runs on the 8-bit image)"},
      {{reflect, Rrc(8)},
       "a resize after an earlier step that cannot fuse into the resample (Pad with "
       "padding_mode='reflect' runs on the 8-bit image) would need a second resample, which is "
       "not native",
       "step 1 (RandomResizedCrop): a resize after step 0 (Pad with padding_mode='reflect'"},
      {{CenterCrop(8, 8), ToTensor(), Flip(0.5)}, "it runs on the tensor after ToTensor",
       "step 2 (RandomHorizontalFlip): image steps must come before ToTensor/Normalize"},
      {{CenterCrop(8, 8), ToTensor(), ToTensor()}, "it runs on the tensor after ToTensor",
       "step 2 (ToTensor): ToTensor appears more than once"},
      {{CenterCrop(8, 8), Normalize(kMean, kStd)}, "it needs ToTensor before it",
       "step 1 (Normalize): Normalize needs ToTensor before it"},
      {{CenterCrop(8, 8), erase}, "it needs ToTensor before it",
       "step 1 (RandomErasing): RandomErasing works on the tensor: put ToTensor first"},
      // RandomApply guards image steps that keep the size, nested ones included.
      {{Rrc(8), Flip(0.5), Apply(0.8, 1), jitter, Apply(0.5, 2), Apply(0.2, 1), jitter, Flip(0.5),
        ToTensor()},
       "", ""},
      {{CenterCrop(8, 8), Apply(0.5, 1), ToTensor()},
       "a RandomApply guards it, and only image steps that keep the size (colour, blur, "
       "grayscale, the single-op and policy steps, rotation, affine, flips) can be guarded "
       "natively; ToTensor is not one",
       "step 2 (ToTensor): a RandomApply guards it"},
      {{CenterCrop(8, 8), Apply(0.5, 1), CenterCrop(6, 6)},
       "a RandomApply guards it, and only image steps that keep the size (colour, blur, "
       "grayscale, the single-op and policy steps, rotation, affine, flips) can be guarded "
       "natively; CenterCrop is not one",
       "step 2 (CenterCrop): a RandomApply guards it"},
      {{CenterCrop(8, 8), Apply(0.5, 2), jitter},
       "it guards the next 2 step(s), more than follow it in the chain or in the RandomApply "
       "that guards it",
       "step 1 (RandomApply): it guards the next 2 step(s)"},
      {{CenterCrop(8, 8), Apply(0.5, 2), Apply(0.5, 2), jitter, jitter},
       "it guards the next 2 step(s), more than follow it in the chain or in the RandomApply "
       "that guards it",
       "step 2 (RandomApply): it guards the next 2 step(s)"},
  };
  for (const auto& c : kCases) {
    EXPECT_EQ(StageOrderError(c.steps), c.reason);
    // Steps before `first` are the chain so far, which is not judged again.
    EXPECT_EQ(StageOrderError(c.steps, c.steps.size()), "");
    absl::Status status = TransformPipeline::Create(c.steps, DType::kFloat32, Layout::kCHW).status();
    if (*c.create == '\0') {
      EXPECT_TRUE(status.ok()) << status;
    } else {
      EXPECT_NE(status.message().find(c.create), std::string::npos) << status;
    }
  }
}

TEST(TransformPipelineCreate, PillowTransformStepsTakeOnlyItsFilters) {
  // Rotation, affine and the policies resample with Pillow's Image.transform, which refuses
  // the resize-only filters; each filter it takes is accepted.
  for (Kind kind : {Kind::kRandomRotation, Kind::kRandomAffine, Kind::kRandAugment,
                    Kind::kTrivialAugmentWide, Kind::kAutoAugment, Kind::kTimmRandAugment}) {
    TransformStep s(kind);
    for (Interpolation f : {Interpolation::kLanczos, Interpolation::kBox, Interpolation::kHamming}) {
      s = transforms::WithInterpolation(s, f);
      const absl::Status status =
          TransformPipeline::Create({CenterCrop(8, 8), s}, DType::kUint8, Layout::kHWC).status();
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << static_cast<int>(kind);
      EXPECT_NE(status.message().find("nearest, bilinear or bicubic"), std::string::npos) << status;
    }
    for (Interpolation f : {Interpolation::kNearest, Interpolation::kBilinear, Interpolation::kBicubic}) {
      s = transforms::WithInterpolation(s, f);
      EXPECT_TRUE(TransformPipeline::Create({CenterCrop(8, 8), s}, DType::kUint8, Layout::kHWC).ok())
          << static_cast<int>(kind) << " " << InterpolationName(f);
    }
  }
  // A single op only resamples when it is geometric.
  AugOpParams op;
  op.interpolation = Interpolation::kLanczos;
  op.aug_op = AugOp::kPosterize;
  EXPECT_EQ(CreateCode({CenterCrop(8, 8), op}, DType::kUint8), absl::StatusCode::kOk);
  op.aug_op = AugOp::kShearX;
  EXPECT_EQ(CreateCode({CenterCrop(8, 8), op}, DType::kUint8), absl::StatusCode::kInvalidArgument);
}

TEST(TransformPipelineCreate, InputDependentSizeIsRejectedWithHint) {
  const auto status =
      TransformPipeline::Create({Resize(256), Flip(0.5)}, DType::kUint8, Layout::kCHW).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("CenterCrop"), std::string::npos) << status;
  EXPECT_NE(status.message().find("Resize((h, w))"), std::string::npos) << status;
}

TEST(TransformPipelineCreate, OutputSizes) {
  EXPECT_EQ(MustCreate({Resize(256), CenterCrop(224, 200)}).out_w(), 200);
  EXPECT_EQ(MustCreate({Resize(256), CenterCrop(224, 200)}).out_h(), 224);
  EXPECT_EQ(MustCreate({ResizeHW(30, 40)}).out_w(), 40);
  // A Resize(int) after the size is fixed is itself fixed: 224x112 -> shorter side 100.
  const TransformPipeline p = MustCreate({CenterCrop(224, 112), Resize(100)});
  EXPECT_EQ(p.out_h(), 200);
  EXPECT_EQ(p.out_w(), 100);
  const TransformPipeline f = MustCreate({Rrc(224), Flip(0.5), ToTensor()}, DType::kFloat16,
                                         Layout::kCHW);
  EXPECT_EQ(f.SampleBytes(), 224u * 224 * 3 * 2);
  EXPECT_TRUE(f.to_unit());
  EXPECT_EQ(std::string(DTypeName(DType::kBFloat16)), "bfloat16");
  EXPECT_EQ(DTypeSize(DType::kFloat32), 4u);
  // Float output without ToTensor keeps levels 0..255.
  const TransformPipeline raw = MustCreate({CenterCrop(4, 4)}, DType::kFloat32);
  EXPECT_FALSE(raw.to_unit());
  EXPECT_EQ(raw.scale()[0], 1.f);
  EXPECT_EQ(raw.bias()[0], 0.f);
}

TEST(TransformPipelineCreate, ScaleAndBias) {
  const TransformPipeline t = MustCreate({CenterCrop(4, 4), ToTensor()}, DType::kFloat32);
  for (int c = 0; c < 3; ++c) {
    EXPECT_FLOAT_EQ(t.scale()[c], 1.f / 255.f);
    EXPECT_EQ(t.bias()[c], 0.f);
  }
  const TransformPipeline n =
      MustCreate({CenterCrop(4, 4), ToTensor(), Normalize(kMean, kStd)}, DType::kFloat32);
  for (int c = 0; c < 3; ++c) {
    EXPECT_FLOAT_EQ(n.scale()[c], 1.f / (255.f * kStd[c]));
    EXPECT_FLOAT_EQ(n.bias()[c], -kMean[c] / kStd[c]);
    for (int level : {0, 1, 77, 128, 254, 255}) {
      const double expected = (level / 255.0 - kMean[c]) / kStd[c];
      EXPECT_NEAR(level * n.scale()[c] + n.bias()[c], expected, 2e-6);
    }
  }
}

TEST(TransformPipelineCreate, Describe) {
  const TransformPipeline p = MustCreate(
      {Rrc(224), Flip(0.5), ToTensor(), Normalize(kMean, kStd)}, DType::kFloat32);
  EXPECT_EQ(p.Describe().rfind("RandomResizedCrop(224x224) -> Flip(0.5) -> ToTensor -> Normalize",
                               0),
            0u)
      << p.Describe();
  EXPECT_EQ(MustCreate({Resize(256), CenterCrop(224, 224)}).Describe(),
            "Resize(256) -> CenterCrop(224x224)");
}

// ---------------------------------------------------------------------------------------------
// RandomApply in the image stage.

/// Runs the image stage of `p` on a copy of `px` (w x h RGB) with the generator of `seed`;
/// `*draws` gets how many 64-bit draws the stage made.
std::vector<uint8_t> ImageStage(const TransformPipeline& p, std::vector<uint8_t> px, int w, int h,
                                uint64_t seed, int* draws) {
  SampleRng rng(seed);
  AugmentScratch scratch;
  RgbView img{px.data(), w, h, static_cast<size_t>(w) * 3};
  EXPECT_TRUE(ApplyImageSteps(p, rng, scratch, &img).ok());
  const uint64_t next = rng.Next();
  SampleRng replay(seed);
  *draws = 0;
  while (replay.Next() != next) ++*draws;
  return std::vector<uint8_t>(img.data, img.data + static_cast<size_t>(w) * h * 3);
}

TEST(RandomApply, GuardsItsStepsWithOneDrawAtItsProbability) {
  // Apply(p) over RandomGrayscale(p=0.5): one draw for the guard, and the grayscale step's own
  // draw only when the guard applies (torchvision's RandomApply calls its transforms then).
  const int w = 6, h = 4;
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 37 + 11);
  GrayscaleParams gray;
  gray.p = 0.5;
  for (double p : {0.0, 0.3, 1.0}) {
    const TransformPipeline pipeline = MustCreate({CenterCrop(h, w), Apply(p, 1), gray});
    ASSERT_EQ(pipeline.image_begin(), 1u);
    ASSERT_EQ(pipeline.image_end(), 3u);
    int applied = 0, grayed = 0;
    const int n = 4000;
    for (int seed = 0; seed < n; ++seed) {
      int draws = 0;
      const std::vector<uint8_t> out = ImageStage(pipeline, px, w, h, seed, &draws);
      // The guard's draw decides, as SampleRng's first uniform of this stage.
      SampleRng first(seed);
      const bool guard = p >= 1.0 || first.Uniform() < p;
      EXPECT_EQ(draws, guard ? 2 : 1) << p << " " << seed;
      applied += guard;
      grayed += out != px;
    }
    EXPECT_NEAR(static_cast<double>(applied) / n, p, 0.03) << p;
    EXPECT_NEAR(static_cast<double>(grayed) / n, p * 0.5, 0.03) << p;
  }
}

TEST(RandomApply, NestedGuardsSkipTheirWholeRange) {
  // Apply(0) over [Apply(1) over [Grayscale(1)], Flip(1)] then Flip(1): the outer guard skips
  // the inner guard and both steps; the last flip still runs.
  const int w = 5, h = 3;
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 13 + 5);
  GrayscaleParams gray;
  gray.p = 1.0;
  const TransformPipeline skipped =
      MustCreate({CenterCrop(h, w), Apply(0.0, 3), Apply(1.0, 1), gray, Flip(1.0), Flip(1.0)});
  int draws = 0;
  std::vector<uint8_t> mirrored(px.size());
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      std::copy_n(&px[(static_cast<size_t>(y) * w + (w - 1 - x)) * 3], 3,
                  &mirrored[(static_cast<size_t>(y) * w + x) * 3]);
    }
  }
  EXPECT_EQ(ImageStage(skipped, px, w, h, 7, &draws), mirrored);
  EXPECT_EQ(draws, 2);  // the outer guard and the last flip
  const TransformPipeline applied =
      MustCreate({CenterCrop(h, w), Apply(1.0, 3), Apply(1.0, 1), gray, Flip(1.0), Flip(1.0)});
  const std::vector<uint8_t> out = ImageStage(applied, px, w, h, 7, &draws);
  EXPECT_EQ(draws, 4);  // two guards and two flips (Grayscale(1) does not draw)
  for (size_t i = 0; i < out.size(); i += 3) {
    EXPECT_TRUE(out[i] == out[i + 1] && out[i + 1] == out[i + 2]) << i;
  }
  EXPECT_EQ(applied.Describe(),
            "CenterCrop(3x5) -> RandomApply(p=1, 3 steps) -> RandomApply(p=1, 1 step) -> "
            "Grayscale -> Flip(1) -> Flip(1)");
}

// ---------------------------------------------------------------------------------------------
// Plan: geometry.

TEST(TransformPipelinePlan, ResizeCenterCropLandscape) {
  // 500x375 -> Resize(256) -> 341x256 (int(256 * 500 / 375) = 341) -> CenterCrop(224):
  // top = round(32 / 2) = 16, left = round(117 / 2 = 58.5) = 58 (Python rounds half to even).
  const TransformPipeline p = MustCreate({Resize(256), CenterCrop(224, 224)});
  SampleRng rng(1);
  const SampleGeometry g = p.Plan(500, 375, rng);
  EXPECT_EQ(g.out_w, 224);
  EXPECT_EQ(g.out_h, 224);
  EXPECT_DOUBLE_EQ(g.x0, 58 * 500.0 / 341);
  EXPECT_DOUBLE_EQ(g.x1, 282 * 500.0 / 341);
  EXPECT_DOUBLE_EQ(g.y0, 16 * 375.0 / 256);
  EXPECT_DOUBLE_EQ(g.y1, 240 * 375.0 / 256);
  EXPECT_FALSE(g.flipped());
  // Resize works on the whole image, so its taps are clipped at the image border.
  EXPECT_EQ(g.clip_x0, 0);
  EXPECT_EQ(g.clip_x1, 500);
  EXPECT_EQ(g.clip_y0, 0);
  EXPECT_EQ(g.clip_y1, 375);
}

TEST(TransformPipelinePlan, ResizeCenterCropPortraitAndRounding) {
  const TransformPipeline p = MustCreate({Resize(256), CenterCrop(224, 224)});
  SampleRng rng(1);
  const SampleGeometry g = p.Plan(375, 500, rng);  // -> 256x341
  EXPECT_DOUBLE_EQ(g.x0, 16 * 375.0 / 256);
  EXPECT_DOUBLE_EQ(g.y0, 58 * 500.0 / 341);
  // (343 - 224) / 2 = 59.5 rounds to 60 (even); (345 - 224) / 2 = 60.5 rounds to 60 too.
  const TransformPipeline q = MustCreate({ResizeHW(300, 343), CenterCrop(224, 224)});
  EXPECT_DOUBLE_EQ(q.Plan(686, 300, rng).x0, 60 * 2.0);
  const TransformPipeline r = MustCreate({ResizeHW(300, 345), CenterCrop(224, 224)});
  EXPECT_DOUBLE_EQ(r.Plan(345, 300, rng).x0, 60.0);
}

TEST(TransformPipelinePlan, ResizeMaxSize) {
  // 1000x200: short 200 -> 100, long int(100 * 1000 / 200) = 500 > 300:
  // short = int(300 * 100 / 500) = 60, long = 300. Then CenterCrop(50, 50).
  const TransformPipeline p = MustCreate({Resize(100, 300), CenterCrop(50, 50)});
  SampleRng rng(1);
  const SampleGeometry g = p.Plan(1000, 200, rng);
  // View 300x60: left = round(250 / 2) = 125, top = round(10 / 2) = 5.
  EXPECT_DOUBLE_EQ(g.x0, 125 * 1000.0 / 300);
  EXPECT_DOUBLE_EQ(g.x1, 175 * 1000.0 / 300);
  EXPECT_DOUBLE_EQ(g.y0, 5 * 200.0 / 60);
  EXPECT_DOUBLE_EQ(g.y1, 55 * 200.0 / 60);
}

TEST(TransformPipelinePlan, RandomResizeDrawsTheShortSidePerSample) {
  // v2's RandomResize(10, 20): the short side drawn from [10, 20) per sample, then Resize(drawn).
  TransformStep random = Resize(10);
  random.get<ResizeParams>().size_max = 20;
  const TransformPipeline p = MustCreate({random, CenterCrop(8, 8)});
  std::vector<int64_t> sides;
  for (uint64_t seed = 0; seed < 60; ++seed) {
    SampleRng rng(seed);
    const SampleGeometry g = p.Plan(30, 60, rng);
    // 8 output columns span 8 * 30 / side source columns.
    const int64_t side = std::llround(8.0 * 30.0 / (g.x1 - g.x0));
    EXPECT_GE(side, 10);
    EXPECT_LT(side, 20);
    EXPECT_NEAR(g.y1 - g.y0, 8.0 * 60.0 / (2 * side), 1e-9);  // long side int(side * 60 / 30)
    SampleRng again(seed);
    EXPECT_EQ(p.Plan(30, 60, again).x0, g.x0);  // keyed: the same seed, the same draw
    sides.push_back(side);
  }
  std::sort(sides.begin(), sides.end());
  EXPECT_EQ(std::unique(sides.begin(), sides.end()) - sides.begin(), 10);  // every size drawn

  const auto error = [](TransformStep s) {
    absl::StatusOr<TransformPipeline> made =
        TransformPipeline::Create({s, CenterCrop(8, 8)}, DType::kUint8, Layout::kCHW);
    return made.ok() ? std::string() : std::string(made.status().message());
  };
  TransformStep empty = random;
  empty.get<ResizeParams>().size_max = 10;
  EXPECT_NE(error(empty).find("must be greater than min_size = 10"), std::string::npos);
  TransformStep capped = random;
  capped.get<ResizeParams>().max_size = 40;
  EXPECT_NE(error(capped).find("takes a single int size and no max_size"), std::string::npos);
  // Without a crop after it the output size depends on the draw.
  EXPECT_FALSE(TransformPipeline::Create({random}, DType::kUint8, Layout::kCHW).ok());
  EXPECT_TRUE(TransformPipeline::Create({random}, DType::kUint8, Layout::kCHW, true).ok());
}

TEST(TransformPipelinePlan, CenterCropLargerThanImagePadsWithZeros) {
  // torchvision pads (crop - size) // 2 on the leading side, the rest on the trailing side.
  const TransformPipeline p = MustCreate({CenterCrop(100, 105)});
  SampleRng rng(1);
  const SampleGeometry g = p.Plan(100, 80, rng);
  EXPECT_DOUBLE_EQ(g.x0, -2);
  EXPECT_DOUBLE_EQ(g.x1, 103);
  EXPECT_DOUBLE_EQ(g.y0, -10);
  EXPECT_DOUBLE_EQ(g.y1, 90);

  const RgbImage img = testing::MakeTexture(100, 80, 3);
  std::vector<uint8_t> out(100 * 105 * 3);
  Resampler rs;
  AxisMapping ax, ay;
  GeometryToAxes(g, 1.0, 100, 80, &ax, &ay);
  rs.Resample(img.pixels.data(), 300, 3, 100, 80, ax, ay, OutputFormat{}, out.data());  // uint8 CHW
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 100; ++y) {
      for (int x = 0; x < 105; ++x) {
        const int sx = x - 2, sy = y - 10;
        const bool inside = sx >= 0 && sx < 100 && sy >= 0 && sy < 80;
        const uint8_t expected = inside ? img.pixels[(sy * 100 + sx) * 3 + c] : 0;
        ASSERT_EQ(out[(c * 100 + y) * 105 + x], expected) << c << " " << y << " " << x;
      }
    }
  }
}

/// Resamples `img` (packed RGB, w x h) along `p`'s geometry into uint8 HWC.
std::vector<uint8_t> RenderHwc(const TransformPipeline& p, const RgbImage& img) {
  SampleRng rng(1);
  const SampleGeometry g = p.Plan(img.width, img.height, rng);
  std::vector<uint8_t> out(static_cast<size_t>(g.out_w) * g.out_h * 3);
  Resampler rs;
  AxisMapping ax, ay;
  OutputFormat hwc;
  hwc.layout = Layout::kHWC;
  GeometryToAxes(g, 1.0, img.width, img.height, &ax, &ay);
  rs.Resample(img.pixels.data(), static_cast<size_t>(img.width) * 3, 3, img.width, img.height, ax,
              ay, hwc, out.data());
  return out;
}

TEST(TransformPipelinePlan, PaddingAfterACropShowsZerosNotTheCroppedOffPixels) {
  // CenterCrop(20) of 40x30 keeps [10, 30) x [5, 25); CenterCrop(26, 28) then pads 3 rows and
  // 4 columns of zeros around it, where the source has pixels the first crop removed.
  const RgbImage img = testing::MakeTexture(40, 30, 5);
  const std::vector<uint8_t> out =
      RenderHwc(MustCreate({CenterCrop(20, 20), CenterCrop(26, 28)}), img);
  for (int y = 0; y < 26; ++y) {
    for (int x = 0; x < 28; ++x) {
      const int sx = x - 4 + 10, sy = y - 3 + 5;
      const bool kept = x >= 4 && x < 24 && y >= 3 && y < 23;
      for (int c = 0; c < 3; ++c) {
        const uint8_t expected = kept ? img.pixels[(sy * 40 + sx) * 3 + c] : 0;
        ASSERT_EQ(out[(y * 28 + x) * 3 + c], expected) << y << " " << x << " " << c;
      }
    }
  }
}

TEST(TransformPipelinePlan, ResizeAfterPaddingBlendsTheZeros) {
  // CenterCrop(8, 12) of 8x4 pads 2 columns of zeros each side; a box Resize to half the size
  // averages pixel pairs (horizontal pass, rounded to 8 bits, then vertical), and the pairs at
  // the edges include the zeros (Pillow normalises over the padded image).
  const RgbImage img = testing::MakeTexture(8, 4, 11);
  TransformStep box = ResizeHW(2, 6);
  box.get<ResizeParams>().interpolation = Interpolation::kBox;
  const std::vector<uint8_t> out = RenderHwc(MustCreate({CenterCrop(4, 12), box}), img);
  const auto padded = [&](int y, int x, int c) -> int {
    return x >= 2 && x < 10 ? img.pixels[(y * 8 + x - 2) * 3 + c] : 0;
  };
  for (int y = 0; y < 2; ++y) {
    for (int x = 0; x < 6; ++x) {
      for (int c = 0; c < 3; ++c) {
        const int top = (padded(2 * y, 2 * x, c) + padded(2 * y, 2 * x + 1, c) + 1) / 2;
        const int bottom = (padded(2 * y + 1, 2 * x, c) + padded(2 * y + 1, 2 * x + 1, c) + 1) / 2;
        ASSERT_EQ(out[(y * 6 + x) * 3 + c], (top + bottom + 1) / 2) << y << " " << x << " " << c;
      }
    }
  }
}

TEST(TransformPipelinePlan, RandomResizedCropClipsToCropBox) {
  const TransformPipeline p = MustCreate({Rrc(64)});
  for (uint64_t seed = 0; seed < 50; ++seed) {
    SampleRng a(seed), b(seed);
    const SampleGeometry g = p.Plan(300, 200, a);
    const CropBox box = RandomResizedCropBox(300, 200, 0.08, 1.0, 3.0 / 4, 4.0 / 3, b);
    EXPECT_DOUBLE_EQ(g.x0, box.left);
    EXPECT_DOUBLE_EQ(g.x1, box.left + box.width);
    EXPECT_DOUBLE_EQ(g.y0, box.top);
    EXPECT_DOUBLE_EQ(g.y1, box.top + box.height);
    EXPECT_DOUBLE_EQ(g.clip_x0, box.left);
    EXPECT_DOUBLE_EQ(g.clip_x1, box.left + box.width);
    EXPECT_EQ(g.out_w, 64);
  }
}

TEST(TransformPipelinePlan, FlipMirrorsTheRect) {
  const TransformPipeline always = MustCreate({Resize(256), CenterCrop(224, 224), Flip(1.0)});
  const TransformPipeline never = MustCreate({Resize(256), CenterCrop(224, 224), Flip(0.0)});
  int flips = 0;
  const TransformPipeline half = MustCreate({Resize(256), CenterCrop(224, 224), Flip(0.5)});
  for (uint64_t seed = 0; seed < 1000; ++seed) {
    SampleRng a(seed), b(seed), c(seed);
    const SampleGeometry ga = always.Plan(500, 375, a);
    const SampleGeometry gn = never.Plan(500, 375, b);
    EXPECT_TRUE(ga.flipped());
    EXPECT_FALSE(gn.flipped());
    EXPECT_EQ(ga.x0, gn.x1);
    EXPECT_EQ(ga.x1, gn.x0);
    EXPECT_EQ(ga.y0, gn.y0);
    flips += half.Plan(500, 375, c).flipped();
  }
  EXPECT_GT(flips, 430);  // binomial(1000, 0.5): +-4.4 sigma
  EXPECT_LT(flips, 570);
}

TEST(TransformPipelinePlan, FlippedOutputIsExactMirror) {
  const RgbImage img = testing::MakeTexture(157, 121, 9);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const TransformPipeline plain = MustCreate({Rrc(48)});
    const TransformPipeline flip = MustCreate({Rrc(48), Flip(1.0)});
    SampleRng a(seed), b(seed);
    const SampleGeometry ga = plain.Plan(157, 121, a);
    const SampleGeometry gb = flip.Plan(157, 121, b);
    std::vector<uint8_t> oa(48 * 48 * 3), ob(48 * 48 * 3);
    Resampler rs;
    AxisMapping ax, ay;
    OutputFormat hwc;
    hwc.layout = Layout::kHWC;
    GeometryToAxes(ga, 1.0, 157, 121, &ax, &ay);
    rs.Resample(img.pixels.data(), 157 * 3, 3, 157, 121, ax, ay, hwc, oa.data());
    GeometryToAxes(gb, 1.0, 157, 121, &ax, &ay);
    rs.Resample(img.pixels.data(), 157 * 3, 3, 157, 121, ax, ay, hwc, ob.data());
    for (int y = 0; y < 48; ++y) {
      for (int x = 0; x < 48; ++x) {
        for (int c = 0; c < 3; ++c) {
          ASSERT_EQ(oa[(y * 48 + x) * 3 + c], ob[(y * 48 + 47 - x) * 3 + c]);
        }
      }
    }
  }
}

// A label image (a Mask under v2) resized nearest follows torch's interpolate(mode="nearest"):
// source index floor(i * (in / out)) in float, clamped; Pillow's NEAREST (the image's rule)
// takes the pixel under each output centre, which differs on a non-integer downscale.
TEST(TransformPipelinePlan, TensorNearestPicksTorchsSourcePixels) {
  constexpr int kW = 64, kH = 48;
  std::vector<uint8_t> coords(kW * kH * 3);
  for (int y = 0; y < kH; ++y) {
    for (int x = 0; x < kW; ++x) {
      coords[(y * kW + x) * 3] = static_cast<uint8_t>(x);
      coords[(y * kW + x) * 3 + 1] = static_cast<uint8_t>(y);
    }
  }
  TransformStep resize = ResizeHW(29, 37);
  resize.get<ResizeParams>().interpolation = Interpolation::kNearest;
  const TransformPipeline p = MustCreate({resize, CenterCrop(24, 30)});
  SampleRng rng(1);
  SampleGeometry g = p.Plan(kW, kH, rng);
  const auto render = [&](bool tensor_nearest) {
    g.tensor_nearest = tensor_nearest;
    std::vector<uint8_t> out(24 * 30 * 3);
    Resampler rs;
    AxisMapping ax, ay;
    OutputFormat hwc;
    hwc.layout = Layout::kHWC;
    GeometryToAxes(g, 1.0, kW, kH, &ax, &ay);
    rs.Resample(coords.data(), kW * 3, 3, kW, kH, ax, ay, hwc, out.data());
    return out;
  };
  // The centre crop keeps resized columns 4..33 of 37 and rows 2..25 of 29 (torchvision rounds
  // (37 - 30) / 2 and (29 - 24) / 2 half to even).
  const auto torch_index = [](int k, int in, int out) {
    const float scale = static_cast<float>(in) / static_cast<float>(out);
    return std::min(static_cast<int>(std::floor(static_cast<float>(k) * scale)), in - 1);
  };
  const std::vector<uint8_t> tensor = render(true), pillow = render(false);
  int differ = 0;
  for (int y = 0; y < 24; ++y) {
    for (int x = 0; x < 30; ++x) {
      const uint8_t* px = &tensor[(y * 30 + x) * 3];
      ASSERT_EQ(px[0], torch_index(x + 4, kW, 37)) << x;
      ASSERT_EQ(px[1], torch_index(y + 2, kH, 29)) << y;
      differ += pillow[(y * 30 + x) * 3] != px[0] || pillow[(y * 30 + x) * 3 + 1] != px[1];
    }
  }
  EXPECT_GT(differ, 0);  // the case is one where the two rules part
}

// A flip before the resize: torchvision resizes the flipped image. With nearest (Pillow's
// centre rule or torch's floor) that is not the mirror of the resized image, so the output must
// equal the resize of a mirrored copy of the source, pixel for pixel.
TEST(TransformPipelinePlan, FlipBeforeResizeResizesTheMirroredImage) {
  constexpr int kW = 64, kH = 48;
  const RgbImage img = testing::MakeTexture(kW, kH, 5);
  std::vector<uint8_t> mirrored(img.pixels.size());
  for (int y = 0; y < kH; ++y) {
    for (int x = 0; x < kW; ++x) {
      for (int c = 0; c < 3; ++c) {
        mirrored[((kH - 1 - y) * kW + (kW - 1 - x)) * 3 + c] = img.pixels[(y * kW + x) * 3 + c];
      }
    }
  }
  const auto render = [&](const TransformPipeline& p, const uint8_t* src, bool tensor_nearest) {
    SampleRng rng(3);
    SampleGeometry g = p.Plan(kW, kH, rng);
    g.tensor_nearest = tensor_nearest;
    std::vector<uint8_t> out(static_cast<size_t>(g.out_w) * g.out_h * 3);
    Resampler rs;
    AxisMapping ax, ay;
    OutputFormat hwc;
    hwc.layout = Layout::kHWC;
    GeometryToAxes(g, 1.0, kW, kH, &ax, &ay);
    rs.Resample(src, kW * 3, 3, kW, kH, ax, ay, hwc, out.data());
    return out;
  };
  VerticalFlipParams vflip;
  vflip.p = 1.0;
  for (const Interpolation filter : {Interpolation::kNearest, Interpolation::kBilinear}) {
    for (const bool tensor_nearest : {false, true}) {
      if (tensor_nearest && filter != Interpolation::kNearest) continue;
      TransformStep resize = ResizeHW(29, 37);
      resize.get<ResizeParams>().interpolation = filter;
      const TransformPipeline first = MustCreate({Flip(1.0), vflip, resize, CenterCrop(24, 30)});
      const TransformPipeline plain = MustCreate({resize, CenterCrop(24, 30)});
      const TransformPipeline after = MustCreate({resize, CenterCrop(24, 30), Flip(1.0), vflip});
      const std::vector<uint8_t> got = render(first, img.pixels.data(), tensor_nearest);
      EXPECT_EQ(got, render(plain, mirrored.data(), tensor_nearest))
          << static_cast<int>(filter) << tensor_nearest;
      if (filter == Interpolation::kNearest) {  // the case is one where the two orders part
        EXPECT_NE(got, render(after, img.pixels.data(), tensor_nearest));
      }
    }
  }
}

// v2's ScaleJitter: r = min(target_w / height, target_h / width) * scale in float32, each side
// int(side * r); the scale drawn in [lo, hi) per sample, so the size depends on the image.
TEST(TransformPipelinePlan, ScaleJitterSizesAsV2) {
  TransformStep jitter = ResizeHW(256, 320);
  std::optional<Range>& scale = jitter.get<ResizeParams>().scale_jitter;
  scale = Range{0.61, 0.61};
  const TransformPipeline fixed = TransformPipeline::Create({jitter}, DType::kUint8, Layout::kHWC,
                                                            /*allow_variable_size=*/true).value();
  EXPECT_FALSE(fixed.fixed_size());
  SampleRng rng(1);
  const SampleGeometry g = fixed.Plan(211, 150, rng);
  const float r = static_cast<float>(std::min(320.0 / 150.0, 256.0 / 211.0)) * 0.61f;
  EXPECT_EQ(g.out_w, static_cast<int>(211.f * r));
  EXPECT_EQ(g.out_h, static_cast<int>(150.f * r));
  scale = Range{0.1, 2.0};
  const TransformPipeline drawn = TransformPipeline::Create({jitter}, DType::kUint8, Layout::kHWC,
                                                            true).value();
  int lo = 1 << 30, hi = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    SampleRng s(seed);
    const int w = drawn.Plan(211, 150, s).out_w;
    lo = std::min(lo, w), hi = std::max(hi, w);
  }
  EXPECT_LT(lo, 211 * 256 / 211 * 0.3);  // scales near 0.1 and near 2.0 are drawn
  EXPECT_GT(hi, 211 * 256 / 211 * 1.8);
  scale->lo = 0.0;  // v2 would resize to nothing
  EXPECT_FALSE(TransformPipeline::Create({jitter}, DType::kUint8, Layout::kHWC, true).ok());
}

// v2's RandomZoomOut: with probability p, the image at offsets int((canvas - side) * rand) in a
// canvas of int(side * ratio); its fill painted like a fused pad's; unfusable before a resize.
TEST(TransformPipelinePlan, RandomZoomOutPadsByADrawnShare) {
  PadParams zoom;
  zoom.zoom_out = Range{2.5, 2.5};
  zoom.p = 1.0;
  std::fill(zoom.fill, zoom.fill + 3, 9.f);
  const TransformPipeline always =
      TransformPipeline::Create({zoom}, DType::kUint8, Layout::kHWC, true).value();
  zoom.p = 0.0;
  const TransformPipeline never =
      TransformPipeline::Create({zoom}, DType::kUint8, Layout::kHWC, true).value();
  std::set<double> lefts;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    SampleRng a(seed), b(seed);
    const SampleGeometry g = always.Plan(211, 150, a);
    EXPECT_EQ(g.out_w, static_cast<int>(211.f * 2.5f));
    EXPECT_EQ(g.out_h, static_cast<int>(150.f * 2.5f));
    EXPECT_TRUE(g.has_fill);
    EXPECT_LE(g.x0, 0.0);
    EXPECT_GE(g.x0, 211.0 - g.out_w);
    lefts.insert(g.x0);
    const SampleGeometry n = never.Plan(211, 150, b);
    EXPECT_EQ(n.out_w, 211);
    EXPECT_EQ(n.out_h, 150);
  }
  EXPECT_GT(lefts.size(), 20u);  // the offset is drawn
  zoom.p = 1.0;
  EXPECT_NE(StageOrderError({zoom, ResizeHW(70, 100)}), "");  // a resize would blend its fill
  zoom.zoom_out->lo = 0.5;  // v2 refuses a side_range below 1
  EXPECT_FALSE(TransformPipeline::Create({zoom}, DType::kUint8, Layout::kHWC, true).ok());
}

// A RandomCrop padding with a constant non-zero fill (the lsj preset's) fuses into the geometry
// when it is the output's one padding and no resize follows it; the render paints its padding,
// which is exactly where the same chain with a zero fill writes zeros.
TEST(TransformPipelinePlan, ANonZeroFillFusesAsTheOutputsOnlyPadding) {
  RandomCropParams crop;
  crop.size_h = 90;
  crop.size_w = 120;
  crop.pad_if_needed = true;
  RandomCropParams filled = crop;
  const float mean[3] = {123.f, 117.f, 104.f};
  std::copy(mean, mean + 3, filled.fill);
  PadParams pad;
  std::fill(pad.pad, pad.pad + 4, 4);

  const TransformPipeline fused = MustCreate({ResizeHW(70, 100), filled, Flip(0.5)});
  EXPECT_FALSE(fused.has_image_steps());
  EXPECT_EQ(MustCreate({pad, filled}).image_begin(), 1u);  // beside a zero padding
  EXPECT_EQ(MustCreate({filled, CenterCrop(80, 80)}).image_begin(), 0u);
  EXPECT_NE(StageOrderError({filled, ResizeHW(70, 100)}), "");  // a resize would blend it

  const TransformPipeline zero = MustCreate({ResizeHW(70, 100), crop, Flip(0.5)});
  const RgbImage img = testing::MakeTexture(157, 121, 4);
  int painted = 0;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    std::vector<uint8_t> a(90 * 120 * 3), b(90 * 120 * 3);
    for (auto [p, out] : {std::pair{&fused, &a}, std::pair{&zero, &b}}) {
      SampleRng rng(seed);
      const SampleGeometry g = p->Plan(157, 121, rng);
      EXPECT_EQ(g.has_fill, p == &fused);
      RenderState state;
      ASSERT_TRUE(RenderSample(img.pixels.data(), 157 * 3, 3, 157, 121, *p, g, rng, state,
                               out->data()).ok());
    }
    for (size_t i = 0; i < a.size(); i += 3) {  // HWC
      if (std::equal(a.begin() + i, a.begin() + i + 3, b.begin() + i)) continue;
      ++painted;
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(b[i + c], 0);
        ASSERT_EQ(a[i + c], static_cast<uint8_t>(mean[c]));
      }
    }
  }
  EXPECT_GT(painted, 8 * (90 * 120 - 70 * 100) / 2);  // the padding (a zero pixel may match)
}

TEST(TransformPipelinePlan, DeterministicPerSeed) {
  const TransformPipeline p = MustCreate({Rrc(224), Flip(0.5)});
  int differing = 0;
  for (uint64_t i = 0; i < 200; ++i) {
    SampleRng a(SampleSeed(7, 1, i)), b(SampleSeed(7, 1, i)), c(SampleSeed(7, 2, i));
    const SampleGeometry ga = p.Plan(640, 480, a), gb = p.Plan(640, 480, b);
    const SampleGeometry gc = p.Plan(640, 480, c);
    // Field by field: the struct has padding bytes, which memcmp would compare too.
    const auto fields = [](const SampleGeometry& g) {
      return std::vector<double>{g.x0,      g.x1,      g.y0,      g.y1,      double(g.out_w),
                                 double(g.out_h), g.clip_x0, g.clip_x1, g.clip_y0, g.clip_y1,
                                 g.read_x0, g.read_x1, g.read_y0, g.read_y1, g.show_x0,
                                 g.show_x1, g.show_y0, g.show_y1, double(g.filter)};
    };
    EXPECT_EQ(fields(ga), fields(gb));
    EXPECT_EQ(ga.error, gb.error);
    differing += (ga.x0 != gc.x0 || ga.y0 != gc.y0 || ga.x1 != gc.x1);
  }
  EXPECT_GT(differing, 190);
}

// ---------------------------------------------------------------------------------------------
// RandomResizedCropParams.

TEST(RandomResizedCropParams, AlwaysInBounds) {
  SampleRng sizes(123);
  for (int i = 0; i < 20000; ++i) {
    const int w = static_cast<int>(sizes.RandInt(1, i % 10 == 0 ? 20 : 3000));
    const int h = static_cast<int>(sizes.RandInt(1, i % 7 == 0 ? 20 : 3000));
    SampleRng rng(i);
    const CropBox b = RandomResizedCropBox(w, h, 0.08, 1.0, 3.0 / 4, 4.0 / 3, rng);
    ASSERT_GT(b.width, 0);
    ASSERT_GT(b.height, 0);
    ASSERT_GE(b.left, 0);
    ASSERT_GE(b.top, 0);
    ASSERT_LE(b.left + b.width, w) << w << "x" << h;
    ASSERT_LE(b.top + b.height, h) << w << "x" << h;
  }
}

/// Python's round() for the reimplementation below.
double PyRound(double v) {
  const double f = std::floor(v);
  if (v - f != 0.5) return std::round(v);
  return std::fmod(f, 2.0) == 0 ? f : f + 1;
}

struct CropStats {
  double mean_area = 0, mean_log_aspect = 0, fallback_rate = 0;
};

/// torchvision's get_params written out again with an unrelated generator.
CropStats ReferenceStats(int width, int height, int draws) {
  std::mt19937_64 gen(42);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  const double area = static_cast<double>(width) * height;
  const double lr0 = std::log(3.0 / 4), lr1 = std::log(4.0 / 3);
  CropStats s;
  for (int d = 0; d < draws; ++d) {
    double w = 0, h = 0;
    bool ok = false;
    for (int attempt = 0; attempt < 10 && !ok; ++attempt) {
      const double target = area * (0.08 + (1.0 - 0.08) * u01(gen));
      const double aspect = std::exp(lr0 + (lr1 - lr0) * u01(gen));
      w = PyRound(std::sqrt(target * aspect));
      h = PyRound(std::sqrt(target / aspect));
      ok = w > 0 && w <= width && h > 0 && h <= height;
    }
    if (!ok) {
      s.fallback_rate += 1;
      w = width;
      h = height;  // 500x375 has ratio 4/3: the whole image
    }
    s.mean_area += w * h / area;
    s.mean_log_aspect += std::log(w / h);
  }
  s.mean_area /= draws;
  s.mean_log_aspect /= draws;
  s.fallback_rate /= draws;
  return s;
}

TEST(RandomResizedCropParams, DistributionMatchesTorchvisionAlgorithm) {
  constexpr int kDraws = 100000;
  const CropStats ref = ReferenceStats(500, 375, kDraws);
  CropStats got;
  for (int d = 0; d < kDraws; ++d) {
    SampleRng rng(SampleSeed(99, 0, d));
    const CropBox b = RandomResizedCropBox(500, 375, 0.08, 1.0, 3.0 / 4, 4.0 / 3, rng);
    got.mean_area += static_cast<double>(b.width) * b.height / (500.0 * 375.0);
    got.mean_log_aspect += std::log(static_cast<double>(b.width) / b.height);
    got.fallback_rate += (b.width == 500 && b.height == 375);
  }
  got.mean_area /= kDraws;
  got.mean_log_aspect /= kDraws;
  got.fallback_rate /= kDraws;
  // Per-draw standard deviations are about 0.27 (area) and 0.17 (log aspect), so each mean has
  // a standard error near 0.00085 / 0.00054; the bounds are about 5 sigma of the difference.
  EXPECT_NEAR(got.mean_area, ref.mean_area, 0.006);
  EXPECT_NEAR(got.mean_log_aspect, ref.mean_log_aspect, 0.004);
  EXPECT_NEAR(got.fallback_rate, ref.fallback_rate, 0.005);
  // And both are where the algorithm puts them: on a 4:3 image a large target area only fits
  // with an aspect near 4/3, so accepted crops are biased small (mean well below
  // (0.08 + 1) / 2 = 0.54) and wide (mean log aspect above the range's midpoint, 0).
  EXPECT_GT(ref.mean_area, 0.42);
  EXPECT_LT(ref.mean_area, 0.45);
  EXPECT_GT(ref.mean_log_aspect, 0.0);
  std::printf("area %.4f / %.4f, log aspect %.4f / %.4f, fallback %.5f / %.5f\n", got.mean_area,
              ref.mean_area, got.mean_log_aspect, ref.mean_log_aspect, got.fallback_rate,
              ref.fallback_rate);
}

TEST(RandomResizedCropParams, FallbackIsClampedCentreCrop) {
  for (uint64_t seed = 0; seed < 100; ++seed) {
    SampleRng rng(seed);
    // 10x1000: every attempt needs w >= sqrt(800 * 0.75) > 10, so all 10 fail.
    const CropBox tall = RandomResizedCropBox(10, 1000, 0.08, 1.0, 3.0 / 4, 4.0 / 3, rng);
    EXPECT_EQ(tall.width, 10);
    EXPECT_EQ(tall.height, 13);  // round(10 / 0.75) = round(13.33)
    EXPECT_EQ(tall.top, (1000 - 13) / 2);
    EXPECT_EQ(tall.left, 0);
    const CropBox wide = RandomResizedCropBox(1000, 10, 0.08, 1.0, 3.0 / 4, 4.0 / 3, rng);
    EXPECT_EQ(wide.height, 10);
    EXPECT_EQ(wide.width, 13);  // round(10 * 4 / 3)
    EXPECT_EQ(wide.left, (1000 - 13) / 2);
    EXPECT_EQ(wide.top, 0);
  }
}

// ---------------------------------------------------------------------------------------------
// Resampler against a direct double-precision implementation of Pillow's algorithm.

/// Pillow's ImagingResample (bilinear, antialiased), written plainly in double precision:
/// per-axis taps over [center - support, center + support] clipped to [lo, hi) and normalised,
/// one pass rounded to 8 bits (Pillow keeps an 8-bit intermediate), then the other: horizontal
/// first, or vertical first when `vertical_first`.
std::vector<uint8_t> ReferenceResample(const RgbImage& img, double bx0, double bx1, double by0,
                                       double by1, int out_w, int out_h, int clip_x0,
                                       int clip_x1, int clip_y0, int clip_y1,
                                       bool vertical_first) {
  struct Taps {
    int first = 0;
    std::vector<double> w;
  };
  auto axis = [](double b0, double b1, int out, int lo, int hi) {
    std::vector<Taps> taps(out);
    const double scale = (b1 - b0) / out;
    const double fs = std::max(scale, 1.0);
    for (int i = 0; i < out; ++i) {
      const double center = b0 + (i + 0.5) * scale;
      const int xmin = std::max(lo, static_cast<int>(std::floor(center - fs + 0.5)));
      const int xmax = std::min(hi, static_cast<int>(std::floor(center + fs + 0.5)));
      double sum = 0;
      for (int x = xmin; x < xmax; ++x) {
        const double d = std::abs((x - center + 0.5) / fs);
        taps[i].w.push_back(d < 1 ? 1 - d : 0);
        sum += taps[i].w.back();
      }
      for (double& v : taps[i].w) v /= sum;
      taps[i].first = xmin;
    }
    return taps;
  };
  const std::vector<Taps> tx = axis(bx0, bx1, out_w, clip_x0, clip_x1);
  const std::vector<Taps> ty = axis(by0, by1, out_h, clip_y0, clip_y1);
  auto level = [](double s) {
    return static_cast<uint8_t>(std::clamp(std::floor(s + 0.5), 0.0, 255.0));
  };
  if (vertical_first) {
    std::vector<uint8_t> mid(static_cast<size_t>(out_h) * img.width * 3);
    for (int y = 0; y < out_h; ++y) {
      for (int x = 0; x < img.width * 3; ++x) {
        double s = 0;
        for (size_t t = 0; t < ty[y].w.size(); ++t) {
          s += ty[y].w[t] * img.pixels[(ty[y].first + t) * img.width * 3 + x];
        }
        mid[static_cast<size_t>(y) * img.width * 3 + x] = level(s);
      }
    }
    std::vector<uint8_t> out(static_cast<size_t>(out_h) * out_w * 3);
    for (int y = 0; y < out_h; ++y) {
      for (int x = 0; x < out_w; ++x) {
        for (int c = 0; c < 3; ++c) {
          double s = 0;
          for (size_t t = 0; t < tx[x].w.size(); ++t) {
            s += tx[x].w[t] * mid[(static_cast<size_t>(y) * img.width + tx[x].first + t) * 3 + c];
          }
          out[(static_cast<size_t>(y) * out_w + x) * 3 + c] = level(s);
        }
      }
    }
    return out;
  }
  std::vector<uint8_t> mid(static_cast<size_t>(img.height) * out_w * 3);
  for (int y = 0; y < img.height; ++y) {
    for (int x = 0; x < out_w; ++x) {
      for (int c = 0; c < 3; ++c) {
        double s = 0;
        for (size_t t = 0; t < tx[x].w.size(); ++t) {
          const size_t src = static_cast<size_t>(y) * img.width + tx[x].first + t;
          s += tx[x].w[t] * img.pixels[src * 3 + c];
        }
        mid[(static_cast<size_t>(y) * out_w + x) * 3 + c] =
            static_cast<uint8_t>(std::clamp(std::floor(s + 0.5), 0.0, 255.0));
      }
    }
  }
  std::vector<uint8_t> out(static_cast<size_t>(out_h) * out_w * 3);
  for (int y = 0; y < out_h; ++y) {
    for (int x = 0; x < out_w * 3; ++x) {
      double s = 0;
      for (size_t t = 0; t < ty[y].w.size(); ++t) {
        s += ty[y].w[t] * mid[(ty[y].first + t) * out_w * 3 + x];
      }
      out[static_cast<size_t>(y) * out_w * 3 + x] =
          static_cast<uint8_t>(std::clamp(std::floor(s + 0.5), 0.0, 255.0));
    }
  }
  return out;
}

TEST(Resampler, MatchesDoublePrecisionPillowReference) {
  const RgbImage img = testing::MakeTexture(331, 247, 5);
  SampleRng rng(2024);
  Resampler rs;  // reused across cases: grow-only buffers must not leak state between them
  OutputFormat hwc;
  hwc.layout = Layout::kHWC;
  size_t total = 0, exact = 0;
  int vertical_firsts = 0;
  for (int iter = 0; iter < 60; ++iter) {
    // Integer crop boxes (as torchvision produces) resized to random sizes: down and up.
    const int cw = static_cast<int>(rng.RandInt(1, 332));
    const int ch = static_cast<int>(rng.RandInt(1, 248));
    const int left = static_cast<int>(rng.RandInt(0, 331 - cw + 1));
    const int top = static_cast<int>(rng.RandInt(0, 247 - ch + 1));
    const int out_w = static_cast<int>(rng.RandInt(1, 300));
    const int out_h = static_cast<int>(rng.RandInt(1, 300));
    // Resize semantics: taps may leave the box, which is a view of the whole image resized.
    const bool whole_image_clip = iter % 3 == 0;
    AxisMapping ax{static_cast<double>(left), static_cast<double>(left + cw), 0, 0, out_w};
    AxisMapping ay{static_cast<double>(top), static_cast<double>(top + ch), 0, 0, out_h};
    ax.clip_lo = whole_image_clip ? 0 : left;
    ax.clip_hi = whole_image_clip ? 331 : left + cw;
    ay.clip_lo = whole_image_clip ? 0 : top;
    ay.clip_hi = whole_image_clip ? 247 : top + ch;
    std::vector<uint8_t> got(static_cast<size_t>(out_w) * out_h * 3);
    rs.Resample(img.pixels.data(), 331 * 3, 3, 331, 247, ax, ay, hwc, got.data());
    // Pillow's pass order follows the image it resizes (the clip box) and its resized size.
    const double clip_w = ax.clip_hi - ax.clip_lo, clip_h = ay.clip_hi - ay.clip_lo;
    const bool vertical_first = ResizesVerticallyFirst(
        clip_w, clip_h, clip_w * out_w / cw, clip_h * out_h / ch);
    vertical_firsts += vertical_first;
    const std::vector<uint8_t> want =
        ReferenceResample(img, left, left + cw, top, top + ch, out_w, out_h,
                          static_cast<int>(ax.clip_lo), static_cast<int>(ax.clip_hi),
                          static_cast<int>(ay.clip_lo), static_cast<int>(ay.clip_hi),
                          vertical_first);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_LE(std::abs(got[i] - want[i]), 1)
          << "case " << iter << " box " << left << "," << top << " " << cw << "x" << ch
          << " -> " << out_w << "x" << out_h << " index " << i;
      exact += got[i] == want[i];
    }
    total += got.size();
  }
  // 22-bit fixed point differs from double only where a value sits on a rounding boundary.
  EXPECT_GT(static_cast<double>(exact) / total, 0.995);
  EXPECT_GT(vertical_firsts, 5);  // both pass orders are covered
  EXPECT_LT(vertical_firsts, 55);
}

TEST(Resampler, PassOrderIsPillows) {
  // Sizes measured with Pillow 13 (resize of random noise, bicubic: only one order matches).
  EXPECT_TRUE(ResizesVerticallyFirst(203, 278, 224, 224));   // taller: the reported case
  EXPECT_TRUE(ResizesVerticallyFirst(333, 500, 224, 224));
  EXPECT_TRUE(ResizesVerticallyFirst(120, 360, 224, 224));   // width grows, height shrinks
  EXPECT_TRUE(ResizesVerticallyFirst(120, 120, 97, 64));     // 56 > 2 * 23
  EXPECT_FALSE(ResizesVerticallyFirst(120, 120, 97, 80));    // 40 <= 2 * 23
  EXPECT_FALSE(ResizesVerticallyFirst(120, 120, 80, 40));    // 80 == 2 * 40: horizontal first
  EXPECT_FALSE(ResizesVerticallyFirst(300, 300, 224, 200));
  EXPECT_FALSE(ResizesVerticallyFirst(333, 500, 224, 336));  // aspect kept: Resize(224)
  EXPECT_FALSE(ResizesVerticallyFirst(360, 120, 224, 224));  // wide
  EXPECT_FALSE(ResizesVerticallyFirst(40, 57, 57, 64));      // height grows
  EXPECT_FALSE(ResizesVerticallyFirst(300, 500, 300, 224));  // one pass only
  EXPECT_FALSE(ResizesVerticallyFirst(300, 500, 224, 500));
}

TEST(Resampler, VerticalFirstStreamsRowsFromAColumnOrigin) {
  // The decoder's region-of-interest path: rows start at a column origin and arrive one by one.
  // Vertical-first keeps them raw and filters in Finish; the result equals a whole-image resample.
  const RgbImage img = testing::MakeTexture(203, 278, 4);
  AxisMapping ax{40, 160, 40, 160, 90}, ay{10, 270, 10, 270, 64};
  ax.filter = ay.filter = Interpolation::kBicubic;
  OutputFormat hwc;
  hwc.layout = Layout::kHWC;
  Resampler whole, streamed;
  std::vector<uint8_t> want(90 * 64 * 3), got(want.size());
  whole.Resample(img.pixels.data(), 203 * 3, 3, 203, 278, ax, ay, hwc, want.data());
  streamed.Prepare(ax, ay, 203, 278);
  ASSERT_TRUE(streamed.vertical_first());
  const int origin = streamed.first_col() - 3;
  streamed.SetColumnOrigin(origin);
  std::vector<uint8_t> row(static_cast<size_t>(203 - origin) * 4);
  for (int y = 0; y < 278; ++y) {
    for (int x = origin; x < 203; ++x) {
      for (int c = 0; c < 3; ++c) {
        row[(x - origin) * 4 + c] = img.pixels[(static_cast<size_t>(y) * 203 + x) * 3 + c];
      }
      row[(x - origin) * 4 + 3] = 0xAB;  // the 4th byte is ignored
    }
    streamed.AddRow(y, row.data());
  }
  streamed.Finish(hwc, got.data());
  EXPECT_EQ(got, want);
}

// Resamples `img` with the SIMD kernels and with the scalar ones; true when every stored
// element has the same bits.
template <typename T>
bool KernelsAgree(Resampler& rs, const RgbImage& img, const AxisMapping& ax,
                  const AxisMapping& ay, const OutputFormat& fmt) {
  std::vector<T> simd(static_cast<size_t>(ax.out_size) * ay.out_size * 3), scalar(simd.size());
  SetResampleSimdForTesting(true);
  rs.Resample(img.pixels.data(), static_cast<size_t>(img.width) * 3, 3, img.width, img.height,
              ax, ay, fmt, simd.data());
  SetResampleSimdForTesting(false);
  rs.Resample(img.pixels.data(), static_cast<size_t>(img.width) * 3, 3, img.width, img.height,
              ax, ay, fmt, scalar.data());
  SetResampleSimdForTesting(true);
  return std::memcmp(simd.data(), scalar.data(), simd.size() * sizeof(T)) == 0;
}

TEST(Resampler, ScalarAndSimdKernelsAgree) {
  const RgbImage img = testing::MakeTexture(301, 203, 8);
  SampleRng rng(31);
  Resampler rs;
  OutputFormat hwc;
  hwc.layout = Layout::kHWC;
  for (int iter = 0; iter < 40; ++iter) {
    const int out_w = static_cast<int>(rng.RandInt(1, 260));
    const int out_h = static_cast<int>(rng.RandInt(1, 260));
    const double x0 = rng.Uniform(-20, 150), x1 = rng.Uniform(151, 320);
    const double y0 = rng.Uniform(-20, 100), y1 = rng.Uniform(101, 220);
    // Mirrored on odd iterations; clip box = whole image (zero outside, as CenterCrop pads).
    AxisMapping ax{iter % 2 ? x1 : x0, iter % 2 ? x0 : x1, 0, 301, out_w};
    AxisMapping ay{y0, y1, 0, 203, out_h};
    ASSERT_TRUE(KernelsAgree<uint8_t>(rs, img, ax, ay, hwc)) << "case " << iter;
  }
}

// Crops, flips and pads without resizing copy pixels (the axis copies()); the SIMD copy of
// steps 1 and -1 must give the scalar copy's bytes for every width remainder, a crop reaching
// past the source (zeros) and either direction, in every write-out.
TEST(Resampler, ScalarAndSimdCopiesAgree) {
  const RgbImage img = testing::MakeTexture(131, 37, 3);
  SampleRng rng(5);
  Resampler rs;
  OutputFormat hwc, planes, floats;
  hwc.layout = Layout::kHWC;
  planes.layout = Layout::kCHW;
  floats.layout = Layout::kCHW;
  floats.dtype = DType::kFloat32;
  for (int c = 0; c < 3; ++c) floats.scale[c] = 1.0f / 255.0f;
  for (int iter = 0; iter < 200; ++iter) {
    const int x0 = static_cast<int>(rng.RandInt(-9, 120));
    const int w = static_cast<int>(rng.RandInt(1, 150));
    const int y0 = static_cast<int>(rng.RandInt(-3, 30));
    const int h = static_cast<int>(rng.RandInt(1, 40));
    const bool flip_x = iter % 2 != 0, flip_y = iter % 3 == 0;
    AxisMapping ax{static_cast<double>(flip_x ? x0 + w : x0), static_cast<double>(flip_x ? x0 : x0 + w), 0, 131, w};
    AxisMapping ay{static_cast<double>(flip_y ? y0 + h : y0), static_cast<double>(flip_y ? y0 : y0 + h), 0, 37, h};
    ASSERT_TRUE(KernelsAgree<uint8_t>(rs, img, ax, ay, hwc)) << "case " << iter;
    ASSERT_TRUE(KernelsAgree<uint8_t>(rs, img, ax, ay, planes)) << "case " << iter;
    ASSERT_TRUE(KernelsAgree<float>(rs, img, ax, ay, floats)) << "case " << iter;
    // The planes hold the levels the uint8 HWC write-out (its own path) holds.
    std::vector<uint8_t> levels(static_cast<size_t>(w) * h * 3);
    std::vector<float> planes_out(levels.size());
    rs.Resample(img.pixels.data(), 131 * 3, 3, 131, 37, ax, ay, hwc, levels.data());
    rs.Resample(img.pixels.data(), 131 * 3, 3, 131, 37, ax, ay, floats, planes_out.data());
    for (int i = 0; i < w * h; ++i) {
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(planes_out[static_cast<size_t>(c) * w * h + i], levels[3 * i + c] * floats.scale[c]);
      }
    }
  }
}

// WriteImage with a Frame stores the fill outside the shown rectangle without reading those
// pixels: the same elements as writing an image whose padding holds the fill, for every
// write-out, an empty rectangle and one reaching the edges.
TEST(Resampler, FramedWriteEqualsPaintedPadding) {
  SampleRng rng(17);
  Resampler rs;
  std::vector<OutputFormat> formats(6);
  formats[0].layout = Layout::kHWC;
  formats[1].layout = Layout::kCHW;
  formats[2].layout = formats[3].layout = Layout::kCHW;
  formats[4].layout = Layout::kHWC;
  formats[2].dtype = formats[4].dtype = DType::kFloat32;
  formats[3].dtype = DType::kFloat16;
  for (OutputFormat* f : {&formats[2], &formats[3], &formats[4]}) {
    for (int c = 0; c < 3; ++c) f->scale[c] = 1.0f / (255.0f * (0.2f + 0.01f * c));
  }
  // A pipeline's exact float32 values (computed in lanes where the CPU can), and bfloat16.
  formats[5] = OutputFormat::FromPipeline(MustCreate(
      {Rrc(40), ToTensor(), Normalize(kMean, kStd)}, DType::kFloat32, Layout::kCHW));
  OutputFormat bf16 = formats[5];
  bf16.dtype = DType::kBFloat16;
  formats.push_back(bf16);
  for (int iter = 0; iter < 60; ++iter) {
    const int w = static_cast<int>(rng.RandInt(1, 90)), h = static_cast<int>(rng.RandInt(1, 30));
    int shown[4];
    shown[0] = static_cast<int>(rng.RandInt(0, w + 1));
    shown[1] = static_cast<int>(rng.RandInt(0, h + 1));
    shown[2] = static_cast<int>(rng.RandInt(shown[0], w + 1));
    shown[3] = static_cast<int>(rng.RandInt(shown[1], h + 1));
    Resampler::Frame frame;
    std::copy(shown, shown + 4, frame.shown);
    for (uint8_t& v : frame.fill) v = static_cast<uint8_t>(rng.RandInt(0, 256));
    std::vector<uint8_t> painted(static_cast<size_t>(w) * h * 3), unread(painted.size());
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        const bool inside = x >= shown[0] && x < shown[2] && y >= shown[1] && y < shown[3];
        for (int c = 0; c < 3; ++c) {
          const size_t i = (static_cast<size_t>(y) * w + x) * 3 + c;
          painted[i] = inside ? static_cast<uint8_t>(rng.RandInt(0, 256)) : frame.fill[c];
          unread[i] = inside ? painted[i] : static_cast<uint8_t>(rng.RandInt(0, 256));
        }
      }
    }
    for (const OutputFormat& fmt : formats) {
      const size_t bytes =
          painted.size() * (fmt.dtype == DType::kFloat32 ? 4 : fmt.dtype == DType::kUint8 ? 1 : 2);
      std::vector<uint8_t> want(bytes), got(bytes, 0xA5);
      rs.WriteImage(painted.data(), static_cast<size_t>(w) * 3, w, h, fmt, want.data());
      rs.WriteImage(unread.data(), static_cast<size_t>(w) * 3, w, h, fmt, got.data(), &frame);
      ASSERT_EQ(want, got) << "case " << iter << " dtype " << static_cast<int>(fmt.dtype);
    }
  }
}

// A pipeline's float32 values are computed in SIMD lanes by its own operations (ToTensor's
// division or v2's multiplication by the reciprocal, Normalize's subtraction and division): the
// same bits as the scalar lookup, for odd widths, crops and both pass orders.
TEST(Resampler, ScalarAndSimdAgreeOnPipelineValues) {
  const RgbImage img = testing::MakeTexture(301, 203, 4);
  ToTensorParams v2_unit;
  v2_unit.by_reciprocal = true;
  const float odd_mean[3] = {0.1f, 0.7f, 0.33f}, odd_std[3] = {0.3f, 0.05f, 1.7f};
  const std::vector<std::vector<TransformStep>> chains = {
      {Rrc(40), ToTensor()},
      {Rrc(40), v2_unit},
      {Rrc(40), ToTensor(), Normalize(kMean, kStd)},
      {Rrc(40), v2_unit, Normalize(odd_mean, odd_std)}};
  SampleRng rng(9);
  Resampler rs;
  for (const std::vector<TransformStep>& chain : chains) {
    const OutputFormat f =
        OutputFormat::FromPipeline(MustCreate(chain, DType::kFloat32, Layout::kCHW));
    ASSERT_GE(f.ops.n, 1);
    for (int iter = 0; iter < 12; ++iter) {
      const int out_w = static_cast<int>(rng.RandInt(1, 120));
      const int out_h = static_cast<int>(rng.RandInt(1, 90));
      AxisMapping ax{rng.Uniform(-10, 100), rng.Uniform(120, 310), 0, 301, out_w};
      AxisMapping ay{rng.Uniform(0, 80), rng.Uniform(90, 203), 0, 203, out_h};
      ASSERT_TRUE(KernelsAgree<float>(rs, img, ax, ay, f)) << "case " << iter;
    }
    std::vector<float> out(40 * 40 * 3);
    AxisMapping ax{0, 301, 0, 301, 40}, ay{0, 203, 0, 203, 40};
    rs.Resample(img.pixels.data(), 301 * 3, 3, 301, 203, ax, ay, f, out.data());
    const bool simd = SetResampleSimdForTesting(true);
    EXPECT_EQ(rs.computes_values(), simd && f.ops.n >= 1);  // the lanes ran, not the table
  }
}

// The SIMD horizontal kernel splits each 22-bit weight in two 16-bit halves, the planar
// float store gathers from the lookup table and the uint8 one shuffles bytes: all must match the scalar kernels bit for bit
// for negative weights (bicubic, lanczos overshoot), one tap (nearest) to hundreds (a 40x
// downscale), odd and even widths and tap counts, and either pass order.
TEST(Resampler, ScalarAndSimdKernelsAgreeForEveryFilterAndPlanes) {
  const RgbImage img = testing::MakeTexture(1203, 97, 5);
  SampleRng rng(77);
  Resampler rs;
  OutputFormat planes;
  planes.dtype = DType::kFloat32;
  planes.layout = Layout::kCHW;
  for (int c = 0; c < 3; ++c) {
    planes.scale[c] = 1.0f / (255.0f * (0.2f + 0.01f * c));
    planes.bias[c] = -0.45f - 0.02f * c;
  }
  const Interpolation filters[] = {Interpolation::kNearest, Interpolation::kLanczos,
                                   Interpolation::kBilinear, Interpolation::kBicubic,
                                   Interpolation::kBox,      Interpolation::kHamming};
  for (int iter = 0; iter < 60; ++iter) {
    const Interpolation filter = filters[iter % 6];
    // Widths from 1 to 40x smaller than the source; heights around the source's, so that
    // both pass orders occur.
    const int out_w = iter % 5 == 0 ? static_cast<int>(rng.RandInt(1, 40))
                                    : static_cast<int>(rng.RandInt(1, 700));
    const int out_h = static_cast<int>(rng.RandInt(1, 140));
    const double x0 = rng.Uniform(-30, 400), x1 = rng.Uniform(401, 1230);
    const double y0 = rng.Uniform(-10, 40), y1 = rng.Uniform(41, 110);
    AxisMapping ax{iter % 2 ? x1 : x0, iter % 2 ? x0 : x1, 0, 1203, out_w, filter};
    AxisMapping ay{y0, y1, 0, 97, out_h, filter};
    OutputFormat byte_planes;  // uint8 CHW levels as they are
    byte_planes.layout = Layout::kCHW;
    ASSERT_TRUE(KernelsAgree<uint8_t>(rs, img, ax, ay, byte_planes))
        << "case " << iter << " uint8 planes " << out_w << "x" << out_h;
    ASSERT_TRUE(KernelsAgree<float>(rs, img, ax, ay, planes))
        << "case " << iter << " filter " << InterpolationName(filter) << " " << out_w << "x"
        << out_h;
  }
}

// An axis at scale 1 (a padding, a crop, a flip) or a nearest one copies its source pixels
// instead of filtering them (AxisCoeffs::copies), every filter's levels being those pixels
// exactly, in every dtype and layout as the scalar kernels store them.
TEST(Resampler, ScaleOneAxesCopyTheirPixelsExactly) {
  const RgbImage img = testing::MakeTexture(97, 61, 3);
  Resampler rs;
  OutputFormat hwc;
  hwc.layout = Layout::kHWC;
  OutputFormat planes;
  planes.dtype = DType::kFloat32;
  for (int c = 0; c < 3; ++c) planes.scale[c] = 1.0f / (255.0f - c);
  struct Case {
    double x0, x1, y0, y1;
    int out_w, out_h;
  };
  // Padded around (a zoom-out canvas), mirrored both ways, cropped, padded on one side.
  const Case cases[] = {{-20, 120, -7, 80, 140, 87}, {120, -20, 80, -7, 140, 87},
                        {10, 60, 5, 40, 50, 35}, {-3, 97, 0, 61, 100, 61}};
  for (Interpolation filter : {Interpolation::kBilinear, Interpolation::kBicubic, Interpolation::kLanczos,
                               Interpolation::kBox, Interpolation::kHamming, Interpolation::kNearest}) {
    for (const Case& k : cases) {
      AxisMapping ax{k.x0, k.x1, 0, 97, k.out_w, filter}, ay{k.y0, k.y1, 0, 61, k.out_h, filter};
      AxisCoeffs xc, yc;
      xc.Compute(ax, 97);
      yc.Compute(ay, 61);
      ASSERT_TRUE(xc.copies() && yc.copies()) << InterpolationName(filter) << " " << k.x0;
      std::vector<uint8_t> got(static_cast<size_t>(k.out_w) * k.out_h * 3);
      rs.Resample(img.pixels.data(), 97 * 3, 3, 97, 61, ax, ay, hwc, got.data());
      for (int y = 0; y < k.out_h; ++y) {
        const int sy = k.y1 < k.y0 ? static_cast<int>(k.y0) - 1 - y : static_cast<int>(k.y0) + y;
        for (int x = 0; x < k.out_w; ++x) {
          const int sx = k.x1 < k.x0 ? static_cast<int>(k.x0) - 1 - x : static_cast<int>(k.x0) + x;
          const bool inside = sx >= 0 && sx < 97 && sy >= 0 && sy < 61;
          for (int c = 0; c < 3; ++c) {
            const uint8_t want = inside ? img.pixels[(static_cast<size_t>(sy) * 97 + sx) * 3 + c] : 0;
            ASSERT_EQ(got[(static_cast<size_t>(y) * k.out_w + x) * 3 + c], want)
                << InterpolationName(filter) << " case " << k.x0 << " at " << x << "," << y;
          }
        }
      }
      ASSERT_TRUE(KernelsAgree<float>(rs, img, ax, ay, planes)) << InterpolationName(filter);
    }
  }
  // A fractional offset at scale 1 filters (bilinear: two taps) as before.
  AxisCoeffs half;
  half.Compute(AxisMapping{0.5, 90.5, 0, 97, 90}, 97);
  EXPECT_FALSE(half.copies());
}

TEST(Resampler, IdentityAndConstantImages) {
  const RgbImage img = testing::MakeTexture(64, 48, 1);
  Resampler rs;
  OutputFormat hwc;
  hwc.layout = Layout::kHWC;
  std::vector<uint8_t> out(64 * 48 * 3);
  AxisMapping ax{0, 64, 0, 64, 64}, ay{0, 48, 0, 48, 48};
  rs.Resample(img.pixels.data(), 64 * 3, 3, 64, 48, ax, ay, hwc, out.data());
  EXPECT_EQ(out, img.pixels);
  // Any resampling of a constant image is that constant (weights are normalised).
  const std::vector<uint8_t> flat(64 * 48 * 3, 173);
  std::vector<uint8_t> small(17 * 13 * 3);
  AxisMapping sx{3.5, 60.25, 0, 64, 17}, sy{40, 2, 0, 48, 13};  // mirrored vertical too
  rs.Resample(flat.data(), 64 * 3, 3, 64, 48, sx, sy, hwc, small.data());
  for (uint8_t v : small) ASSERT_EQ(v, 173);
}

// ---------------------------------------------------------------------------------------------
// Output dtypes and layouts.

TEST(Resampler, DTypesAndLayoutsHoldTheSameValues) {
  const RgbImage img = testing::MakeTexture(200, 150, 11);
  const TransformPipeline norm = MustCreate(
      {Rrc(40), ToTensor(), Normalize(kMean, kStd)}, DType::kFloat32, Layout::kCHW);
  SampleRng rng(5);
  const SampleGeometry g = norm.Plan(200, 150, rng);
  AxisMapping ax, ay;
  GeometryToAxes(g, 1.0, 200, 150, &ax, &ay);
  Resampler rs;
  constexpr int kN = 40 * 40 * 3;

  OutputFormat u8_hwc;
  u8_hwc.layout = Layout::kHWC;
  std::vector<uint8_t> levels(kN);
  rs.Resample(img.pixels.data(), 600, 3, 200, 150, ax, ay, u8_hwc, levels.data());

  OutputFormat u8_chw;
  std::vector<uint8_t> chw(kN);
  rs.Resample(img.pixels.data(), 600, 3, 200, 150, ax, ay, u8_chw, chw.data());
  for (int y = 0; y < 40; ++y) {
    for (int x = 0; x < 40; ++x) {
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(chw[(c * 40 + y) * 40 + x], levels[(y * 40 + x) * 3 + c]);
      }
    }
  }

  const OutputFormat f = OutputFormat::FromPipeline(norm);
  for (Layout layout : {Layout::kCHW, Layout::kHWC}) {
    OutputFormat f32 = f, f16 = f, bf16 = f;
    f32.layout = f16.layout = bf16.layout = layout;
    f16.dtype = DType::kFloat16;
    bf16.dtype = DType::kBFloat16;
    std::vector<float> o32(kN);
    std::vector<uint16_t> o16(kN), ob16(kN);
    rs.Resample(img.pixels.data(), 600, 3, 200, 150, ax, ay, f32, o32.data());
    rs.Resample(img.pixels.data(), 600, 3, 200, 150, ax, ay, f16, o16.data());
    rs.Resample(img.pixels.data(), 600, 3, 200, 150, ax, ay, bf16, ob16.data());
    for (int y = 0; y < 40; ++y) {
      for (int x = 0; x < 40; ++x) {
        for (int c = 0; c < 3; ++c) {
          const int level = levels[(y * 40 + x) * 3 + c];
          const size_t i = layout == Layout::kHWC ? (y * 40 + x) * 3 + c : (c * 40 + y) * 40 + x;
          // torchvision's float32 operations: ConvertImageDtype, then Normalize's sub_ and div_.
          const float unit = static_cast<float>(level) / 255.0f;
          const float centred = unit - kMean[c];
          const float expected = centred / kStd[c];
          ASSERT_EQ(o32[i], expected);
          ASSERT_EQ(o16[i], FloatToHalf(o32[i]));
          ASSERT_EQ(ob16[i], FloatToBFloat16(o32[i]));
          ASSERT_NEAR(HalfToFloat(o16[i]), expected, 2.5e-3);     // 11-bit significand
          ASSERT_NEAR(BFloat16ToFloat(ob16[i]), expected, 1.6e-2);  // 8-bit significand
        }
      }
    }
  }

  // ToTensor alone: level / 255.
  const TransformPipeline unit = MustCreate({Rrc(40), ToTensor()}, DType::kFloat32);
  std::vector<float> o(kN);
  OutputFormat uf = OutputFormat::FromPipeline(unit);
  uf.layout = Layout::kHWC;
  rs.Resample(img.pixels.data(), 600, 3, 200, 150, ax, ay, uf, o.data());
  for (int i = 0; i < kN; ++i) ASSERT_EQ(o[i], levels[i] / 255.0f);
  // v2's ToDtype(float32, scale=True) multiplies by float(1/255), which differs in the last bit.
  ToTensorParams to_dtype;
  to_dtype.by_reciprocal = true;
  const TransformPipeline v2_unit = MustCreate({Rrc(40), to_dtype}, DType::kFloat32);
  uf = OutputFormat::FromPipeline(v2_unit);
  uf.layout = Layout::kHWC;
  rs.Resample(img.pixels.data(), 600, 3, 200, 150, ax, ay, uf, o.data());
  for (int i = 0; i < kN; ++i) ASSERT_EQ(o[i], levels[i] * static_cast<float>(1.0 / 255.0));
  int differ = 0;
  for (int level = 0; level < 256; ++level) {
    differ += v2_unit.values()[level] != unit.values()[level];
  }
  EXPECT_GT(differ, 50);
}

TEST(HalfConversion, RoundsToNearestEven) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // halfway to the next power: rounds to inf
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);         // tie -> even (0)
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);         // tie -> even (2)
  EXPECT_EQ(FloatToHalf(std::ldexp(1023.5f, -24)), 0x0400);      // carries into normal
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
  // Every finite half survives a round trip through float.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;
    ASSERT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))), h) << h;
  }
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie -> even
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(3.0f, -8)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -9)), 0x3f80);  // below half
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
}


// After ToImage, v2 resizes the uint8 tensor with torch's antialiased bilinear kernel
// (TensorResize, the video clips' kernel, checked against torch there). A resize step with
// `tensor` set runs it inside the fused resample: with crops before and after it, a flip before
// it, padding and upscaling, the output equals TensorResize of the cropped (mirrored) image,
// cropped after; Pillow's arithmetic (the same steps without `tensor`) differs on these images.
TEST(TransformPipelinePlan, TensorBilinearIsTorchsKernel) {
  struct Case {
    int w, h;
    std::vector<TransformStep> steps;
    int top, left, crop_h, crop_w;  // the box the resize reads
    bool mirror;                    // a flip before the resize
    int resized_h, resized_w;
    int out_top, out_left, out_h, out_w;  // the output's window of the resized image
  };
  const auto tensor = [](TransformStep step) {
    if (step.kind() == Kind::kResize) step.get<ResizeParams>().tensor = true;
    return step;
  };
  const std::vector<Case> cases = {
      {203, 278, {tensor(ResizeHW(50, 70))}, 0, 0, 278, 203, false, 50, 70, 0, 0, 50, 70},
      // Pillow runs the vertical pass first here (278 - 50 > 2 * (120 - 72)); torch never does.
      {120, 360, {tensor(Resize(72)), CenterCrop(64, 64)}, 0, 0, 360, 120, false, 216, 72, 76, 4, 64, 64},
      {203, 278, {CenterCrop(100, 90), tensor(ResizeHW(48, 40))}, 89, 56, 100, 90, false, 48, 40, 0, 0, 48, 40},
      {203, 278, {Flip(1.0), tensor(ResizeHW(50, 70))}, 0, 0, 278, 203, true, 50, 70, 0, 0, 50, 70},
      {50, 41, {tensor(ResizeHW(130, 90))}, 0, 0, 41, 50, false, 130, 90, 0, 0, 130, 90},
      // A centre crop larger than the resized image: zero padding around it.
      {50, 41, {tensor(Resize(30)), CenterCrop(40, 40)}, 0, 0, 41, 50, false, 30, 36, -5, -2, 40, 40},
  };
  for (size_t n = 0; n < cases.size(); ++n) {
    const Case& c = cases[n];
    const RgbImage img = testing::MakeTexture(c.w, c.h, static_cast<uint32_t>(11 + n));
    // The reference: the box as planes (mirrored when flipped first), TensorResize, the window.
    std::vector<uint8_t> planes(static_cast<size_t>(3) * c.crop_h * c.crop_w);
    for (int ch = 0; ch < 3; ++ch) {
      for (int y = 0; y < c.crop_h; ++y) {
        for (int x = 0; x < c.crop_w; ++x) {
          const int sx = c.mirror ? c.w - 1 - (c.left + x) : c.left + x;
          planes[(static_cast<size_t>(ch) * c.crop_h + y) * c.crop_w + x] =
              img.pixels[(static_cast<size_t>(c.top + y) * c.w + sx) * 3 + ch];
        }
      }
    }
    std::vector<uint8_t> resized(static_cast<size_t>(3) * c.resized_h * c.resized_w);
    TensorResizeScratch scratch;
    TensorResize(planes.data(), 3, c.crop_h, c.crop_w, c.crop_w,
                 static_cast<ptrdiff_t>(c.crop_h) * c.crop_w, c.resized_h, c.resized_w,
                 resized.data(), scratch);
    const auto render = [&](const std::vector<TransformStep>& steps) {
      const TransformPipeline p = MustCreate(steps);
      SampleRng rng(1);
      const SampleGeometry g = p.Plan(c.w, c.h, rng);
      std::vector<uint8_t> out(static_cast<size_t>(g.out_w) * g.out_h * 3);
      Resampler rs;
      AxisMapping ax, ay;
      GeometryToAxes(g, 1.0, c.w, c.h, &ax, &ay);
      OutputFormat chw;  // uint8 CHW, as the tensor
      rs.Resample(img.pixels.data(), static_cast<size_t>(c.w) * 3, 3, c.w, c.h, ax, ay, chw, out.data());
      return out;
    };
    const std::vector<uint8_t> got = render(c.steps);
    ASSERT_EQ(got.size(), static_cast<size_t>(3) * c.out_h * c.out_w) << n;
    for (int ch = 0; ch < 3; ++ch) {
      for (int y = 0; y < c.out_h; ++y) {
        for (int x = 0; x < c.out_w; ++x) {
          const int ry = c.out_top + y, rx = c.out_left + x;
          const bool inside = ry >= 0 && ry < c.resized_h && rx >= 0 && rx < c.resized_w;
          const uint8_t want =
              inside ? resized[(static_cast<size_t>(ch) * c.resized_h + ry) * c.resized_w + rx] : 0;
          ASSERT_EQ(got[(static_cast<size_t>(ch) * c.out_h + y) * c.out_w + x], want)
              << "case " << n << " channel " << ch << " at " << x << "," << y;
        }
      }
    }
    std::vector<TransformStep> pillow = c.steps;
    for (TransformStep& step : pillow) {
      if (step.kind() == Kind::kResize) step.get<ResizeParams>().tensor = false;
    }
    EXPECT_NE(render(pillow), got) << "case " << n << ": Pillow's arithmetic gives the same here";
  }
}

// The kernel's pass order follows the mapping: Pillow's for its filters, the horizontal pass
// first for torch's; and torch's kernel on a tensor with another filter is refused.
TEST(TransformPipelinePlan, TensorResizeOrderAndFilters) {
  AxisMapping x, y;
  x.begin = 0, x.end = 120, x.clip_lo = 0, x.clip_hi = 120, x.out_size = 72;
  y.begin = 0, y.end = 360, y.clip_lo = 0, y.clip_hi = 360, y.out_size = 64;
  AxisCoeffs xc, yc;
  xc.Compute(x, 120);
  yc.Compute(y, 360);
  EXPECT_TRUE(ResizesVerticallyFirst(x, xc, yc));
  x.tensor_taps = y.tensor_taps = true;
  xc.Compute(x, 120);
  yc.Compute(y, 360);
  EXPECT_FALSE(ResizesVerticallyFirst(x, xc, yc));
  TransformStep on_tensor = ResizeHW(50, 70);
  on_tensor.get<ResizeParams>().tensor = true;
  EXPECT_NE(MustCreate({on_tensor}).Describe().find("Resize(50x70, tensor)"), std::string::npos)
      << MustCreate({on_tensor}).Describe();
  TransformStep lanczos = Resize(64);
  lanczos.get<ResizeParams>().interpolation = Interpolation::kLanczos;
  lanczos.get<ResizeParams>().tensor = true;
  const absl::StatusOr<TransformPipeline> refused =
      TransformPipeline::Create({lanczos}, DType::kUint8, Layout::kCHW);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(
                "tensor=True needs interpolation bilinear, bicubic or nearest"),
            std::string_view::npos)
      << refused.status();
}

}  // namespace
}  // namespace ringloader
