// StepKinds(): one row per transform step kind (its parameter struct, binding key, torchvision
// name, stage, parameter keys) and the kinds' parse, describe and check functions, which the
// rows point to. The image-stage functions of the rows are defined in augment.cc (and augmix.cc,
// photometric.cc).

#include "transform/image_transform.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "transform/augment.h"
#include "transform/image_ops.h"
#include "transform/photometric.h"

namespace ringloader {
namespace {

using Kind = TransformStep::Kind;

std::string FormatFloats(const float* v) {
  return absl::StrFormat("%g, %g, %g", v[0], v[1], v[2]);
}

/// The size of the kinds that have one.
template <typename P>
void ReadSize(StepParamReader& r, P* s) {
  r.Int("size_h", &s->size_h);
  r.Int("size_w", &s->size_w);
}

template <typename P>
absl::Status ReadProbability(StepParamReader& r, P* s) {
  r.Double("p", &s->p);
  return absl::OkStatus();
}

absl::Status ReadInterpolation(StepParamReader& r, Interpolation* out) {
  static const std::pair<const char*, Interpolation> kNames[] = {
      {"nearest", Interpolation::kNearest}, {"bilinear", Interpolation::kBilinear},
      {"bicubic", Interpolation::kBicubic}, {"lanczos", Interpolation::kLanczos},
      {"box", Interpolation::kBox},         {"hamming", Interpolation::kHamming}};
  std::string name;
  if (!r.String("interpolation", &name)) return absl::OkStatus();
  for (const auto& [n, v] : kNames) {
    if (name == n) {
      *out = v;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown interpolation '", name, "'"));
}

/// One value for all three channels, or one per channel.
absl::Status ReadChannels(StepParamReader& r, const char* key, float out[3],
                          const std::string& error) {
  std::vector<float> values;
  if (!r.Floats(key, &values)) return absl::OkStatus();
  if (values.size() == 1) values.assign(3, values[0]);
  if (values.size() != 3) return absl::InvalidArgumentError(error);
  std::copy(values.begin(), values.end(), out);
  return absl::OkStatus();
}

absl::Status ReadFill(StepParamReader& r, float fill[3]) {
  return ReadChannels(r, "fill", fill, "fill needs 1 or 3 values");
}

absl::Status ReadPadding(StepParamReader& r, PaddingParams* s) {
  std::vector<int> pad;
  if (r.Ints("pad", &pad)) {
    if (pad.size() != 4) return absl::InvalidArgumentError("pad needs (left, top, right, bottom)");
    std::copy(pad.begin(), pad.end(), s->pad);
  }
  std::string mode;
  if (r.String("pad_mode", &mode)) {
    static const std::pair<const char*, PadMode> kModes[] = {{"constant", PadMode::kConstant},
                                                             {"edge", PadMode::kEdge},
                                                             {"reflect", PadMode::kReflect},
                                                             {"symmetric", PadMode::kSymmetric}};
    const auto* it = std::find_if(std::begin(kModes), std::end(kModes),
                                  [&](const auto& m) { return mode == m.first; });
    if (it == std::end(kModes)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown padding_mode '", mode, "'"));
    }
    s->pad_mode = it->second;
  }
  return ReadFill(r, s->fill);
}

/// Reads "ranges" into ranges that a None leaves as they are (torchvision requires them).
absl::Status ReadRequiredRanges(StepParamReader& r, std::initializer_list<Range*> slots) {
  std::optional<Range> read[2];
  std::optional<Range>* named[2] = {&read[0], &read[1]};
  if (absl::Status status = ReadRanges(r, std::span(named, slots.size())); !status.ok()) {
    return status;
  }
  size_t i = 0;
  for (Range* slot : slots) {
    if (read[i]) *slot = *read[i];
    ++i;
  }
  return absl::OkStatus();
}

/// Pad, or v2's RandomZoomOut ("zoom_out": its side_range, with "p").
absl::Status ParsePad(StepParamReader& r, PadParams* s) {
  double pair[2];
  if (r.Pair("zoom_out", pair)) s->zoom_out = Range{pair[0], pair[1]};
  r.Double("p", &s->p);
  return ReadPadding(r, s);
}

std::string DescribePad(const PadParams& s) {
  if (!s.zoom_out) return "Pad";
  return absl::StrCat("RandomZoomOut(", s.zoom_out->lo, "..", s.zoom_out->hi, ", p=", s.p, ")");
}

absl::Status ParseResize(StepParamReader& r, ResizeParams* s) {
  r.Int("max_size", &s->max_size);
  r.Int("size_max", &s->size_max);
  r.Ints("size_choices", &s->size_choices);
  double pair[2];
  if (r.Pair("scale_jitter", pair)) s->scale_jitter = Range{pair[0], pair[1]};
  r.Bool("tensor", &s->tensor);
  ReadSize(r, s);
  return ReadInterpolation(r, &s->interpolation);
}

absl::Status ParseCenterCrop(StepParamReader& r, CenterCropParams* s) {
  ReadSize(r, s);
  return absl::OkStatus();
}

absl::Status ParseRandomResizedCrop(StepParamReader& r, RandomResizedCropParams* s) {
  double pair[2];
  if (r.Pair("scale", pair)) std::tie(s->scale_min, s->scale_max) = std::pair(pair[0], pair[1]);
  if (r.Pair("ratio", pair)) std::tie(s->ratio_min, s->ratio_max) = std::pair(pair[0], pair[1]);
  r.Bool("tensor", &s->tensor);
  ReadSize(r, s);
  return ReadInterpolation(r, &s->interpolation);
}

absl::Status ParseToTensor(StepParamReader& r, ToTensorParams* s) {
  r.Bool("by_reciprocal", &s->by_reciprocal);
  return absl::OkStatus();
}

absl::Status ParseNormalize(StepParamReader& r, NormalizeParams* s) {
  if (absl::Status st = ReadChannels(r, "mean", s->mean, "Normalize mean needs 1 or 3 values");
      !st.ok()) {
    return st;
  }
  return ReadChannels(r, "std", s->std, "Normalize std needs 1 or 3 values");
}

absl::Status ParseRandomCrop(StepParamReader& r, RandomCropParams* s) {
  r.Bool("pad_if_needed", &s->pad_if_needed);
  ReadSize(r, s);
  return ReadPadding(r, s);
}

absl::Status ParseBlur(StepParamReader& r, GaussianBlurParams* s) {
  ReadSize(r, s);
  return ReadRequiredRanges(r, {&s->sigma});
}

/// What RandomRotation and RandomAffine read after their ranges.
absl::Status ReadRotation(StepParamReader& r, RotationParams* s) {
  if (absl::Status status = ReadInterpolation(r, &s->interpolation); !status.ok()) return status;
  return ReadFill(r, s->fill);
}

/// The centre, or none for None.
void ReadCenter(StepParamReader& r, RotationParams* s) {
  double center[2];
  if (r.OptionalPair("center", center)) s->center = std::array<double, 2>{center[0], center[1]};
}

absl::Status ParseRotation(StepParamReader& r, RandomRotationParams* s) {
  ReadCenter(r, s);
  if (absl::Status status = ReadRequiredRanges(r, {&s->degrees}); !status.ok()) return status;
  return ReadRotation(r, s);
}

/// "ranges": degrees, translate (the max fractions x, y), scale, shear x, shear y.
absl::Status ParseAffine(StepParamReader& r, RandomAffineParams* s) {
  ReadCenter(r, s);
  std::optional<Range> degrees;
  std::optional<Range>* named[] = {&degrees, &s->translate, &s->scale, &s->shear_x, &s->shear_y};
  if (absl::Status status = ReadRanges(r, named); !status.ok()) return status;
  if (degrees) s->degrees = *degrees;
  return ReadRotation(r, s);
}

absl::Status ParseAugOp(StepParamReader& r, AugOpParams* s) {
  std::string op;
  if (r.String("op", &op) && !AugOpFromName(op, &s->aug_op)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown augmentation op '", op, "'"));
  }
  r.Double("magnitude", &s->magnitude);
  r.Double("p", &s->p);
  if (absl::Status status = ReadInterpolation(r, &s->interpolation); !status.ok()) return status;
  return ReadFill(r, s->fill);
}

/// The torchvision policies' common part (RandAugment, TrivialAugmentWide, AutoAugment).
absl::Status ReadPolicy(StepParamReader& r, PolicyParams* s) {
  r.Bool("v2_magnitudes", &s->v2_magnitudes);
  if (absl::Status status = ReadInterpolation(r, &s->interpolation); !status.ok()) return status;
  return ReadFill(r, s->fill);
}

absl::Status ParseRandAugment(StepParamReader& r, RandAugmentParams* s) {
  r.Int("num_ops", &s->num_ops);
  r.Double("magnitude", &s->magnitude);
  r.Int("num_bins", &s->num_bins);
  return ReadPolicy(r, s);
}

absl::Status ParseTrivialAugmentWide(StepParamReader& r, TrivialAugmentWideParams* s) {
  r.Int("num_bins", &s->num_bins);
  return ReadPolicy(r, s);
}

absl::Status ParseAutoAugment(StepParamReader& r, AutoAugmentParams* s) {
  r.Int("policy", &s->policy);
  return ReadPolicy(r, s);
}

absl::Status ParseTimmRandAugment(StepParamReader& r, TimmRandAugmentParams* s) {
  std::vector<std::string> names;
  if (r.Strings("timm_ops", &names)) {
    if (names.size() > std::size(s->timm_ops)) {
      return absl::InvalidArgumentError("too many timm ops");
    }
    for (const std::string& name : names) {
      const int code = TimmOpFromName(name.c_str());
      if (code < 0) return absl::InvalidArgumentError(absl::StrCat("unknown timm op '", name, "'"));
      s->timm_ops[s->timm_op_count++] = code;
    }
  }
  r.Int("num_ops", &s->num_ops);
  r.Double("magnitude", &s->magnitude);
  r.Double("magnitude_std", &s->magnitude_std);
  r.Double("magnitude_max", &s->magnitude_max);
  r.Double("translate_pct", &s->translate_pct);
  r.Double("translate_const", &s->translate_const);
  r.Bool("random_interpolation", &s->random_interpolation);
  r.Double("p", &s->p);
  if (absl::Status status = ReadInterpolation(r, &s->interpolation); !status.ok()) return status;
  return ReadFill(r, s->fill);
}

/// "ranges": the area fraction, the aspect ratio.
absl::Status ParseRandomErasing(StepParamReader& r, RandomErasingParams* s) {
  r.Int("erase_mode", &s->erase_mode);
  r.Bool("timm_erasing", &s->timm_erasing);
  r.Int("erase_count", &s->erase_count);
  r.Double("p", &s->p);
  if (absl::Status status = ReadRequiredRanges(r, {&s->scale, &s->ratio}); !status.ok()) {
    return status;
  }
  return ReadFill(r, s->fill);
}

absl::Status ParseRandomApply(StepParamReader& r, RandomApplyParams* s) {
  r.Int("num_steps", &s->apply_steps);
  return ReadProbability(r, s);
}

absl::Status ParseAugMix(StepParamReader& r, AugMixParams* s) {
  r.Int("severity", &s->severity);
  r.Int("mixture_width", &s->width);
  r.Int("chain_depth", &s->depth);
  r.Double("alpha", &s->alpha);
  r.Bool("all_ops", &s->all_ops);
  r.Bool("v2_magnitudes", &s->v2_magnitudes);
  r.Bool("fused_grid", &s->fused_grid);
  return ReadInterpolation(r, &s->interpolation);
}

/// ", bicubic" before the closing parenthesis of a resize that does not use the default filter.
std::string WithFilter(std::string d, Interpolation interpolation, bool tensor = false) {
  if (interpolation != Interpolation::kBilinear) {
    absl::StrAppend(&d, ", ", InterpolationName(interpolation));
  }
  return d + (tensor ? ", tensor)" : ")");
}

std::string DescribeResize(const ResizeParams& s) {
  const Interpolation f = s.interpolation;
  if (s.scale_jitter) {
    return WithFilter(absl::StrCat("ScaleJitter(", s.size_h, "x", s.size_w, ", scale ",
                                   s.scale_jitter->lo, "..", s.scale_jitter->hi), f, s.tensor);
  }
  if (!s.size_choices.empty()) {
    std::string d = absl::StrCat("RandomShortestSize(", absl::StrJoin(s.size_choices, "|"));
    if (s.max_size > 0) absl::StrAppend(&d, ", max_size=", s.max_size);
    return WithFilter(d, f, s.tensor);
  }
  if (s.size_max > 0) {
    return WithFilter(absl::StrCat("RandomResize(", s.size_h, "..", s.size_max - 1), f, s.tensor);
  }
  if (s.size_w > 0) return WithFilter(absl::StrCat("Resize(", s.size_h, "x", s.size_w), f, s.tensor);
  if (s.max_size > 0) {
    return WithFilter(absl::StrCat("Resize(", s.size_h, ", max_size=", s.max_size), f, s.tensor);
  }
  return WithFilter(absl::StrCat("Resize(", s.size_h), f, s.tensor);
}

std::string DescribeCenterCrop(const CenterCropParams& s) {
  return absl::StrCat("CenterCrop(", s.size_h, "x", s.size_w, ")");
}

std::string DescribeRandomResizedCrop(const RandomResizedCropParams& s) {
  std::string d = absl::StrCat("RandomResizedCrop(", s.size_h, "x", s.size_w);
  if (s.scale_min != 0.08 || s.scale_max != 1.0) {
    absl::StrAppendFormat(&d, ", scale=(%g, %g)", s.scale_min, s.scale_max);
  }
  if (s.ratio_min != 3.0 / 4.0 || s.ratio_max != 4.0 / 3.0) {
    absl::StrAppendFormat(&d, ", ratio=(%g, %g)", s.ratio_min, s.ratio_max);
  }
  return WithFilter(std::move(d), s.interpolation, s.tensor);
}

std::string DescribeHorizontalFlip(const HorizontalFlipParams& s) {
  return absl::StrFormat("Flip(%g)", s.p);
}

std::string DescribeNormalize(const NormalizeParams& s) {
  return absl::StrCat("Normalize(mean=(", FormatFloats(s.mean), "), std=(", FormatFloats(s.std),
                      "))");
}

std::string DescribeVerticalFlip(const VerticalFlipParams& s) {
  return absl::StrFormat("VFlip(%g)", s.p);
}

std::string DescribeRandomCrop(const RandomCropParams& s) {
  return absl::StrCat("RandomCrop(", s.size_h, "x", s.size_w, ")");
}

std::string DescribeAugOp(const AugOpParams& s) {
  return absl::StrFormat("AugOp(%d, %g, p=%g)", static_cast<int>(s.aug_op), s.magnitude, s.p);
}

std::string DescribeRandAugment(const RandAugmentParams& s) {
  return absl::StrFormat("RandAugment(%d, %g)", s.num_ops, s.magnitude);
}

std::string DescribeRandomApply(const RandomApplyParams& s) {
  return absl::StrFormat("RandomApply(p=%g, %d step%s)", s.p, s.apply_steps,
                         s.apply_steps == 1 ? "" : "s");
}

std::string DescribeTimmRandAugment(const TimmRandAugmentParams& s) {
  return absl::StrFormat("timm RandAugment(m%g, n%d, mstd%g, %d ops)", s.magnitude, s.num_ops,
                         s.magnitude_std, s.timm_op_count);
}

// ---- Create's value checks of each kind ("" when valid) -----------------------------------

bool ValidRange(const Range& r, double lo, double hi) {
  return std::isfinite(r.lo) && std::isfinite(r.hi) && r.lo <= r.hi && r.lo >= lo && r.hi <= hi;
}

template <typename P>
std::string CheckProbability(const P& s) {
  return s.p >= 0.0 && s.p <= 1.0 ? "" : "p must be in [0, 1]";
}

std::string CheckPadding(const PaddingParams& s, bool crop) {
  for (int v : s.pad) {
    if (v < 0 && crop) return "padding must be >= 0";
    if (v < 0 && s.pad_mode != PadMode::kConstant) {
      return "negative padding is only supported with padding_mode='constant'";
    }
  }
  return "";
}

std::string CheckRandomCrop(const RandomCropParams& s) {
  if (s.size_w == 0) return "size must be > 0";
  return CheckPadding(s, /*crop=*/true);
}

std::string CheckPad(const PadParams& s) { return CheckPadding(s, /*crop=*/false); }

std::string CheckColorJitter(const ColorJitterParams& s) {
  for (const std::optional<Range>* factor : {&s.brightness, &s.contrast, &s.saturation}) {
    if (*factor && !ValidRange(**factor, 0.0, 1e9)) {
      return "brightness, contrast and saturation ranges must satisfy 0 <= min <= max";
    }
  }
  if (s.hue && !ValidRange(*s.hue, -0.5, 0.5)) {
    return "hue range must lie in [-0.5, 0.5] with min <= max";
  }
  return "";
}

std::string CheckRandomErasing(const RandomErasingParams& s) {
  if (std::string bad = CheckProbability(s); !bad.empty()) return bad;
  if (!ValidRange(s.scale, 0.0, 1.0)) return "scale must satisfy 0 <= min <= max <= 1";
  if (!(s.ratio.lo > 0 && s.ratio.lo <= s.ratio.hi)) return "ratio must satisfy 0 < min <= max";
  if (s.erase_count < 1) return "max_count must be >= 1";
  return "";
}

std::string CheckRotation(const RandomRotationParams& s) {
  return ValidRange(s.degrees, -1e6, 1e6) ? "" : "degrees must be finite with min <= max";
}

std::string CheckRandomAffine(const RandomAffineParams& s) {
  if (!ValidRange(s.degrees, -1e6, 1e6)) return "degrees must be finite with min <= max";
  if (const std::optional<Range>& t = s.translate;
      t && !(t->lo >= 0 && t->lo <= 1 && t->hi >= 0 && t->hi <= 1)) {
    return "translate values must be in [0, 1]";
  }
  if (s.scale && !(ValidRange(*s.scale, 0.0, 1e6) && s.scale->lo > 0)) {
    return "scale must satisfy 0 < min <= max";
  }
  return "";
}

std::string CheckGaussianBlur(const GaussianBlurParams& s) {
  if (s.size_w <= 0 || s.size_h <= 0 || s.size_w % 2 == 0 || s.size_h % 2 == 0) {
    return "kernel size must be odd and positive";
  }
  if (!(s.sigma.lo > 0 && s.sigma.lo <= s.sigma.hi)) return "sigma must satisfy 0 < min <= max";
  return "";
}

std::string CheckRandAugment(const RandAugmentParams& s) {
  if (s.num_bins < 2) return "num_magnitude_bins must be >= 2";
  if (s.num_ops < 0 || s.magnitude < 0 || s.magnitude >= s.num_bins) {
    return "num_ops must be >= 0 and magnitude in [0, num_magnitude_bins)";
  }
  return "";
}

std::string CheckTrivialAugmentWide(const TrivialAugmentWideParams& s) {
  return s.num_bins >= 2 ? "" : "num_magnitude_bins must be >= 2";
}

std::string CheckAutoAugment(const AutoAugmentParams& s) {
  return s.policy >= 0 && s.policy <= 2 ? "" : "policy must be IMAGENET, CIFAR10 or SVHN";
}

std::string CheckTimmRandAugment(const TimmRandAugmentParams& s) {
  return s.num_ops >= 0 && s.magnitude >= 0 ? "" : "num_ops and magnitude must be >= 0";
}

std::string CheckRandomApply(const RandomApplyParams& s) {
  if (std::string bad = CheckProbability(s); !bad.empty()) return bad;
  return s.apply_steps >= 0 ? "" : "the number of guarded steps must be >= 0";
}

std::string CheckAugMix(const AugMixParams& s) {
  if (s.interpolation != Interpolation::kNearest && s.interpolation != Interpolation::kBilinear) {
    return "interpolation must be nearest or bilinear (AugMix runs torch's grid_sample)";
  }
  if (s.severity < 1 || s.severity > 10) return "severity must be in [1, 10]";
  if (s.width < 1 || s.width > 64) return "mixture_width must be in [1, 64]";
  if (s.depth > 64) return "chain_depth must be <= 64";
  return s.alpha > 0 && std::isfinite(s.alpha) ? "" : "alpha must be > 0";
}

/// Resize and RandomResizedCrop on a uint8 tensor: torch's kernels of the filters v2 runs on
/// uint8 natively and ringloader reproduces (tensor_resize.h; the nearest index rule).
template <typename P>
std::string CheckTensorFilter(const P& s) {
  if (!s.tensor || s.interpolation == Interpolation::kBilinear ||
      s.interpolation == Interpolation::kBicubic || s.interpolation == Interpolation::kNearest) {
    return "";
  }
  return absl::StrCat("tensor=True needs interpolation bilinear, bicubic or nearest (torch's ",
                      InterpolationName(s.interpolation), " on a tensor is not native)");
}

/// A kind's row from its parameter struct P and its functions, each of which takes P: the
/// row's parse/describe/apply_image/check get the step's P out of the variant and call them.
template <typename P, absl::Status (*kParse)(StepParamReader&, P*),
          std::string (*kDescribe)(const P&) = nullptr, ImageStepFn<P>* kApply = nullptr,
          std::string (*kCheck)(const P&) = nullptr>
StepKindInfo Row(const char* key, const char* name, StepStage stage, bool resizes,
                 std::vector<std::string_view> params) {
  StepKindInfo info{P::kKind, key, name, stage, resizes, std::move(params),
                    nullptr,  nullptr, nullptr, nullptr};
  info.parse = [](StepParamReader& r, TransformStep* s) { return kParse(r, &s->get<P>()); };
  // Plain ifs, not if constexpr: under -fsanitize=undefined GCC does not take the address of a
  // function defined elsewhere as a constant expression (the sanitizer build failed on it).
  if (kDescribe != nullptr) {
    info.describe = [](const TransformStep& s) { return kDescribe(s.get<P>()); };
  }
  if (kApply != nullptr) {
    info.apply_image = [](const TransformStep& s, SampleRng& rng, AugmentScratch& scratch,
                          RgbView* img) { return kApply(s.get<P>(), rng, scratch, img); };
  }
  if (kCheck != nullptr) {
    info.check = [](const TransformStep& s) { return kCheck(s.get<P>()); };
  }
  return info;
}

}  // namespace

absl::Status ReadRanges(StepParamReader& r, std::span<std::optional<Range>* const> named) {
  std::vector<std::optional<std::array<double, 2>>> ranges;
  if (!r.Pairs("ranges", &ranges)) return absl::OkStatus();
  if (ranges.size() > named.size()) {
    return absl::InvalidArgumentError(absl::StrCat("at most ", named.size(), " parameter ranges"));
  }
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (ranges[i]) *named[i] = Range{(*ranges[i])[0], (*ranges[i])[1]};
  }
  return absl::OkStatus();
}

const std::vector<StepKindInfo>& StepKinds() {
  using S = StepStage;
  static const auto* kinds = new std::vector<StepKindInfo>{
      Row<ResizeParams, ParseResize, DescribeResize, nullptr, CheckTensorFilter<ResizeParams>>(
          "resize", "Resize", S::kGeometry, true,
          {"size_h", "size_w", "max_size", "size_max", "size_choices", "scale_jitter",
           "interpolation", "tensor"}),
      Row<CenterCropParams, ParseCenterCrop, DescribeCenterCrop, ApplyCenterCrop>(
          "center_crop", "CenterCrop", S::kGeometry, false, {"size_h", "size_w"}),
      Row<RandomResizedCropParams, ParseRandomResizedCrop, DescribeRandomResizedCrop, nullptr,
          CheckTensorFilter<RandomResizedCropParams>>(
          "random_resized_crop", "RandomResizedCrop", S::kGeometry, true,
          {"size_h", "size_w", "scale", "ratio", "interpolation", "tensor"}),
      Row<HorizontalFlipParams, ReadProbability, DescribeHorizontalFlip, ApplyHorizontalFlip>(
          "random_horizontal_flip", "RandomHorizontalFlip", S::kGeometry, false, {"p"}),
      Row<ToTensorParams, ParseToTensor>("to_tensor", "ToTensor", S::kOutput, false,
                                         {"by_reciprocal"}),
      Row<NormalizeParams, ParseNormalize, DescribeNormalize>("normalize", "Normalize",
                                                             S::kOutput, false, {"mean", "std"}),
      Row<VerticalFlipParams, ReadProbability, DescribeVerticalFlip, ApplyVerticalFlip,
          CheckProbability>(
          "random_vertical_flip", "RandomVerticalFlip", S::kGeometry, false, {"p"}),
      Row<RandomCropParams, ParseRandomCrop, DescribeRandomCrop, ApplyRandomCrop,
          CheckRandomCrop>(
          "random_crop", "RandomCrop", S::kCropPad, false,
          {"size_h", "size_w", "pad", "pad_if_needed", "fill", "pad_mode"}),
      Row<PadParams, ParsePad, DescribePad, ApplyPad, CheckPad>(
          "pad", "Pad", S::kCropPad, false, {"pad", "fill", "pad_mode", "zoom_out", "p"}),
      Row<ColorJitterParams, ParseColorJitter, DescribeColorJitter, ApplyColorJitterStep,
          CheckColorJitter>(
          "color_jitter", "ColorJitter", S::kImage, false, {"ranges", "photometric", "p"}),
      Row<GrayscaleParams, ReadProbability, nullptr, ApplyGrayscale, CheckProbability>(
          "grayscale", "Grayscale", S::kImage, false, {"p"}),
      Row<RandomRotationParams, ParseRotation, nullptr, ApplyRandomRotation, CheckRotation>(
          "random_rotation", "RandomRotation", S::kImage, false,
          {"ranges", "interpolation", "fill", "center"}),
      Row<RandomAffineParams, ParseAffine, nullptr, ApplyRandomAffine, CheckRandomAffine>(
          "random_affine", "RandomAffine", S::kImage, false,
          {"ranges", "interpolation", "fill", "center"}),
      Row<GaussianBlurParams, ParseBlur, nullptr, ApplyGaussianBlur, CheckGaussianBlur>(
          "gaussian_blur", "GaussianBlur", S::kImage, false, {"size_h", "size_w", "ranges"}),
      Row<AugOpParams, ParseAugOp, DescribeAugOp, ApplyAugOpStep, CheckProbability>(
          "aug_op", "AugOp", S::kImage, false, {"op", "magnitude", "p", "interpolation", "fill"}),
      Row<RandAugmentParams, ParseRandAugment, DescribeRandAugment, ApplyRandAugment,
          CheckRandAugment>(
          "rand_augment", "RandAugment", S::kImage, false,
          {"num_ops", "magnitude", "num_bins", "interpolation", "fill", "v2_magnitudes"}),
      Row<TrivialAugmentWideParams, ParseTrivialAugmentWide, nullptr, ApplyTrivialAugmentWide,
          CheckTrivialAugmentWide>(
          "trivial_augment_wide", "TrivialAugmentWide", S::kImage, false,
          {"num_bins", "interpolation", "fill", "v2_magnitudes"}),
      Row<AutoAugmentParams, ParseAutoAugment, nullptr, ApplyAutoAugment, CheckAutoAugment>(
          "auto_augment", "AutoAugment", S::kImage, false,
          {"policy", "interpolation", "fill", "v2_magnitudes"}),
      Row<TimmRandAugmentParams, ParseTimmRandAugment, DescribeTimmRandAugment,
          ApplyTimmRandAugment, CheckTimmRandAugment>(
          "timm_rand_augment", "timm's RandAugment", S::kImage, false,
          {"timm_ops", "num_ops", "p", "magnitude", "magnitude_std", "magnitude_max",
           "translate_pct", "translate_const", "fill", "interpolation", "random_interpolation"}),
      Row<RandomErasingParams, ParseRandomErasing, nullptr, nullptr, CheckRandomErasing>(
          "random_erasing", "RandomErasing", S::kOutput, false,
          {"p", "ranges", "fill", "erase_mode", "timm_erasing", "erase_count"}),
      // No image function of its own: ApplyImageSteps draws for it and skips the steps it
      // guards when the draw says so.
      Row<RandomApplyParams, ParseRandomApply, DescribeRandomApply, nullptr, CheckRandomApply>(
          "random_apply", "RandomApply", S::kImage, false, {"p", "num_steps"}),
      Row<AugMixParams, ParseAugMix, nullptr, ApplyAugMix, CheckAugMix>(
          "augmix", "AugMix", S::kImage, false,
          {"severity", "mixture_width", "chain_depth", "alpha", "all_ops", "interpolation",
           "v2_magnitudes", "fused_grid"}),
  };
  return *kinds;
}

bool StepKindInfo::Takes(std::string_view key) const {
  return std::find(params.begin(), params.end(), key) != params.end();
}

std::string StepKindInfo::ParamList() const {
  std::string list;
  for (std::string_view key : params) {
    if (!list.empty()) list += ' ';
    list.append(key);
  }
  return list;
}

const StepKindInfo& KindInfo(Kind kind) {
  // Rows are in Kind order (checked by image_transform_test).
  return StepKinds()[static_cast<size_t>(kind)];
}

const StepKindInfo* KindFromKey(std::string_view key) {
  for (const StepKindInfo& info : StepKinds()) {
    if (key == info.key) return &info;
  }
  return nullptr;
}

}  // namespace ringloader
