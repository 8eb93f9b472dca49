#include "transform/image_transform.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

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

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kResize: return "Resize";
    case Kind::kCenterCrop: return "CenterCrop";
    case Kind::kRandomResizedCrop: return "RandomResizedCrop";
    case Kind::kRandomHorizontalFlip: return "RandomHorizontalFlip";
    case Kind::kToTensor: return "ToTensor";
    case Kind::kNormalize: return "Normalize";
  }
  return "Unknown";
}

bool IsGeometric(Kind kind) {
  return kind == Kind::kResize || kind == Kind::kCenterCrop ||
         kind == Kind::kRandomResizedCrop || kind == Kind::kRandomHorizontalFlip;
}

absl::Status StepError(size_t index, Kind kind, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("transform step ", index, " (", KindName(kind), "): ", what));
}

/// The running state of Plan: the current image size and where its edges sit in the source.
struct View {
  int64_t w = 0, h = 0;
  double x0 = 0, x1 = 0, y0 = 0, y1 = 0;
  double cx0 = 0, cx1 = 0, cy0 = 0, cy1 = 0;  // clip box (ordered)

  /// Restricts the view to the integer box (top, left, ch, cw) of the current image.
  void Crop(int64_t top, int64_t left, int64_t ch, int64_t cw) {
    const double sx = (x1 - x0) / static_cast<double>(w);
    const double sy = (y1 - y0) / static_cast<double>(h);
    const double nx0 = x0 + static_cast<double>(left) * sx;
    const double nx1 = x0 + static_cast<double>(left + cw) * sx;
    const double ny0 = y0 + static_cast<double>(top) * sy;
    const double ny1 = y0 + static_cast<double>(top + ch) * sy;
    x0 = nx0, x1 = nx1, y0 = ny0, y1 = ny1;
    w = cw, h = ch;
  }
  /// The next resample reads exactly the current view, so its taps are clipped to it (kept
  /// inside the source: beyond it there is only CenterCrop's zero padding).
  void ClipToView(int src_w, int src_h) {
    cx0 = std::clamp(std::min(x0, x1), 0.0, static_cast<double>(src_w));
    cx1 = std::clamp(std::max(x0, x1), 0.0, static_cast<double>(src_w));
    cy0 = std::clamp(std::min(y0, y1), 0.0, static_cast<double>(src_h));
    cy1 = std::clamp(std::max(y0, y1), 0.0, static_cast<double>(src_h));
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

absl::StatusOr<TransformPipeline> TransformPipeline::Create(std::vector<TransformStep> steps,
                                                            DType dtype, Layout layout) {
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
  bool seen_to_tensor = false;
  double scale[3] = {1, 1, 1}, bias[3] = {0, 0, 0};
  for (size_t i = 0; i < steps.size(); ++i) {
    TransformStep& s = steps[i];
    if (IsGeometric(s.kind) && seen_to_tensor) {
      return StepError(i, s.kind, "geometric steps must come before ToTensor/Normalize");
    }
    switch (s.kind) {
      case Kind::kResize:
        if (s.size_h <= 0 || s.size_w < 0) return StepError(i, s.kind, "size must be > 0");
        if (s.max_size < 0) return StepError(i, s.kind, "max_size must be >= 0");
        if (s.max_size > 0 && s.size_w > 0) {
          return StepError(i, s.kind, "max_size is only allowed with a single int size");
        }
        if (s.max_size > 0 && s.max_size <= s.size_h) {
          return StepError(i, s.kind,
                           absl::StrCat("max_size = ", s.max_size,
                                        " must be strictly greater than the requested size ",
                                        s.size_h));
        }
        if (s.size_w > 0) {
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
      case Kind::kRandomHorizontalFlip:
        if (!(s.p >= 0.0 && s.p <= 1.0)) return StepError(i, s.kind, "p must be in [0, 1]");
        break;
      case Kind::kToTensor:
        if (seen_to_tensor) return StepError(i, s.kind, "ToTensor appears more than once");
        seen_to_tensor = true;
        for (int c = 0; c < 3; ++c) scale[c] = 1.0 / 255.0;
        break;
      case Kind::kNormalize:
        if (!seen_to_tensor) return StepError(i, s.kind, "Normalize needs ToTensor before it");
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
      default:
        return StepError(i, s.kind, "unknown step kind");
    }
  }
  if (!size) {
    return absl::InvalidArgumentError(
        "transform chain output size depends on the input image; end the geometric steps with "
        "CenterCrop, RandomResizedCrop or Resize((h, w)) so samples can be batched");
  }
  if (size->h > (1 << 16) || size->w > (1 << 16)) {
    return absl::InvalidArgumentError(
        absl::StrCat("output size ", size->h, "x", size->w, " is too large"));
  }
  if (seen_to_tensor && dtype == DType::kUint8) {
    return absl::InvalidArgumentError(
        "dtype uint8 cannot hold ToTensor/Normalize output; use float32, float16 or bfloat16");
  }
  p.out_h_ = static_cast<int>(size->h);
  p.out_w_ = static_cast<int>(size->w);
  p.to_unit_ = seen_to_tensor;
  for (int c = 0; c < 3; ++c) {
    p.scale_[c] = static_cast<float>(scale[c]);
    p.bias_[c] = static_cast<float>(bias[c]);
  }
  p.steps_ = std::move(steps);
  return p;
}

SampleGeometry TransformPipeline::Plan(int src_w, int src_h, SampleRng& rng) const {
  View v;
  v.w = std::max(src_w, 1);
  v.h = std::max(src_h, 1);
  v.x0 = 0, v.x1 = static_cast<double>(src_w);
  v.y0 = 0, v.y1 = static_cast<double>(src_h);
  v.ClipToView(src_w, src_h);
  for (const TransformStep& s : steps_) {
    switch (s.kind) {
      case Kind::kResize: {
        const Size2 n = ResizedOutputSize(v.h, v.w, s);
        if (n.h == v.h && n.w == v.w) break;  // torchvision returns the image untouched
        v.ClipToView(src_w, src_h);
        v.w = std::max<int64_t>(n.w, 1);
        v.h = std::max<int64_t>(n.h, 1);
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
        v.ClipToView(src_w, src_h);  // PIL resizes the cropped image: taps stop at the crop
        v.w = s.size_w;
        v.h = s.size_h;
        break;
      }
      case Kind::kRandomHorizontalFlip:
        if (rng.Uniform() < s.p) std::swap(v.x0, v.x1);
        break;
      case Kind::kToTensor:
      case Kind::kNormalize:
        break;
    }
  }
  SampleGeometry g;
  g.x0 = v.x0, g.x1 = v.x1, g.y0 = v.y0, g.y1 = v.y1;
  g.out_w = static_cast<int>(v.w);
  g.out_h = static_cast<int>(v.h);
  g.clip_x0 = v.cx0, g.clip_x1 = v.cx1, g.clip_y0 = v.cy0, g.clip_y1 = v.cy1;
  return g;
}

size_t TransformPipeline::SampleBytes() const {
  return static_cast<size_t>(out_h_) * static_cast<size_t>(out_w_) * 3 * DTypeSize(dtype_);
}

std::string TransformPipeline::Describe() const {
  std::vector<std::string> parts;
  for (const TransformStep& s : steps_) {
    switch (s.kind) {
      case Kind::kResize:
        if (s.size_w > 0) {
          parts.push_back(absl::StrCat("Resize(", s.size_h, "x", s.size_w, ")"));
        } else if (s.max_size > 0) {
          parts.push_back(absl::StrCat("Resize(", s.size_h, ", max_size=", s.max_size, ")"));
        } else {
          parts.push_back(absl::StrCat("Resize(", s.size_h, ")"));
        }
        break;
      case Kind::kCenterCrop:
        parts.push_back(absl::StrCat("CenterCrop(", s.size_h, "x", s.size_w, ")"));
        break;
      case Kind::kRandomResizedCrop: {
        std::string d = absl::StrCat("RandomResizedCrop(", s.size_h, "x", s.size_w);
        if (s.scale_min != 0.08 || s.scale_max != 1.0) {
          absl::StrAppendFormat(&d, ", scale=(%g, %g)", s.scale_min, s.scale_max);
        }
        if (s.ratio_min != 3.0 / 4.0 || s.ratio_max != 4.0 / 3.0) {
          absl::StrAppendFormat(&d, ", ratio=(%g, %g)", s.ratio_min, s.ratio_max);
        }
        parts.push_back(d + ")");
        break;
      }
      case Kind::kRandomHorizontalFlip:
        parts.push_back(absl::StrFormat("Flip(%g)", s.p));
        break;
      case Kind::kToTensor:
        parts.push_back("ToTensor");
        break;
      case Kind::kNormalize:
        parts.push_back(absl::StrCat("Normalize(mean=(", FormatFloats(s.mean), "), std=(",
                                     FormatFloats(s.std), "))"));
        break;
    }
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
