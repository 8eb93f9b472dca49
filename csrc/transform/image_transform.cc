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
#include <variant>
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

bool ValidProbability(double p) { return p >= 0.0 && p <= 1.0; }

/// Whether the step resamples with Pillow's Image.transform / Image.rotate, which take the
/// nearest, bilinear and bicubic filters only (image_ops.h).
bool UsesTransformFilter(const TransformStep& s) {
  switch (s.kind()) {
    case Kind::kRandomRotation:
    case Kind::kRandomAffine:
    case Kind::kRandAugment:
    case Kind::kTrivialAugmentWide:
    case Kind::kAutoAugment:
    case Kind::kTimmRandAugment:
      return true;
    case Kind::kAugOp: {
      const AugOp op = s.get<AugOpParams>().aug_op;
      return op == AugOp::kShearX || op == AugOp::kShearY || op == AugOp::kTranslateX ||
             op == AugOp::kTranslateY || op == AugOp::kRotate;
    }
    default:
      return false;
  }
}

/// The step's filter, for the kinds that have one.
std::optional<Interpolation> FilterOf(const TransformStep& s) {
  return std::visit(
      [](const auto& params) -> std::optional<Interpolation> {
        if constexpr (requires { params.interpolation; }) return params.interpolation;
        return std::nullopt;
      },
      s.params);
}

/// The checks of a step's values beyond what its parse can see: the filters of the steps that
/// resample with Pillow's Image.transform, then the kind's own (its row's `check`); "" when
/// valid.
std::string CheckImageStep(const TransformStep& s) {
  if (const std::optional<Interpolation> filter = FilterOf(s);
      UsesTransformFilter(s) && *filter != Interpolation::kNearest &&
      *filter != Interpolation::kBilinear && *filter != Interpolation::kBicubic) {
    return absl::StrCat("interpolation ", InterpolationName(*filter),
                        " is not a filter of Pillow's Image.transform/rotate; use nearest, "
                        "bilinear or bicubic");
  }
  const auto check = KindInfo(s.kind()).check;
  return check != nullptr ? check(s) : "";
}

absl::Status StepError(size_t index, Kind kind, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("transform step ", index, " (", KindInfo(kind).name, "): ", what));
}

/// Create's checks of a Resize (a fixed size, a short side with max_size, v2's ScaleJitter,
/// RandomShortestSize and RandomResize) and the output size after it ("" when valid).
std::string CheckResize(const ResizeParams& s, std::optional<Size2>* size) {
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
    const Range& scale = *s.scale_jitter;
    if (!(std::isfinite(scale.lo) && std::isfinite(scale.hi) && scale.lo > 0 &&
          scale.lo <= scale.hi)) {
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
    **size = ResizedOutputSize((*size)->h, (*size)->w, s.size_h, s.size_w, s.max_size);
  }
  return "";
}

/// Create's checks of the geometric and crop/pad steps beyond CheckImageStep, and the output
/// size after `s` (`size`: unset while it depends on the input image or a draw); an int size
/// of CenterCrop and RandomResizedCrop becomes square here. "" when valid.
std::string FollowSize(TransformStep& step, std::optional<Size2>* size) {
  switch (step.kind()) {
    case Kind::kResize:
      return CheckResize(step.get<ResizeParams>(), size);
    case Kind::kCenterCrop: {
      CenterCropParams& s = step.get<CenterCropParams>();
      if (s.size_w == 0) s.size_w = s.size_h;  // torchvision: an int size means square
      if (s.size_h <= 0 || s.size_w <= 0) return "size must be > 0";
      *size = Size2{s.size_h, s.size_w};
      return "";
    }
    case Kind::kRandomResizedCrop: {
      RandomResizedCropParams& s = step.get<RandomResizedCropParams>();
      if (s.size_w == 0) s.size_w = s.size_h;  // torchvision: an int size means square
      if (s.size_h <= 0 || s.size_w <= 0) return "size must be > 0";
      if (!(std::isfinite(s.scale_min) && std::isfinite(s.scale_max) && s.scale_min > 0 &&
            s.scale_min <= s.scale_max)) {
        return "scale must satisfy 0 < min <= max";
      }
      if (!(std::isfinite(s.ratio_min) && std::isfinite(s.ratio_max) && s.ratio_min > 0 &&
            s.ratio_min <= s.ratio_max)) {
        return "ratio must satisfy 0 < min <= max";
      }
      *size = Size2{s.size_h, s.size_w};
      return "";
    }
    case Kind::kRandomCrop: {
      const RandomCropParams& s = step.get<RandomCropParams>();
      if (s.size_h <= 0 || s.size_w <= 0) return "size must be > 0";
      *size = Size2{s.size_h, s.size_w};
      return "";
    }
    case Kind::kPad: {
      const PadParams& s = step.get<PadParams>();
      if (s.zoom_out) {
        if (!(s.zoom_out->lo >= 1.0 && s.zoom_out->lo <= s.zoom_out->hi &&
              std::isfinite(s.zoom_out->hi))) {
          return "RandomZoomOut: side_range must be (lo, hi) with 1 <= lo <= hi";
        }
        if (!ValidProbability(s.p)) return "p must be in [0, 1]";
        size->reset();  // drawn per sample: the output size depends on the draw and the image
      } else if (*size) {
        **size = Size2{(*size)->h + s.pad[1] + s.pad[3], (*size)->w + s.pad[0] + s.pad[2]};
        if ((*size)->h <= 0 || (*size)->w <= 0) return "negative padding removes the whole image";
      }
      return "";
    }
    case Kind::kRandomHorizontalFlip:
      return ValidProbability(step.get<HorizontalFlipParams>().p) ? "" : "p must be in [0, 1]";
    case Kind::kRandomVerticalFlip:
      return ValidProbability(step.get<VerticalFlipParams>().p) ? "" : "p must be in [0, 1]";
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
std::string FollowLevels(const TransformStep& step, LevelMap* map) {
  if (step.kind() == Kind::kToTensor) {
    for (int c = 0; c < 3; ++c) map->scale[c] = 1.0 / 255.0;
  } else if (const NormalizeParams* normalize = step.get_if<NormalizeParams>()) {
    const NormalizeParams& s = *normalize;
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
/// the mean, then divides by std), and those operations themselves in `ops` (n = -1 when more
/// than LevelOps::kMax). `volatile` keeps each rounding: no fused multiply-add.
void ComputeLevelValues(const std::vector<TransformStep>& steps, std::array<float, 3 * 256>* values,
                        LevelOps* ops) {
  struct Op {
    char op;
    float k[3];
  };
  std::vector<Op> chain;
  for (const TransformStep& s : steps) {
    if (const ToTensorParams* t = s.get_if<ToTensorParams>()) {
      const float k = t->by_reciprocal ? static_cast<float>(1.0 / 255.0) : 255.0f;
      chain.push_back({t->by_reciprocal ? '*' : '/', {k, k, k}});
    } else if (const NormalizeParams* n = s.get_if<NormalizeParams>()) {
      chain.push_back({'-', {n->mean[0], n->mean[1], n->mean[2]}});
      chain.push_back({'/', {n->std[0], n->std[1], n->std[2]}});
    }
  }
  for (int c = 0; c < 3; ++c) {
    for (int level = 0; level < 256; ++level) {
      volatile float x = static_cast<float>(level);
      for (const Op& o : chain) {
        x = o.op == '*' ? x * o.k[c] : o.op == '/' ? x / o.k[c] : x - o.k[c];
      }
      (*values)[static_cast<size_t>(c) * 256 + level] = x;
    }
  }
  ops->n = chain.size() <= static_cast<size_t>(LevelOps::kMax) ? static_cast<int>(chain.size()) : -1;
  for (int i = 0; i < ops->n; ++i) {
    ops->op[i] = chain[i].op;
    std::copy(chain[i].k, chain[i].k + 3, ops->k[i]);
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
    if (RandomCropParams* crop = s.get_if<RandomCropParams>(); crop && crop->size_w == 0) {
      crop->size_w = crop->size_h;
    }
    if (const std::string bad = CheckImageStep(s); !bad.empty()) return StepError(i, s.kind(), bad);
    const StageWalk::Stage before = walk.stage();
    if (const StageWalk::Rule rule = walk.Step(steps, i); rule != StageWalk::Rule::kNone) {
      return StepError(i, s.kind(), StageRuleError(steps, i, rule, walk));
    }
    if (before == StageWalk::Stage::kGeometry && walk.stage() == StageWalk::Stage::kImage) {
      p.image_begin_ = i;
    } else if (before == StageWalk::Stage::kImage && walk.stage() == StageWalk::Stage::kOutput) {
      p.image_end_ = i;
    }
    if (const std::string bad = FollowSize(s, &size); !bad.empty()) {
      return StepError(i, s.kind(), bad);
    }
    if (const std::string bad = FollowLevels(s, &levels); !bad.empty()) {
      return StepError(i, s.kind(), bad);
    }
    if (s.kind() == Kind::kRandomErasing) p.has_erasing_ = true;
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
  ComputeLevelValues(steps, &p.values_, &p.level_ops_);
  p.steps_ = std::move(steps);
  return p;
}

void TransformPipeline::OutputSize(const SampleGeometry& g, int* height, int* width) const {
  int64_t h = g.out_h, w = g.out_w;
  for (size_t i = image_begin_; i < image_end_; ++i) {
    const TransformStep& s = steps_[i];
    if (const PadParams* pad = s.get_if<PadParams>()) {
      h += pad->pad[1] + pad->pad[3];
      w += pad->pad[0] + pad->pad[2];
    } else if (const RandomCropParams* crop = s.get_if<RandomCropParams>()) {
      h = crop->size_h;
      w = crop->size_w;
    } else if (const CenterCropParams* center = s.get_if<CenterCropParams>()) {
      h = center->size_h;
      w = center->size_w;
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
    const StepKindInfo& info = KindInfo(s.kind());
    parts.push_back(info.describe != nullptr ? info.describe(s) : info.name);
  }
  return absl::StrJoin(parts, " -> ");
}

}  // namespace ringloader
