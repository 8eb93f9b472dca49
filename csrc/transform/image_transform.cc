#include "transform/image_transform.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "transform/augment.h"
#include "transform/image_ops.h"

namespace ringloader {
namespace {

using Kind = TransformStep::Kind;

/// Python 3's round(): ties go to the even neighbour. torchvision's crop arithmetic uses it, so
/// a plain std::lround would move some crops by one pixel.
int64_t RoundHalfEven(double v) {
  const double f = std::floor(v);
  const double diff = v - f;
  if (diff > 0.5) return static_cast<int64_t>(f) + 1;
  if (diff < 0.5) return static_cast<int64_t>(f);
  const int64_t fi = static_cast<int64_t>(f);
  return (fi % 2 == 0) ? fi : fi + 1;
}

/// Python's int() on a float: truncation toward zero.
int64_t Trunc(double v) { return static_cast<int64_t>(v); }

struct Size2 {
  int64_t h = 0, w = 0;
};

/// torchvision.transforms.functional._compute_resized_output_size for an image of h x w.
Size2 ResizedOutputSize(int64_t h, int64_t w, const TransformStep& s) {
  if (s.size_w > 0) return {s.size_h, s.size_w};
  const bool w_short = w <= h;
  const int64_t short_side = w_short ? w : h;
  const int64_t long_side = w_short ? h : w;
  int64_t new_short = s.size_h;
  int64_t new_long =
      Trunc(static_cast<double>(s.size_h * long_side) / static_cast<double>(short_side));
  if (s.max_size > 0 && new_long > s.max_size) {
    new_short = Trunc(static_cast<double>(int64_t{s.max_size} * new_short) /
                      static_cast<double>(new_long));
    new_long = s.max_size;
  }
  return w_short ? Size2{new_long, new_short} : Size2{new_short, new_long};
}

const char* KindName(Kind kind) { return KindInfo(kind).name; }

bool ZeroConstantFill(const TransformStep& s) {
  return s.pad_mode == PadMode::kConstant && s.fill[0] == 0.f && s.fill[1] == 0.f &&
         s.fill[2] == 0.f;
}

bool Resizes(Kind kind);

/// Whether a Pad/RandomCrop step may add padding (RandomCrop without padding never does).
bool CanPad(const TransformStep& s) {
  return s.pad_if_needed || s.zoom_out || s.pad[0] != 0 || s.pad[1] != 0 || s.pad[2] != 0 ||
         s.pad[3] != 0;
}

/// Whether the constant, non-zero fill of steps[i] (a Pad/RandomCrop) fuses: its padding must be
/// the only padding of the output, so that the render can paint every pixel outside the shown
/// image with it (SampleGeometry::has_fill): no resize after it (which would blend it), no
/// other step that pads with another fill or mode, and no CenterCrop (which pads with zeros).
bool FusesFill(const std::vector<TransformStep>& steps, size_t i) {
  const TransformStep& s = steps[i];
  for (size_t j = 0; j < steps.size(); ++j) {
    const TransformStep& t = steps[j];
    if ((j > i && Resizes(t.kind)) || t.kind == Kind::kCenterCrop) return false;
    if (j != i && KindInfo(t.kind).stage == StepStage::kCropPad && CanPad(t) &&
        (t.pad_mode != PadMode::kConstant || t.fill[0] != s.fill[0] || t.fill[1] != s.fill[1] ||
         t.fill[2] != s.fill[2])) {
      return false;
    }
  }
  return true;
}

/// Steps the geometric stage absorbs: the geometric ones, and padding/cropping with a zero
/// constant fill (the resampler writes zeros outside the source) or with another constant fill
/// that FusesFill.
bool IsFusable(const std::vector<TransformStep>& steps, size_t i) {
  const TransformStep& s = steps[i];
  const StepStage stage = KindInfo(s.kind).stage;
  return stage == StepStage::kGeometry ||
         (stage == StepStage::kCropPad && s.pad_mode == PadMode::kConstant &&
          (ZeroConstantFill(s) || FusesFill(steps, i)));
}

bool IsOutputStep(Kind kind) { return KindInfo(kind).stage == StepStage::kOutput; }
bool Resizes(Kind kind) { return KindInfo(kind).resizes; }

/// Why `s` starts the image stage: what keeps it out of the fused resample.
std::string ImageStageReason(const TransformStep& s) {
  if (s.zoom_out) return "RandomZoomOut fuses only as the output's one padding";
  if (KindInfo(s.kind).stage == StepStage::kCropPad) {
    static constexpr const char* kModes[] = {"constant", "edge", "reflect", "symmetric"};
    if (s.pad_mode != PadMode::kConstant) {
      return absl::StrCat(KindName(s.kind), " with padding_mode='",
                          kModes[static_cast<int>(s.pad_mode)],
                          "' runs on the 8-bit image");
    }
    return absl::StrCat(KindName(s.kind), " with a non-zero fill runs on the 8-bit image");
  }
  if (s.kind == Kind::kAugOp) {
    return absl::StrCat("the ", AugOpName(s.aug_op), " step runs on the 8-bit image");
  }
  return absl::StrCat(KindName(s.kind), " runs on the 8-bit image");
}

/// The stage-order rules of a chain, one step at a time: Create and StageOrderError walk the
/// chain with it, so the two cannot disagree on what is refused.
class StageWalk {
 public:
  enum class Stage { kGeometry, kImage, kOutput };
  enum class Rule {
    kNone,
    kAfterTensor,        ///< an image step after the output stage began
    kToTensorTwice,
    kNeedsTensor,        ///< Normalize / RandomErasing without ToTensor before it
    kResizeAfterImage,   ///< a resize after the image stage began (see image_begin)
    kSecondResize,       ///< a resize after the fused geometry's resize (see resized_at)
    kGuardedStep,        ///< a RandomApply guards a step that is not a size-keeping image step
    kGuardPastEnd,       ///< a RandomApply guards more steps than follow it (or its own guard)
    kZoomOutUnfused,     ///< a RandomZoomOut that cannot fuse (it has no 8-bit image form)
  };

  /// Advances over steps[i] (after steps[0..i)); returns the rule it breaks.
  Rule Step(const std::vector<TransformStep>& steps, size_t i) {
    const TransformStep& s = steps[i];
    while (!guard_ends_.empty() && guard_ends_.back() < i) guard_ends_.pop_back();
    if (!guard_ends_.empty() && !Guardable(s)) return Rule::kGuardedStep;
    if (s.kind == Kind::kRandomApply) {
      const size_t end = i + static_cast<size_t>(std::max(s.apply_steps, 0));
      if (end >= steps.size() || (!guard_ends_.empty() && end > guard_ends_.back())) {
        return Rule::kGuardPastEnd;
      }
      if (end > i) guard_ends_.push_back(end);
    }
    Rule rule = Rule::kNone;
    if (IsOutputStep(s.kind)) {
      stage_ = Stage::kOutput;
      if (s.kind == Kind::kToTensor) {
        if (seen_to_tensor_) return Rule::kToTensorTwice;
        seen_to_tensor_ = true;
      } else if (!seen_to_tensor_) {
        return Rule::kNeedsTensor;
      }
    } else if (stage_ == Stage::kOutput) {
      return Rule::kAfterTensor;
    } else if (stage_ == Stage::kGeometry && !IsFusable(steps, i)) {
      stage_ = Stage::kImage;
      image_begin_ = i;
    } else if (stage_ == Stage::kGeometry && resized_at_ && Resizes(s.kind)) {
      // The fused geometry resamples once, from the source; torchvision resamples twice, and
      // the second pass filters the first one's rounded levels: one resample cannot equal that.
      rule = Rule::kSecondResize;
    } else if (stage_ == Stage::kImage && Resizes(s.kind)) {
      // Flips and CenterCrop move pixels of the 8-bit image; a resize would need a second
      // resample of it.
      rule = Rule::kResizeAfterImage;
    }
    // RandomZoomOut has no 8-bit image form: where it cannot fuse, the chain is refused there
    // (and the steps after it see the image stage begun, as after any step that cannot fuse).
    if (s.zoom_out && stage_ != Stage::kGeometry && rule == Rule::kNone) {
      rule = Rule::kZoomOutUnfused;
    }
    if (Resizes(s.kind) && rule == Rule::kNone) resized_at_ = i;
    return rule;
  }

  Stage stage() const { return stage_; }
  /// The first image-stage step (valid once stage() left kGeometry for kImage).
  size_t image_begin() const { return image_begin_; }
  bool seen_to_tensor() const { return seen_to_tensor_; }
  /// The fused geometry's resize.
  std::optional<size_t> resized_at() const { return resized_at_; }

  /// Whether a RandomApply may guard `s`: a step of the 8-bit image that keeps its size (a
  /// colour/filter/policy step, rotation, affine, a flip, or a nested RandomApply), so the
  /// output size never depends on the draw.
  static bool Guardable(const TransformStep& s) {
    return KindInfo(s.kind).stage == StepStage::kImage || s.kind == Kind::kRandomHorizontalFlip ||
           s.kind == Kind::kRandomVerticalFlip;
  }

 private:
  std::vector<size_t> guard_ends_;  ///< the last step each enclosing RandomApply guards
  Stage stage_ = Stage::kGeometry;
  size_t image_begin_ = 0;
  std::optional<size_t> resized_at_;
  bool seen_to_tensor_ = false;
};

constexpr const char* kZoomOutError =
    "RandomZoomOut is native as the output's one padding, before any colour step and with no "
    "resize after it";

absl::Status StepError(size_t index, Kind kind, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("transform step ", index, " (", KindName(kind), "): ", what));
}

/// An ordered interval of source coordinates.
struct Span {
  double lo = 0, hi = 0;
  Span Intersect(const Span& o) const { return {std::max(lo, o.lo), std::min(hi, o.hi)}; }
};

/// The running state of Plan: the current image size and where its edges sit in the source,
/// plus the windows that say which of its pixels are zero padding.
struct View {
  int64_t w = 0, h = 0;
  double x0 = 0, x1 = 0, y0 = 0, y1 = 0;
  Span clip_x, clip_y;  // the image the last resize read (its taps stop at its border)
  Span read_x, read_y;  // the part of that image holding source pixels
  Span show_x, show_y;  // the part of the current image holding resized (not padding) pixels

  Span XSpan() const { return {std::min(x0, x1), std::max(x0, x1)}; }
  Span YSpan() const { return {std::min(y0, y1), std::max(y0, y1)}; }

  /// The whole source, unresized.
  void Start(int src_w, int src_h) {
    w = std::max(src_w, 1);
    h = std::max(src_h, 1);
    x0 = 0, x1 = static_cast<double>(src_w);
    y0 = 0, y1 = static_cast<double>(src_h);
    clip_x = read_x = show_x = XSpan();
    clip_y = read_y = show_y = YSpan();
  }
  /// Restricts the view to the integer box (top, left, ch, cw) of the current image; a box
  /// reaching outside it pads with zeros, and the pixels it cuts off never come back.
  void Crop(int64_t top, int64_t left, int64_t ch, int64_t cw) {
    const double sx = (x1 - x0) / static_cast<double>(w);
    const double sy = (y1 - y0) / static_cast<double>(h);
    const double nx0 = x0 + static_cast<double>(left) * sx;
    const double nx1 = x0 + static_cast<double>(left + cw) * sx;
    const double ny0 = y0 + static_cast<double>(top) * sy;
    const double ny1 = y0 + static_cast<double>(top + ch) * sy;
    x0 = nx0, x1 = nx1, y0 = ny0, y1 = ny1;
    w = cw, h = ch;
    show_x = show_x.Intersect(XSpan());
    show_y = show_y.Intersect(YSpan());
  }
  /// The next resize reads exactly the current view, padding included: its taps stop at the
  /// view's border, read zeros outside the shown part, and all of its output is image.
  void Resize() {
    clip_x = XSpan();
    clip_y = YSpan();
    read_x = show_x;
    read_y = show_y;
    show_x = clip_x;
    show_y = clip_y;
  }
};

std::string FormatFloats(const float* v) {
  return absl::StrFormat("%g, %g, %g", v[0], v[1], v[2]);
}

}  // namespace

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

// ---- per-kind parse and describe (the functions of the StepKinds rows) -----------------------

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

namespace {

std::string GuardedStepError(const TransformStep& s) {
  return absl::StrCat("a RandomApply guards it, and only image steps that keep the size (colour, "
                      "blur, grayscale, the single-op and policy steps, rotation, affine, "
                      "flips) can be guarded natively; ",
                      KindName(s.kind), " is not one");
}

std::string GuardPastEndError(const std::vector<TransformStep>& steps, size_t i) {
  return absl::StrCat("it guards the next ", steps[i].apply_steps,
                      " step(s), more than follow it in the chain or in the RandomApply that "
                      "guards it");
}

}  // namespace

std::string StageOrderError(const std::vector<TransformStep>& steps, size_t first) {
  using Rule = StageWalk::Rule;
  StageWalk walk;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Rule rule = walk.Step(steps, i);
    if (i < first || rule == Rule::kNone) continue;
    switch (rule) {
      case Rule::kAfterTensor:
      case Rule::kToTensorTwice:
        return "it runs on the tensor after ToTensor";
      case Rule::kNeedsTensor:
        return "it needs ToTensor before it";
      case Rule::kResizeAfterImage:
        return absl::StrCat("a resize after an earlier step that cannot fuse into the resample (",
                            ImageStageReason(steps[walk.image_begin()]),
                            ") would need a second resample, which is not native");
      case Rule::kSecondResize:
        return "a second resize would need a second resample, which is not native";
      case Rule::kGuardedStep:
        return GuardedStepError(steps[i]);
      case Rule::kGuardPastEnd:
        return GuardPastEndError(steps, i);
      case Rule::kZoomOutUnfused:
        return kZoomOutError;
      case Rule::kNone:
        break;
    }
  }
  return "";
}

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
  using Rule = StageWalk::Rule;
  StageWalk walk;
  p.image_begin_ = p.image_end_ = steps.size();
  double scale[3] = {1, 1, 1}, bias[3] = {0, 0, 0};
  for (size_t i = 0; i < steps.size(); ++i) {
    TransformStep& s = steps[i];
    if (s.kind == Kind::kRandomCrop && s.size_w == 0) s.size_w = s.size_h;
    const std::string bad = CheckImageStep(s);
    if (!bad.empty()) return StepError(i, s.kind, bad);
    const StageWalk::Stage before = walk.stage();
    switch (walk.Step(steps, i)) {
      case Rule::kNone:
        break;
      case Rule::kAfterTensor:
        return StepError(i, s.kind, "image steps must come before ToTensor/Normalize");
      case Rule::kToTensorTwice:
        return StepError(i, s.kind, "ToTensor appears more than once");
      case Rule::kNeedsTensor:
        return StepError(i, s.kind,
                         s.kind == Kind::kNormalize
                             ? "Normalize needs ToTensor before it"
                             : "RandomErasing works on the tensor: put ToTensor first");
      case Rule::kSecondResize:
        return StepError(i, s.kind,
                         absl::StrCat("a second resize (after step ", *walk.resized_at(), ", ",
                                      KindName(steps[*walk.resized_at()].kind),
                                      ") would need a second resample, which is not native"));
      case Rule::kResizeAfterImage:
        return StepError(i, s.kind,
                         absl::StrCat("a resize after step ", walk.image_begin(), " (",
                                      ImageStageReason(steps[walk.image_begin()]),
                                      ") is not supported natively"));
      case Rule::kGuardedStep:
        return StepError(i, s.kind, GuardedStepError(s));
      case Rule::kGuardPastEnd:
        return StepError(i, s.kind, GuardPastEndError(steps, i));
      case Rule::kZoomOutUnfused:
        return StepError(i, s.kind, kZoomOutError);
    }
    if (before == StageWalk::Stage::kGeometry && walk.stage() == StageWalk::Stage::kImage) {
      p.image_begin_ = i;
    } else if (before == StageWalk::Stage::kImage && walk.stage() == StageWalk::Stage::kOutput) {
      p.image_end_ = i;
    }
    switch (s.kind) {
      case Kind::kResize:
        if (s.size_h <= 0 || s.size_w < 0) return StepError(i, s.kind, "size must be > 0");
        if (s.max_size < 0) return StepError(i, s.kind, "max_size must be >= 0");
        if (s.max_size > 0 && s.size_w > 0) {
          return StepError(i, s.kind, "max_size is only allowed with a single int size");
        }
        if (s.max_size > 0 && s.size_choices.empty() && s.max_size <= s.size_h) {
          return StepError(i, s.kind,
                           absl::StrCat("max_size = ", s.max_size,
                                        " must be strictly greater than the requested size ",
                                        s.size_h));
        }
        if (s.scale_jitter) {
          if (s.size_w <= 0 || s.max_size > 0 || s.size_max != 0 || !s.size_choices.empty()) {
            return StepError(i, s.kind, "ScaleJitter takes a target size (height, width) and "
                                        "no max_size, RandomResize range or size choices");
          }
          if (!(std::isfinite(s.scale_min) && std::isfinite(s.scale_max) && s.scale_min > 0 &&
                s.scale_min <= s.scale_max)) {
            return StepError(i, s.kind, "ScaleJitter: scale_range must be (lo, hi) with "
                                        "0 < lo <= hi");
          }
          size.reset();  // drawn per sample: the output size depends on the draw and the image
        } else if (!s.size_choices.empty()) {
          if (s.size_w > 0 || s.size_max != 0) {
            return StepError(i, s.kind, "a size drawn from choices (RandomShortestSize) takes no "
                                        "fixed size and no RandomResize range");
          }
          for (int c : s.size_choices) {
            if (c <= 0) return StepError(i, s.kind, "RandomShortestSize: min_size must be > 0");
          }
          size.reset();  // drawn per sample: the output size depends on the draw and the image
        } else if (s.size_max != 0) {
          if (s.size_w > 0 || s.max_size > 0) {
            return StepError(i, s.kind, "a random size (RandomResize) takes a single int size "
                                        "and no max_size");
          }
          if (s.size_max <= s.size_h) {
            return StepError(i, s.kind,
                             absl::StrCat("RandomResize: max_size = ", s.size_max,
                                          " must be greater than min_size = ", s.size_h,
                                          " (the size is drawn from [min_size, max_size))"));
          }
          size.reset();  // drawn per sample: the output size depends on the draw
        } else if (s.size_w > 0) {
          size = Size2{s.size_h, s.size_w};
        } else if (size) {
          size = ResizedOutputSize(size->h, size->w, s);
        }
        break;
      case Kind::kCenterCrop:
      case Kind::kRandomResizedCrop:
        if (s.size_w == 0) s.size_w = s.size_h;  // torchvision: an int size means square
        if (s.size_h <= 0 || s.size_w <= 0) return StepError(i, s.kind, "size must be > 0");
        if (s.kind == Kind::kRandomResizedCrop) {
          if (!(std::isfinite(s.scale_min) && std::isfinite(s.scale_max) && s.scale_min > 0 &&
                s.scale_min <= s.scale_max)) {
            return StepError(i, s.kind, "scale must satisfy 0 < min <= max");
          }
          if (!(std::isfinite(s.ratio_min) && std::isfinite(s.ratio_max) && s.ratio_min > 0 &&
                s.ratio_min <= s.ratio_max)) {
            return StepError(i, s.kind, "ratio must satisfy 0 < min <= max");
          }
        }
        size = Size2{s.size_h, s.size_w};
        break;
      case Kind::kRandomCrop:
        if (s.size_h <= 0 || s.size_w <= 0) return StepError(i, s.kind, "size must be > 0");
        size = Size2{s.size_h, s.size_w};
        break;
      case Kind::kPad:
        if (s.zoom_out) {
          if (!(s.scale_min >= 1.0 && s.scale_min <= s.scale_max && std::isfinite(s.scale_max))) {
            return StepError(i, s.kind, "RandomZoomOut: side_range must be (lo, hi) with "
                                        "1 <= lo <= hi");
          }
          if (!(s.p >= 0.0 && s.p <= 1.0)) return StepError(i, s.kind, "p must be in [0, 1]");
          size.reset();  // drawn per sample: the output size depends on the draw and the image
        } else if (size) {
          size = Size2{size->h + s.pad[1] + s.pad[3], size->w + s.pad[0] + s.pad[2]};
          if (size->h <= 0 || size->w <= 0) {
            return StepError(i, s.kind, "negative padding removes the whole image");
          }
        }
        break;
      case Kind::kRandomHorizontalFlip:
      case Kind::kRandomVerticalFlip:
        if (!(s.p >= 0.0 && s.p <= 1.0)) return StepError(i, s.kind, "p must be in [0, 1]");
        break;
      case Kind::kToTensor:
        for (int c = 0; c < 3; ++c) scale[c] = 1.0 / 255.0;
        break;
      case Kind::kNormalize:
        for (int c = 0; c < 3; ++c) {
          if (!std::isfinite(s.mean[c]) || !std::isfinite(s.std[c])) {
            return StepError(i, s.kind, "mean and std must be finite");
          }
          if (s.std[c] == 0.f) return StepError(i, s.kind, "std must be non-zero");
          // (v - mean) / std applied to v = level * scale + bias.
          scale[c] = scale[c] / s.std[c];
          bias[c] = (bias[c] - s.mean[c]) / s.std[c];
        }
        break;
      case Kind::kRandomErasing:
        p.has_erasing_ = true;
        break;
      default:
        break;  // image steps keep the size
    }
  }
  if (walk.stage() == StageWalk::Stage::kImage) p.image_end_ = steps.size();
  const bool seen_to_tensor = walk.seen_to_tensor();
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
  p.fixed_size_ = size.has_value();
  p.out_h_ = size ? static_cast<int>(size->h) : 0;
  p.out_w_ = size ? static_cast<int>(size->w) : 0;
  p.to_unit_ = seen_to_tensor;
  for (int c = 0; c < 3; ++c) {
    p.scale_[c] = static_cast<float>(scale[c]);
    p.bias_[c] = static_cast<float>(bias[c]);
  }
  // Each level's value as torch computes it, one float32 operation at a time (ToTensor and
  // ConvertImageDtype divide by 255, v2's ToDtype multiplies by float(1/255); Normalize subtracts
  // the mean, then divides by std). `volatile` keeps each rounding: no fused multiply-add.
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
      p.values_[static_cast<size_t>(c) * 256 + level] = x;
    }
  }
  p.steps_ = std::move(steps);
  return p;
}

namespace {

/// Pads the view by (left, top, right, bottom): the new pixels lie outside the shown window,
/// so the resampler writes zeros there (constant fill 0).
void PadView(View& v, int64_t left, int64_t top, int64_t right, int64_t bottom) {
  v.Crop(-top, -left, v.h + top + bottom, v.w + left + right);
}

/// torch.rand's float32 draw: 24 random bits in [0, 1).
float Rand24(SampleRng& rng) { return static_cast<float>(rng.Next() >> 40) * 0x1.0p-24f; }

/// A fused Pad/RandomCrop with a non-zero fill (FusesFill): its levels, painted by the render,
/// made ints as torchvision makes them (int(x): 123.675 pads with 123), clamped to 0..255.
void TakeFill(const TransformStep& s, SampleGeometry* g) {
  if (ZeroConstantFill(s)) return;
  g->has_fill = true;
  for (int c = 0; c < 3; ++c) {
    const double t = std::trunc(static_cast<double>(s.fill[c]));
    g->fill[c] = static_cast<uint8_t>(!(t >= 0.0) ? 0.0 : t > 255.0 ? 255.0 : t);
  }
}

}  // namespace

SampleGeometry TransformPipeline::Plan(int src_w, int src_h, SampleRng& rng) const {
  View v;
  v.Start(src_w, src_h);
  SampleGeometry g;
  double key_dx = 0, key_dy = 0;  // SampleGeometry::key_dx in the current image's pixels
  bool mirrored_x = false, mirrored_y = false;  // an odd number of flips so far
  for (size_t i = 0; i < image_begin_ && i < steps_.size(); ++i) {
    const TransformStep& s = steps_[i];
    switch (s.kind) {
      case Kind::kResize: {
        Size2 n;
        if (s.scale_jitter) {
          // v2's ScaleJitter: scale = lo + rand * (hi - lo) with torch.rand's float32 (24 bits),
          // r = min(target_w / height, target_h / width) * scale, int(side * r), all in float32
          // as torch computes a Python number times a float32 tensor.
          const float u = Rand24(rng);
          const float span = static_cast<float>(s.scale_max - s.scale_min);
          const float product = u * span;
          const float scale = static_cast<float>(s.scale_min) + product;
          const double m = std::min(static_cast<double>(s.size_w) / static_cast<double>(v.h),
                                    static_cast<double>(s.size_h) / static_cast<double>(v.w));
          const float r = static_cast<float>(m) * scale;
          n = Size2{static_cast<int64_t>(static_cast<float>(v.h) * r),
                    static_cast<int64_t>(static_cast<float>(v.w) * r)};
        } else if (!s.size_choices.empty()) {
          // v2's RandomShortestSize: one shorter side per sample, drawn from the choices like
          // torch.randint(len(choices)); r = min(side / short, max_size / long); int(side * r).
          const int pick = s.size_choices[static_cast<size_t>(
              rng.RandInt(0, static_cast<int64_t>(s.size_choices.size())))];
          double r = static_cast<double>(pick) / static_cast<double>(std::min(v.h, v.w));
          if (s.max_size > 0) {
            r = std::min(r, static_cast<double>(s.max_size) / static_cast<double>(std::max(v.h, v.w)));
          }
          n = Size2{Trunc(static_cast<double>(v.h) * r), Trunc(static_cast<double>(v.w) * r)};
        } else if (s.size_max > 0) {
          // v2's RandomResize: one short side per sample, drawn like torch.randint(min, max).
          TransformStep drawn = s;
          drawn.size_h = static_cast<int>(rng.RandInt(s.size_h, s.size_max));
          n = ResizedOutputSize(v.h, v.w, drawn);
        } else {
          n = ResizedOutputSize(v.h, v.w, s);
        }
        if (n.h == v.h && n.w == v.w) break;  // torchvision returns the image untouched
        key_dx *= static_cast<double>(std::max<int64_t>(n.w, 1)) / static_cast<double>(v.w);
        key_dy *= static_cast<double>(std::max<int64_t>(n.h, 1)) / static_cast<double>(v.h);
        v.Resize();
        v.w = std::max<int64_t>(n.w, 1);
        v.h = std::max<int64_t>(n.h, 1);
        g.filter = s.interpolation;
        g.reflect_x = mirrored_x, g.reflect_y = mirrored_y;
        break;
      }
      case Kind::kCenterCrop: {
        const int64_t ch = s.size_h, cw = s.size_w;
        // torchvision pads with zeros first when the crop is larger, then crops the padded
        // image; padding by (c - size) // 2 on the leading side gives these offsets.
        const int64_t top = ch > v.h ? -((ch - v.h) / 2)
                                     : RoundHalfEven(static_cast<double>(v.h - ch) / 2.0);
        const int64_t left = cw > v.w ? -((cw - v.w) / 2)
                                      : RoundHalfEven(static_cast<double>(v.w - cw) / 2.0);
        v.Crop(top, left, ch, cw);
        break;
      }
      case Kind::kRandomResizedCrop: {
        const CropBox box =
            RandomResizedCropParams(static_cast<int>(v.w), static_cast<int>(v.h), s.scale_min,
                                    s.scale_max, s.ratio_min, s.ratio_max, rng);
        v.Crop(box.top, box.left, box.height, box.width);
        v.Resize();  // PIL resizes the cropped image: taps stop at the crop
        key_dx *= static_cast<double>(s.size_w) / static_cast<double>(v.w);
        key_dy *= static_cast<double>(s.size_h) / static_cast<double>(v.h);
        v.w = s.size_w;
        v.h = s.size_h;
        g.filter = s.interpolation;
        g.reflect_x = mirrored_x, g.reflect_y = mirrored_y;
        break;
      }
      case Kind::kRandomHorizontalFlip:
        if (rng.Uniform() < s.p) {
          std::swap(v.x0, v.x1);
          key_dx = -1.0 - key_dx;
          mirrored_x = !mirrored_x;
        }
        break;
      case Kind::kRandomVerticalFlip:
        if (rng.Uniform() < s.p) {
          std::swap(v.y0, v.y1);
          key_dy = -1.0 - key_dy;
          mirrored_y = !mirrored_y;
        }
        break;
      case Kind::kPad:
        if (s.zoom_out) {
          // v2's RandomZoomOut: skipped when torch.rand(1) >= p; else ratio = lo + rand * (hi -
          // lo), canvas int(side * ratio), offsets int((canvas - side) * rand), in float32.
          if (Rand24(rng) >= static_cast<float>(s.p)) break;
          const float ratio = static_cast<float>(s.scale_min) +
                              Rand24(rng) * static_cast<float>(s.scale_max - s.scale_min);
          const int64_t cw = static_cast<int64_t>(static_cast<float>(v.w) * ratio);
          const int64_t ch = static_cast<int64_t>(static_cast<float>(v.h) * ratio);
          const float rx = Rand24(rng), ry = Rand24(rng);
          const int64_t left = static_cast<int64_t>(static_cast<float>(cw - v.w) * rx);
          const int64_t top = static_cast<int64_t>(static_cast<float>(ch - v.h) * ry);
          PadView(v, left, top, cw - (left + v.w), ch - (top + v.h));
        } else {
          PadView(v, s.pad[0], s.pad[1], s.pad[2], s.pad[3]);
        }
        TakeFill(s, &g);
        break;
      case Kind::kRandomCrop: {
        TakeFill(s, &g);
        // torchvision RandomCrop.forward: padding, then pad_if_needed on each axis (both sides
        // by the missing amount), then get_params.
        PadView(v, s.pad[0], s.pad[1], s.pad[2], s.pad[3]);
        const int64_t th = s.size_h, tw = s.size_w;
        if (s.pad_if_needed && v.w < tw) PadView(v, tw - v.w, 0, tw - v.w, 0);
        if (s.pad_if_needed && v.h < th) PadView(v, 0, th - v.h, 0, th - v.h);
        if (v.h < th || v.w < tw) {
          g.error = "RandomCrop: required crop size is larger than the (padded) input image";
          v.Crop(0, 0, th, tw);
          break;
        }
        if (v.h == th && v.w == tw) break;
        const int64_t top = rng.RandInt(0, v.h - th + 1);
        const int64_t left = rng.RandInt(0, v.w - tw + 1);
        v.Crop(top, left, th, tw);
        break;
      }
      default:
        break;
    }
  }
  if (v.w <= 0 || v.h <= 0) {
    g.error = "Pad: negative padding removes the whole image";
    v.w = std::max<int64_t>(v.w, 1);
    v.h = std::max<int64_t>(v.h, 1);
  }
  g.x0 = v.x0, g.x1 = v.x1, g.y0 = v.y0, g.y1 = v.y1;
  g.out_w = static_cast<int>(v.w);
  g.out_h = static_cast<int>(v.h);
  g.key_dx = key_dx, g.key_dy = key_dy;
  g.clip_x0 = v.clip_x.lo, g.clip_x1 = v.clip_x.hi, g.clip_y0 = v.clip_y.lo, g.clip_y1 = v.clip_y.hi;
  g.read_x0 = v.read_x.lo, g.read_x1 = v.read_x.hi, g.read_y0 = v.read_y.lo, g.read_y1 = v.read_y.hi;
  g.show_x0 = v.show_x.lo, g.show_x1 = v.show_x.hi, g.show_y0 = v.show_y.lo, g.show_y1 = v.show_y.hi;
  return g;
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

CropBox RandomResizedCropParams(int width, int height, double scale_min, double scale_max,
                                double ratio_min, double ratio_max, SampleRng& rng) {
  width = std::max(width, 1);
  height = std::max(height, 1);
  const double area = static_cast<double>(height) * static_cast<double>(width);
  const double log_ratio_min = std::log(ratio_min);
  const double log_ratio_max = std::log(ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.Uniform(scale_min, scale_max);
    const double aspect = std::exp(rng.Uniform(log_ratio_min, log_ratio_max));
    const int64_t w = RoundHalfEven(std::sqrt(target_area * aspect));
    const int64_t h = RoundHalfEven(std::sqrt(target_area / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      CropBox box;
      box.height = static_cast<int>(h);
      box.width = static_cast<int>(w);
      box.top = static_cast<int>(rng.RandInt(0, height - h + 1));
      box.left = static_cast<int>(rng.RandInt(0, width - w + 1));
      return box;
    }
  }
  // Fallback: centre crop with the aspect ratio clamped into [ratio_min, ratio_max].
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < ratio_min) {
    h = RoundHalfEven(static_cast<double>(w) / ratio_min);
  } else if (in_ratio > ratio_max) {
    w = RoundHalfEven(static_cast<double>(h) * ratio_max);
  }
  h = std::clamp<int64_t>(h, 1, height);
  w = std::clamp<int64_t>(w, 1, width);
  CropBox box;
  box.height = static_cast<int>(h);
  box.width = static_cast<int>(w);
  box.top = static_cast<int>((height - h) / 2);
  box.left = static_cast<int>((width - w) / 2);
  return box;
}

}  // namespace ringloader
