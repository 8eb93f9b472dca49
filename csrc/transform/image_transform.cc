// The chain's validation (TransformPipeline::Create: each step's values, the stage order of
// stage_order.h, the output size and the level table) and what a built pipeline answers. The
// kinds' table is in step_kinds.cc, the per-sample planning in geometry_plan.cc.

#include "transform/image_transform.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "transform/image_ops.h"
#include "transform/resized_size.h"
#include "transform/stage_order.h"

namespace ringloader {

const char* InterpolationName(Interpolation interpolation) {
  switch (interpolation) {
    case Interpolation::kNearest: return "nearest";
    case Interpolation::kLanczos: return "lanczos";
    case Interpolation::kBilinear: return "bilinear";
    case Interpolation::kBicubic: return "bicubic";
    case Interpolation::kBox: return "box";
    case Interpolation::kHamming: return "hamming";
  }
  return "unknown";
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kUint8: return 1;
    case DType::kFloat32: return 4;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kUint8: return "uint8";
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
  }
  return "unknown";
}

namespace {

using Kind = TransformStep::Kind;

bool ValidRange(const double r[2], double lo, double hi) {
  return std::isfinite(r[0]) && std::isfinite(r[1]) && r[0] <= r[1] && r[0] >= lo && r[1] <= hi;
}

/// Whether the step resamples with Pillow's Image.transform / Image.rotate, which take the
/// nearest, bilinear and bicubic filters only (image_ops.h).
bool UsesTransformFilter(const TransformStep& s) {
  switch (s.kind) {
    case Kind::kRandomRotation:
    case Kind::kRandomAffine:
    case Kind::kRandAugment:
    case Kind::kTrivialAugmentWide:
    case Kind::kAutoAugment:
    case Kind::kTimmRandAugment:
      return true;
    case Kind::kAugOp:
      return s.aug_op == AugOp::kShearX || s.aug_op == AugOp::kShearY ||
             s.aug_op == AugOp::kTranslateX || s.aug_op == AugOp::kTranslateY ||
             s.aug_op == AugOp::kRotate;
    default:
      return false;
  }
}

/// Per-kind parameter checks of the steps added for the full recipe set ("" when valid).
std::string CheckImageStep(const TransformStep& s) {
  using T = TransformStep;
  const auto prob_ok = [&] { return s.p >= 0.0 && s.p <= 1.0; };
  if (UsesTransformFilter(s) && s.interpolation != Interpolation::kNearest &&
      s.interpolation != Interpolation::kBilinear && s.interpolation != Interpolation::kBicubic) {
    return absl::StrCat("interpolation ", InterpolationName(s.interpolation),
                        " is not a filter of Pillow's Image.transform/rotate; use nearest, "
                        "bilinear or bicubic");
  }
  switch (s.kind) {
    case Kind::kRandomCrop:
      if (s.size_w == 0) return "size must be > 0";
      [[fallthrough]];
    case Kind::kPad:
      for (int v : s.pad) {
        if (v < 0 && s.kind == Kind::kRandomCrop) return "padding must be >= 0";
        if (v < 0 && s.pad_mode != PadMode::kConstant) {
          return "negative padding is only supported with padding_mode='constant'";
        }
      }
      return "";
    case Kind::kColorJitter:
      for (int i : {T::kBrightness, T::kContrast, T::kSaturation}) {
        if (s.has_range[i] && !ValidRange(s.range[i], 0.0, 1e9)) {
          return "brightness, contrast and saturation ranges must satisfy 0 <= min <= max";
        }
      }
      if (s.has_range[T::kHue] && !ValidRange(s.range[T::kHue], -0.5, 0.5)) {
        return "hue range must lie in [-0.5, 0.5] with min <= max";
      }
      return "";
    case Kind::kGrayscale:
    case Kind::kRandomVerticalFlip:
    case Kind::kAugOp:
    case Kind::kRandomErasing:
      if (!prob_ok()) return "p must be in [0, 1]";
      if (s.kind == Kind::kRandomErasing) {
        if (!ValidRange(s.range[T::kEraseScale], 0.0, 1.0)) {
          return "scale must satisfy 0 <= min <= max <= 1";
        }
        const double* ratio = s.range[T::kEraseRatio];
        if (!(ratio[0] > 0 && ratio[0] <= ratio[1])) {
          return "ratio must satisfy 0 < min <= max";
        }
        if (s.erase_count < 1) return "max_count must be >= 1";
      }
      return "";
    case Kind::kRandomRotation:
      if (!ValidRange(s.range[T::kDegrees], -1e6, 1e6)) {
        return "degrees must be finite with min <= max";
      }
      return "";
    case Kind::kRandomAffine:
      if (!ValidRange(s.range[T::kDegrees], -1e6, 1e6)) {
        return "degrees must be finite with min <= max";
      }
      if (const double* t = s.range[T::kTranslate];
          s.has_range[T::kTranslate] && !(t[0] >= 0 && t[0] <= 1 && t[1] >= 0 && t[1] <= 1)) {
        return "translate values must be in [0, 1]";
      }
      if (const double* scale = s.range[T::kAffineScale];
          s.has_range[T::kAffineScale] && !(ValidRange(scale, 0.0, 1e6) && scale[0] > 0)) {
        return "scale must satisfy 0 < min <= max";
      }
      return "";
    case Kind::kGaussianBlur:
      if (s.size_w <= 0 || s.size_h <= 0 || s.size_w % 2 == 0 || s.size_h % 2 == 0) {
        return "kernel size must be odd and positive";
      }
      if (const double* sigma = s.range[T::kSigma]; !(sigma[0] > 0 && sigma[0] <= sigma[1])) {
        return "sigma must satisfy 0 < min <= max";
      }
      return "";
    case Kind::kRandAugment:
    case Kind::kTrivialAugmentWide:
      if (s.num_bins < 2) return "num_magnitude_bins must be >= 2";
      if (s.kind == Kind::kRandAugment &&
          (s.num_ops < 0 || s.magnitude < 0 || s.magnitude >= s.num_bins)) {
        return "num_ops must be >= 0 and magnitude in [0, num_magnitude_bins)";
      }
      return "";
    case Kind::kAutoAugment:
      return s.policy >= 0 && s.policy <= 2 ? "" : "policy must be IMAGENET, CIFAR10 or SVHN";
    case Kind::kTimmRandAugment:
      return s.num_ops >= 0 && s.magnitude >= 0 ? "" : "num_ops and magnitude must be >= 0";
    case Kind::kRandomApply:
      if (!prob_ok()) return "p must be in [0, 1]";
      return s.apply_steps >= 0 ? "" : "the number of guarded steps must be >= 0";
    case Kind::kAugMix:
      if (s.interpolation != Interpolation::kNearest &&
          s.interpolation != Interpolation::kBilinear) {
        return "interpolation must be nearest or bilinear (AugMix runs torch's grid_sample)";
      }
      if (s.augmix_severity < 1 || s.augmix_severity > 10) return "severity must be in [1, 10]";
      if (s.augmix_width < 1 || s.augmix_width > 64) return "mixture_width must be in [1, 64]";
      if (s.augmix_depth > 64) return "chain_depth must be <= 64";
      return s.augmix_alpha > 0 && std::isfinite(s.augmix_alpha) ? "" : "alpha must be > 0";
    default:
      return "";
  }
}

absl::Status StepError(size_t index, Kind kind, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("transform step ", index, " (", KindInfo(kind).name, "): ", what));
}

/// Create's checks of a Resize (a fixed size, a short side with max_size, v2's ScaleJitter,
/// RandomShortestSize and RandomResize) and the output size after it ("" when valid).
std::string CheckResize(const TransformStep& s, std::optional<Size2>* size) {
  if (s.size_h <= 0 || s.size_w < 0) return "size must be > 0";
  if (s.max_size < 0) return "max_size must be >= 0";
  if (s.max_size > 0 && s.size_w > 0) return "max_size is only allowed with a single int size";
  if (s.max_size > 0 && s.size_choices.empty() && s.max_size <= s.size_h) {
    return absl::StrCat("max_size = ", s.max_size,
                        " must be strictly greater than the requested size ", s.size_h);
  }
  if (s.scale_jitter) {
    if (s.size_w <= 0 || s.max_size > 0 || s.size_max != 0 || !s.size_choices.empty()) {
      return "ScaleJitter takes a target size (height, width) and no max_size, RandomResize "
             "range or size choices";
    }
    if (!(std::isfinite(s.scale_min) && std::isfinite(s.scale_max) && s.scale_min > 0 &&
          s.scale_min <= s.scale_max)) {
      return "ScaleJitter: scale_range must be (lo, hi) with 0 < lo <= hi";
    }
    size->reset();  // drawn per sample: the output size depends on the draw and the image
  } else if (!s.size_choices.empty()) {
    if (s.size_w > 0 || s.size_max != 0) {
      return "a size drawn from choices (RandomShortestSize) takes no fixed size and no "
             "RandomResize range";
    }
    for (int c : s.size_choices) {
      if (c <= 0) return "RandomShortestSize: min_size must be > 0";
    }
    size->reset();  // drawn per sample: the output size depends on the draw and the image
  } else if (s.size_max != 0) {
    if (s.size_w > 0 || s.max_size > 0) {
      return "a random size (RandomResize) takes a single int size and no max_size";
    }
    if (s.size_max <= s.size_h) {
      return absl::StrCat("RandomResize: max_size = ", s.size_max,
                          " must be greater than min_size = ", s.size_h,
                          " (the size is drawn from [min_size, max_size))");
    }
    size->reset();  // drawn per sample: the output size depends on the draw
  } else if (s.size_w > 0) {
    *size = Size2{s.size_h, s.size_w};
  } else if (*size) {
    **size = ResizedOutputSize((*size)->h, (*size)->w, s);
  }
  return "";
}

/// Create's checks of the geometric and crop/pad steps beyond CheckImageStep, and the output
/// size after `s` (`size`: unset while it depends on the input image or a draw); an int size
/// of CenterCrop and RandomResizedCrop becomes square here. "" when valid.
std::string FollowSize(TransformStep& s, std::optional<Size2>* size) {
  switch (s.kind) {
    case Kind::kResize:
      return CheckResize(s, size);
    case Kind::kCenterCrop:
    case Kind::kRandomResizedCrop:
      if (s.size_w == 0) s.size_w = s.size_h;  // torchvision: an int size means square
      if (s.size_h <= 0 || s.size_w <= 0) return "size must be > 0";
      if (s.kind == Kind::kRandomResizedCrop) {
        if (!(std::isfinite(s.scale_min) && std::isfinite(s.scale_max) && s.scale_min > 0 &&
              s.scale_min <= s.scale_max)) {
          return "scale must satisfy 0 < min <= max";
        }
        if (!(std::isfinite(s.ratio_min) && std::isfinite(s.ratio_max) && s.ratio_min > 0 &&
              s.ratio_min <= s.ratio_max)) {
          return "ratio must satisfy 0 < min <= max";
        }
      }
      *size = Size2{s.size_h, s.size_w};
      return "";
    case Kind::kRandomCrop:
      if (s.size_h <= 0 || s.size_w <= 0) return "size must be > 0";
      *size = Size2{s.size_h, s.size_w};
      return "";
    case Kind::kPad:
      if (s.zoom_out) {
        if (!(s.scale_min >= 1.0 && s.scale_min <= s.scale_max && std::isfinite(s.scale_max))) {
          return "RandomZoomOut: side_range must be (lo, hi) with 1 <= lo <= hi";
        }
        if (!(s.p >= 0.0 && s.p <= 1.0)) return "p must be in [0, 1]";
        size->reset();  // drawn per sample: the output size depends on the draw and the image
      } else if (*size) {
        **size = Size2{(*size)->h + s.pad[1] + s.pad[3], (*size)->w + s.pad[0] + s.pad[2]};
        if ((*size)->h <= 0 || (*size)->w <= 0) return "negative padding removes the whole image";
      }
      return "";
    case Kind::kRandomHorizontalFlip:
    case Kind::kRandomVerticalFlip:
      if (!(s.p >= 0.0 && s.p <= 1.0)) return "p must be in [0, 1]";
      return "";
    default:
      return "";  // image steps keep the size
  }
}

/// The output's value as an affine map of a stored level, level * scale + bias per channel,
/// through the chain's ToTensor and Normalize.
struct LevelMap {
  double scale[3] = {1, 1, 1};
  double bias[3] = {0, 0, 0};
};

/// Follows `map` through an output step (ToTensor, Normalize), checking Normalize's values
/// ("" when valid).
std::string FollowLevels(const TransformStep& s, LevelMap* map) {
  if (s.kind == Kind::kToTensor) {
    for (int c = 0; c < 3; ++c) map->scale[c] = 1.0 / 255.0;
  } else if (s.kind == Kind::kNormalize) {
    for (int c = 0; c < 3; ++c) {
      if (!std::isfinite(s.mean[c]) || !std::isfinite(s.std[c])) {
        return "mean and std must be finite";
      }
      if (s.std[c] == 0.f) return "std must be non-zero";
      // (v - mean) / std applied to v = level * scale + bias.
      map->scale[c] = map->scale[c] / s.std[c];
      map->bias[c] = (map->bias[c] - s.mean[c]) / s.std[c];
    }
  }
  return "";
}

/// The checks of the whole chain once each step passed its own: a batchable size (unless
/// `allow_variable_size`), not too large, and a dtype that holds ToTensor's output.
absl::Status CheckOutput(const std::optional<Size2>& size, bool allow_variable_size,
                         bool seen_to_tensor, DType dtype) {
  if (!size && !allow_variable_size) {
    return absl::InvalidArgumentError(
        "transform chain output size depends on the input image; end the geometric steps with "
        "CenterCrop, RandomResizedCrop, RandomCrop or Resize((h, w)) so samples can be batched");
  }
  if (size && (size->h > (1 << 16) || size->w > (1 << 16))) {
    return absl::InvalidArgumentError(
        absl::StrCat("output size ", size->h, "x", size->w, " is too large"));
  }
  if (seen_to_tensor && dtype == DType::kUint8) {
    return absl::InvalidArgumentError(
        "dtype uint8 cannot hold ToTensor/Normalize output; use float32, float16 or bfloat16");
  }
  return absl::OkStatus();
}

/// Each level's value as torch computes it, one float32 operation at a time (ToTensor and
/// ConvertImageDtype divide by 255, v2's ToDtype multiplies by float(1/255); Normalize subtracts
/// the mean, then divides by std). `volatile` keeps each rounding: no fused multiply-add.
void ComputeLevelValues(const std::vector<TransformStep>& steps,
                        std::array<float, 3 * 256>* values) {
  for (int c = 0; c < 3; ++c) {
    for (int level = 0; level < 256; ++level) {
      volatile float x = static_cast<float>(level);
      for (const TransformStep& s : steps) {
        if (s.kind == Kind::kToTensor) {
          x = s.by_reciprocal ? x * static_cast<float>(1.0 / 255.0) : x / 255.0f;
        } else if (s.kind == Kind::kNormalize) {
          x = x - s.mean[c];
          x = x / s.std[c];
        }
      }
      (*values)[static_cast<size_t>(c) * 256 + level] = x;
    }
  }
}

}  // namespace

absl::StatusOr<TransformPipeline> TransformPipeline::Create(std::vector<TransformStep> steps,
                                                            DType dtype, Layout layout,
                                                            bool allow_variable_size) {
  if (DTypeSize(dtype) == 0) return absl::InvalidArgumentError("unknown dtype");
  if (layout != Layout::kCHW && layout != Layout::kHWC) {
    return absl::InvalidArgumentError("unknown layout");
  }
  TransformPipeline p;
  p.dtype_ = dtype;
  p.layout_ = layout;
  // The output size is known statically once a step fixes it; Resize(int) after a fixed size is
  // fixed too, before one it depends on the input.
  std::optional<Size2> size;
  StageWalk walk;
  p.image_begin_ = p.image_end_ = steps.size();
  LevelMap levels;
  for (size_t i = 0; i < steps.size(); ++i) {
    TransformStep& s = steps[i];
    if (s.kind == Kind::kRandomCrop && s.size_w == 0) s.size_w = s.size_h;
    if (const std::string bad = CheckImageStep(s); !bad.empty()) return StepError(i, s.kind, bad);
    const StageWalk::Stage before = walk.stage();
    if (const StageWalk::Rule rule = walk.Step(steps, i); rule != StageWalk::Rule::kNone) {
      return StepError(i, s.kind, StageRuleError(steps, i, rule, walk));
    }
    if (before == StageWalk::Stage::kGeometry && walk.stage() == StageWalk::Stage::kImage) {
      p.image_begin_ = i;
    } else if (before == StageWalk::Stage::kImage && walk.stage() == StageWalk::Stage::kOutput) {
      p.image_end_ = i;
    }
    if (const std::string bad = FollowSize(s, &size); !bad.empty()) {
      return StepError(i, s.kind, bad);
    }
    if (const std::string bad = FollowLevels(s, &levels); !bad.empty()) {
      return StepError(i, s.kind, bad);
    }
    if (s.kind == Kind::kRandomErasing) p.has_erasing_ = true;
  }
  if (walk.stage() == StageWalk::Stage::kImage) p.image_end_ = steps.size();
  const bool seen_to_tensor = walk.seen_to_tensor();
  if (absl::Status st = CheckOutput(size, allow_variable_size, seen_to_tensor, dtype); !st.ok()) {
    return st;
  }
  p.fixed_size_ = size.has_value();
  p.out_h_ = size ? static_cast<int>(size->h) : 0;
  p.out_w_ = size ? static_cast<int>(size->w) : 0;
  p.to_unit_ = seen_to_tensor;
  for (int c = 0; c < 3; ++c) {
    p.scale_[c] = static_cast<float>(levels.scale[c]);
    p.bias_[c] = static_cast<float>(levels.bias[c]);
  }
  ComputeLevelValues(steps, &p.values_);
  p.steps_ = std::move(steps);
  return p;
}

void TransformPipeline::OutputSize(const SampleGeometry& g, int* height, int* width) const {
  int64_t h = g.out_h, w = g.out_w;
  for (size_t i = image_begin_; i < image_end_; ++i) {
    const TransformStep& s = steps_[i];
    if (s.kind == Kind::kPad) {
      h += s.pad[1] + s.pad[3];
      w += s.pad[0] + s.pad[2];
    } else if (s.kind == Kind::kRandomCrop || s.kind == Kind::kCenterCrop) {
      h = s.size_h;
      w = s.size_w;
    }
  }
  *height = static_cast<int>(std::max<int64_t>(h, 0));
  *width = static_cast<int>(std::max<int64_t>(w, 0));
}

size_t TransformPipeline::OutputBytes(const SampleGeometry& g) const {
  int h = 0, w = 0;
  OutputSize(g, &h, &w);
  return static_cast<size_t>(h) * static_cast<size_t>(w) * 3 * DTypeSize(dtype_);
}

size_t TransformPipeline::SampleBytes() const {
  return static_cast<size_t>(out_h_) * static_cast<size_t>(out_w_) * 3 * DTypeSize(dtype_);
}

std::string TransformPipeline::Describe() const {
  std::vector<std::string> parts;
  for (const TransformStep& s : steps_) {
    const StepKindInfo& info = KindInfo(s.kind);
    parts.push_back(info.describe != nullptr ? info.describe(s) : info.name);
  }
  return absl::StrJoin(parts, " -> ");
}

}  // namespace ringloader
