// StepKinds(): one row per transform step kind (its binding key, torchvision name, stage,
// parameter keys) and the kinds' parse and describe functions, which the rows point to. The
// image-stage functions of the rows are defined in augment.cc.

#include "transform/image_transform.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <optional>
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

absl::Status ReadSize(StepParamReader& r, TransformStep* s) {
  r.Int("size_h", &s->size_h);
  r.Int("size_w", &s->size_w);
  return absl::OkStatus();
}

absl::Status ReadProbability(StepParamReader& r, TransformStep* s) {
  r.Double("p", &s->p);
  return absl::OkStatus();
}

absl::Status ReadInterpolation(StepParamReader& r, TransformStep* s) {
  static const std::pair<const char*, Interpolation> kNames[] = {
      {"nearest", Interpolation::kNearest}, {"bilinear", Interpolation::kBilinear},
      {"bicubic", Interpolation::kBicubic}, {"lanczos", Interpolation::kLanczos},
      {"box", Interpolation::kBox},         {"hamming", Interpolation::kHamming}};
  std::string name;
  if (!r.String("interpolation", &name)) return absl::OkStatus();
  for (const auto& [n, v] : kNames) {
    if (name == n) {
      s->interpolation = v;
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

absl::Status ReadPadding(StepParamReader& r, TransformStep* s);
absl::Status ReadFill(StepParamReader& r, TransformStep* s);

/// Pad, or v2's RandomZoomOut ("zoom_out": its side_range, with "p").
absl::Status ParsePad(StepParamReader& r, TransformStep* s) {
  double pair[2];
  if (r.Pair("zoom_out", pair)) {
    s->zoom_out = true;
    std::tie(s->scale_min, s->scale_max) = std::pair(pair[0], pair[1]);
  }
  r.Double("p", &s->p);
  return ReadPadding(r, s);
}

std::string DescribePad(const TransformStep& s) {
  if (!s.zoom_out) return "Pad";
  return absl::StrCat("RandomZoomOut(", s.scale_min, "..", s.scale_max, ", p=", s.p, ")");
}

absl::Status ReadFill(StepParamReader& r, TransformStep* s) {
  return ReadChannels(r, "fill", s->fill, "fill needs 1 or 3 values");
}

absl::Status ReadPadding(StepParamReader& r, TransformStep* s) {
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
  return ReadFill(r, s);
}

/// The "ranges" list, in RangeSlot order; a None leaves its slot unset.
absl::Status ReadRanges(StepParamReader& r, TransformStep* s) {
  std::vector<std::optional<std::array<double, 2>>> ranges;
  if (!r.Pairs("ranges", &ranges)) return absl::OkStatus();
  if (ranges.size() > TransformStep::kRangeSlots) {
    return absl::InvalidArgumentError("at most 5 parameter ranges");
  }
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (!ranges[i]) continue;
    s->range[i][0] = (*ranges[i])[0];
    s->range[i][1] = (*ranges[i])[1];
    s->has_range[i] = true;
  }
  return absl::OkStatus();
}

/// Chains the readers of one kind, stopping at the first error.
template <typename... Readers>
absl::Status ReadAll(StepParamReader& r, TransformStep* s, Readers... readers) {
  absl::Status status;
  ((status.ok() ? status = readers(r, s) : status), ...);
  return status;
}

absl::Status ParseResize(StepParamReader& r, TransformStep* s) {
  r.Int("max_size", &s->max_size);
  r.Int("size_max", &s->size_max);
  r.Ints("size_choices", &s->size_choices);
  double pair[2];
  if (r.Pair("scale_jitter", pair)) {
    s->scale_jitter = true;
    std::tie(s->scale_min, s->scale_max) = std::pair(pair[0], pair[1]);
  }
  return ReadAll(r, s, ReadSize, ReadInterpolation);
}

absl::Status ParseRandomResizedCrop(StepParamReader& r, TransformStep* s) {
  double pair[2];
  if (r.Pair("scale", pair)) std::tie(s->scale_min, s->scale_max) = std::pair(pair[0], pair[1]);
  if (r.Pair("ratio", pair)) std::tie(s->ratio_min, s->ratio_max) = std::pair(pair[0], pair[1]);
  return ReadAll(r, s, ReadSize, ReadInterpolation);
}

absl::Status ParseToTensor(StepParamReader& r, TransformStep* s) {
  r.Bool("by_reciprocal", &s->by_reciprocal);
  return absl::OkStatus();
}

absl::Status ParseNormalize(StepParamReader& r, TransformStep* s) {
  if (absl::Status st = ReadChannels(r, "mean", s->mean, "Normalize mean needs 1 or 3 values");
      !st.ok()) {
    return st;
  }
  return ReadChannels(r, "std", s->std, "Normalize std needs 1 or 3 values");
}

absl::Status ParseRandomCrop(StepParamReader& r, TransformStep* s) {
  r.Bool("pad_if_needed", &s->pad_if_needed);
  return ReadAll(r, s, ReadSize, ReadPadding);
}

absl::Status ParseBlur(StepParamReader& r, TransformStep* s) {
  return ReadAll(r, s, ReadSize, ReadRanges);
}

/// RandomRotation and RandomAffine.
absl::Status ParseRotation(StepParamReader& r, TransformStep* s) {
  if (r.OptionalPair("center", s->center)) s->has_center = true;
  return ReadAll(r, s, ReadRanges, ReadInterpolation, ReadFill);
}

absl::Status ParseAugOp(StepParamReader& r, TransformStep* s) {
  std::string op;
  if (r.String("op", &op) && !AugOpFromName(op, &s->aug_op)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown augmentation op '", op, "'"));
  }
  r.Double("magnitude", &s->magnitude);
  return ReadAll(r, s, ReadProbability, ReadInterpolation, ReadFill);
}

/// The torchvision policies' common part (RandAugment, TrivialAugmentWide, AutoAugment).
absl::Status ReadPolicy(StepParamReader& r, TransformStep* s) {
  r.Bool("v2_magnitudes", &s->v2_magnitudes);
  return ReadAll(r, s, ReadInterpolation, ReadFill);
}

absl::Status ParseRandAugment(StepParamReader& r, TransformStep* s) {
  r.Int("num_ops", &s->num_ops);
  r.Double("magnitude", &s->magnitude);
  r.Int("num_bins", &s->num_bins);
  return ReadPolicy(r, s);
}

absl::Status ParseTrivialAugmentWide(StepParamReader& r, TransformStep* s) {
  r.Int("num_bins", &s->num_bins);
  return ReadPolicy(r, s);
}

absl::Status ParseAutoAugment(StepParamReader& r, TransformStep* s) {
  r.Int("policy", &s->policy);
  return ReadPolicy(r, s);
}

absl::Status ParseTimmRandAugment(StepParamReader& r, TransformStep* s) {
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
  return ReadAll(r, s, ReadProbability, ReadInterpolation, ReadFill);
}

absl::Status ParseRandomErasing(StepParamReader& r, TransformStep* s) {
  r.Int("erase_mode", &s->erase_mode);
  r.Bool("timm_erasing", &s->timm_erasing);
  r.Int("erase_count", &s->erase_count);
  return ReadAll(r, s, ReadProbability, ReadRanges, ReadFill);
}

absl::Status ParseRandomApply(StepParamReader& r, TransformStep* s) {
  r.Int("num_steps", &s->apply_steps);
  return ReadProbability(r, s);
}

absl::Status ParseAugMix(StepParamReader& r, TransformStep* s) {
  r.Int("severity", &s->augmix_severity);
  r.Int("mixture_width", &s->augmix_width);
  r.Int("chain_depth", &s->augmix_depth);
  r.Double("alpha", &s->augmix_alpha);
  r.Bool("all_ops", &s->augmix_all_ops);
  r.Bool("v2_magnitudes", &s->v2_magnitudes);
  return ReadInterpolation(r, s);
}

/// ", bicubic" before the closing parenthesis of a resize that does not use the default filter.
std::string WithFilter(std::string d, const TransformStep& s) {
  if (s.interpolation != Interpolation::kBilinear) {
    absl::StrAppend(&d, ", ", InterpolationName(s.interpolation));
  }
  return d + ")";
}

std::string DescribeResize(const TransformStep& s) {
  if (s.scale_jitter) {
    return WithFilter(absl::StrCat("ScaleJitter(", s.size_h, "x", s.size_w, ", scale ",
                                   s.scale_min, "..", s.scale_max), s);
  }
  if (!s.size_choices.empty()) {
    std::string d = absl::StrCat("RandomShortestSize(", absl::StrJoin(s.size_choices, "|"));
    if (s.max_size > 0) absl::StrAppend(&d, ", max_size=", s.max_size);
    return WithFilter(d, s);
  }
  if (s.size_max > 0) {
    return WithFilter(absl::StrCat("RandomResize(", s.size_h, "..", s.size_max - 1), s);
  }
  if (s.size_w > 0) return WithFilter(absl::StrCat("Resize(", s.size_h, "x", s.size_w), s);
  if (s.max_size > 0) {
    return WithFilter(absl::StrCat("Resize(", s.size_h, ", max_size=", s.max_size), s);
  }
  return WithFilter(absl::StrCat("Resize(", s.size_h), s);
}

std::string DescribeCenterCrop(const TransformStep& s) {
  return absl::StrCat("CenterCrop(", s.size_h, "x", s.size_w, ")");
}

std::string DescribeRandomResizedCrop(const TransformStep& s) {
  std::string d = absl::StrCat("RandomResizedCrop(", s.size_h, "x", s.size_w);
  if (s.scale_min != 0.08 || s.scale_max != 1.0) {
    absl::StrAppendFormat(&d, ", scale=(%g, %g)", s.scale_min, s.scale_max);
  }
  if (s.ratio_min != 3.0 / 4.0 || s.ratio_max != 4.0 / 3.0) {
    absl::StrAppendFormat(&d, ", ratio=(%g, %g)", s.ratio_min, s.ratio_max);
  }
  return WithFilter(std::move(d), s);
}

std::string DescribeHorizontalFlip(const TransformStep& s) {
  return absl::StrFormat("Flip(%g)", s.p);
}

std::string DescribeNormalize(const TransformStep& s) {
  return absl::StrCat("Normalize(mean=(", FormatFloats(s.mean), "), std=(", FormatFloats(s.std),
                      "))");
}

std::string DescribeVerticalFlip(const TransformStep& s) {
  return absl::StrFormat("VFlip(%g)", s.p);
}

std::string DescribeRandomCrop(const TransformStep& s) {
  return absl::StrCat("RandomCrop(", s.size_h, "x", s.size_w, ")");
}

std::string DescribeAugOp(const TransformStep& s) {
  return absl::StrFormat("AugOp(%d, %g, p=%g)", static_cast<int>(s.aug_op), s.magnitude, s.p);
}

std::string DescribeRandAugment(const TransformStep& s) {
  return absl::StrFormat("RandAugment(%d, %g)", s.num_ops, s.magnitude);
}

std::string DescribeRandomApply(const TransformStep& s) {
  return absl::StrFormat("RandomApply(p=%g, %d step%s)", s.p, s.apply_steps,
                         s.apply_steps == 1 ? "" : "s");
}

std::string DescribeTimmRandAugment(const TransformStep& s) {
  return absl::StrFormat("timm RandAugment(m%g, n%d, mstd%g, %d ops)", s.magnitude, s.num_ops,
                         s.magnitude_std, s.timm_op_count);
}

}  // namespace

const std::vector<StepKindInfo>& StepKinds() {
  using S = StepStage;
  static const auto* kinds = new std::vector<StepKindInfo>{
      {Kind::kResize, "resize", "Resize", S::kGeometry, true,
       "size_h size_w max_size size_max size_choices scale_jitter interpolation",
       ParseResize, DescribeResize, nullptr},
      {Kind::kCenterCrop, "center_crop", "CenterCrop", S::kGeometry, false,
       "size_h size_w",
       ReadSize, DescribeCenterCrop, ApplyCenterCrop},
      {Kind::kRandomResizedCrop, "random_resized_crop", "RandomResizedCrop", S::kGeometry, true,
       "size_h size_w scale ratio interpolation",
       ParseRandomResizedCrop, DescribeRandomResizedCrop, nullptr},
      {Kind::kRandomHorizontalFlip, "random_horizontal_flip", "RandomHorizontalFlip",
       S::kGeometry, false, "p",
       ReadProbability, DescribeHorizontalFlip, ApplyFlip},
      {Kind::kToTensor, "to_tensor", "ToTensor", S::kOutput, false,
       "by_reciprocal",
       ParseToTensor, nullptr, nullptr},
      {Kind::kNormalize, "normalize", "Normalize", S::kOutput, false,
       "mean std",
       ParseNormalize, DescribeNormalize, nullptr},
      {Kind::kRandomVerticalFlip, "random_vertical_flip", "RandomVerticalFlip", S::kGeometry, false,
       "p",
       ReadProbability, DescribeVerticalFlip, ApplyFlip},
      {Kind::kRandomCrop, "random_crop", "RandomCrop", S::kCropPad, false,
       "size_h size_w pad pad_if_needed fill pad_mode",
       ParseRandomCrop, DescribeRandomCrop, ApplyRandomCrop},
      {Kind::kPad, "pad", "Pad", S::kCropPad, false,
       "pad fill pad_mode zoom_out p",
       ParsePad, DescribePad, ApplyPad},
      {Kind::kColorJitter, "color_jitter", "ColorJitter", S::kImage, false,
       "ranges photometric p",
       ParseColorJitter, DescribeColorJitter, ApplyColorJitterStep},
      {Kind::kGrayscale, "grayscale", "Grayscale", S::kImage, false,
       "p",
       ReadProbability, nullptr, ApplyGrayscale},
      {Kind::kRandomRotation, "random_rotation", "RandomRotation", S::kImage, false,
       "ranges interpolation fill center",
       ParseRotation, nullptr, ApplyRandomRotation},
      {Kind::kRandomAffine, "random_affine", "RandomAffine", S::kImage, false,
       "ranges interpolation fill center",
       ParseRotation, nullptr, ApplyRandomAffine},
      {Kind::kGaussianBlur, "gaussian_blur", "GaussianBlur", S::kImage, false,
       "size_h size_w ranges",
       ParseBlur, nullptr, ApplyGaussianBlur},
      {Kind::kAugOp, "aug_op", "AugOp", S::kImage, false,
       "op magnitude p interpolation fill",
       ParseAugOp, DescribeAugOp, ApplyAugOpStep},
      {Kind::kRandAugment, "rand_augment", "RandAugment", S::kImage, false,
       "num_ops magnitude num_bins interpolation fill v2_magnitudes",
       ParseRandAugment, DescribeRandAugment, ApplyRandAugment},
      {Kind::kTrivialAugmentWide, "trivial_augment_wide", "TrivialAugmentWide", S::kImage, false,
       "num_bins interpolation fill v2_magnitudes",
       ParseTrivialAugmentWide, nullptr, ApplyTrivialAugmentWide},
      {Kind::kAutoAugment, "auto_augment", "AutoAugment", S::kImage, false,
       "policy interpolation fill v2_magnitudes",
       ParseAutoAugment, nullptr, ApplyAutoAugment},
      {Kind::kTimmRandAugment, "timm_rand_augment", "timm's RandAugment", S::kImage, false,
       "timm_ops num_ops p magnitude magnitude_std magnitude_max translate_pct translate_const "
       "fill interpolation random_interpolation",
       ParseTimmRandAugment, DescribeTimmRandAugment, ApplyTimmRandAugment},
      {Kind::kRandomErasing, "random_erasing", "RandomErasing", S::kOutput, false,
       "p ranges fill erase_mode timm_erasing erase_count",
       ParseRandomErasing, nullptr, nullptr},
      // No image function of its own: ApplyImageSteps draws for it and skips the steps it
      // guards when the draw says so.
      {Kind::kRandomApply, "random_apply", "RandomApply", S::kImage, false,
       "p num_steps",
       ParseRandomApply, DescribeRandomApply, nullptr},
      {Kind::kAugMix, "augmix", "AugMix", S::kImage, false,
       "severity mixture_width chain_depth alpha all_ops interpolation v2_magnitudes",
       ParseAugMix, nullptr, ApplyAugMix},
  };
  return *kinds;
}

bool StepKindInfo::Takes(std::string_view key) const {
  for (std::string_view rest = params; !rest.empty();) {
    const size_t space = rest.find(' ');
    if (rest.substr(0, space) == key) return true;
    if (space == std::string_view::npos) break;
    rest.remove_prefix(space + 1);
  }
  return false;
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
