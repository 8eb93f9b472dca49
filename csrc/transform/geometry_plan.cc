// The geometry planning of a transform chain: TransformPipeline::Plan walks the chain's fused
// geometric steps over one source image, drawing their random parameters, and returns the one
// SampleGeometry the decoder and the resampler follow; RandomResizedCropParams is torchvision's
// get_params.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "transform/image_transform.h"
#include "transform/resized_size.h"
#include "transform/stage_order.h"

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

/// Pads the view by (left, top, right, bottom): the new pixels lie outside the shown window,
/// so the resampler writes zeros there (constant fill 0).
void PadView(View& v, int64_t left, int64_t top, int64_t right, int64_t bottom) {
  v.Crop(-top, -left, v.h + top + bottom, v.w + left + right);
}

/// torch.rand's float32 draw: 24 random bits in [0, 1).
float Rand24(SampleRng& rng) { return static_cast<float>(rng.Next() >> 40) * 0x1.0p-24f; }

/// A fused Pad/RandomCrop with a non-zero fill (FusesFill): its levels, painted by the render,
/// made ints as torchvision makes them (int(x): 123.675 pads with 123), clamped to 0..255.
void TakeFill(const PaddingParams& s, SampleGeometry* g) {
  if (ZeroConstantFill(s)) return;
  g->has_fill = true;
  for (int c = 0; c < 3; ++c) {
    const double t = std::trunc(static_cast<double>(s.fill[c]));
    g->fill[c] = static_cast<uint8_t>(!(t >= 0.0) ? 0.0 : t > 255.0 ? 255.0 : t);
  }
}

/// The size a Resize step gives the current image (v.w x v.h): fixed, the short side's rule, or
/// drawn per sample (v2's ScaleJitter, RandomShortestSize, RandomResize).
Size2 ResizedSize(const ResizeParams& s, const View& v, SampleRng& rng) {
  if (s.scale_jitter) {
    // v2's ScaleJitter: scale = lo + rand * (hi - lo) with torch.rand's float32 (24 bits),
    // r = min(target_w / height, target_h / width) * scale, int(side * r), all in float32
    // as torch computes a Python number times a float32 tensor.
    const float u = Rand24(rng);
    const Range& range = *s.scale_jitter;
    const float span = static_cast<float>(range.hi - range.lo);
    const float product = u * span;
    const float scale = static_cast<float>(range.lo) + product;
    const double m = std::min(static_cast<double>(s.size_w) / static_cast<double>(v.h),
                              static_cast<double>(s.size_h) / static_cast<double>(v.w));
    const float r = static_cast<float>(m) * scale;
    return Size2{static_cast<int64_t>(static_cast<float>(v.h) * r),
                 static_cast<int64_t>(static_cast<float>(v.w) * r)};
  }
  if (!s.size_choices.empty()) {
    // v2's RandomShortestSize: one shorter side per sample, drawn from the choices like
    // torch.randint(len(choices)); r = min(side / short, max_size / long); int(side * r).
    const int pick = s.size_choices[static_cast<size_t>(
        rng.RandInt(0, static_cast<int64_t>(s.size_choices.size())))];
    double r = static_cast<double>(pick) / static_cast<double>(std::min(v.h, v.w));
    if (s.max_size > 0) {
      r = std::min(r, static_cast<double>(s.max_size) / static_cast<double>(std::max(v.h, v.w)));
    }
    return Size2{Trunc(static_cast<double>(v.h) * r), Trunc(static_cast<double>(v.w) * r)};
  }
  if (s.size_max > 0) {
    // v2's RandomResize: one short side per sample, drawn like torch.randint(min, max).
    const int drawn = static_cast<int>(rng.RandInt(s.size_h, s.size_max));
    return ResizedOutputSize(v.h, v.w, drawn, s.size_w, s.max_size);
  }
  return ResizedOutputSize(v.h, v.w, s.size_h, s.size_w, s.max_size);
}

/// Plan's walk over the fused geometric steps of one sample, a step at a time: the view of the
/// source so far, the geometry it fills in, and what the flips so far leave (the keypoints'
/// offset, the mirroring of the image the next resize reads).
class GeometryPlanner {
 public:
  GeometryPlanner(int src_w, int src_h) { v_.Start(src_w, src_h); }

  /// Follows step `s`, drawing its random parameters from `rng`.
  void Step(const TransformStep& s, SampleRng& rng) {
    switch (s.kind()) {
      case Kind::kResize:
        Resize(s.get<ResizeParams>(), rng);
        break;
      case Kind::kCenterCrop:
        CenterCrop(s.get<CenterCropParams>());
        break;
      case Kind::kRandomResizedCrop:
        RandomResizedCrop(s.get<RandomResizedCropParams>(), rng);
        break;
      case Kind::kRandomHorizontalFlip:
        if (rng.Uniform() < s.get<HorizontalFlipParams>().p) {
          std::swap(v_.x0, v_.x1);
          key_dx_ = -1.0 - key_dx_;
          mirrored_x_ = !mirrored_x_;
        }
        break;
      case Kind::kRandomVerticalFlip:
        if (rng.Uniform() < s.get<VerticalFlipParams>().p) {
          std::swap(v_.y0, v_.y1);
          key_dy_ = -1.0 - key_dy_;
          mirrored_y_ = !mirrored_y_;
        }
        break;
      case Kind::kPad:
        Pad(s.get<PadParams>(), rng);
        break;
      case Kind::kRandomCrop:
        RandomCrop(s.get<RandomCropParams>(), rng);
        break;
      default:
        break;
    }
  }

  /// The geometry of the view after the last step.
  SampleGeometry Finish() {
    SampleGeometry& g = g_;
    View& v = v_;
    if (v.w <= 0 || v.h <= 0) {
      g.error = "Pad: negative padding removes the whole image";
      v.w = std::max<int64_t>(v.w, 1);
      v.h = std::max<int64_t>(v.h, 1);
    }
    g.x0 = v.x0, g.x1 = v.x1, g.y0 = v.y0, g.y1 = v.y1;
    g.out_w = static_cast<int>(v.w);
    g.out_h = static_cast<int>(v.h);
    g.key_dx = key_dx_, g.key_dy = key_dy_;
    g.clip_x0 = v.clip_x.lo, g.clip_x1 = v.clip_x.hi, g.clip_y0 = v.clip_y.lo, g.clip_y1 = v.clip_y.hi;
    g.read_x0 = v.read_x.lo, g.read_x1 = v.read_x.hi, g.read_y0 = v.read_y.lo, g.read_y1 = v.read_y.hi;
    g.show_x0 = v.show_x.lo, g.show_x1 = v.show_x.hi, g.show_y0 = v.show_y.lo, g.show_y1 = v.show_y.hi;
    return g;
  }

 private:
  void Resize(const ResizeParams& s, SampleRng& rng) {
    const Size2 n = ResizedSize(s, v_, rng);
    if (n.h == v_.h && n.w == v_.w) return;  // torchvision returns the image untouched
    key_dx_ *= static_cast<double>(std::max<int64_t>(n.w, 1)) / static_cast<double>(v_.w);
    key_dy_ *= static_cast<double>(std::max<int64_t>(n.h, 1)) / static_cast<double>(v_.h);
    v_.Resize();
    v_.w = std::max<int64_t>(n.w, 1);
    v_.h = std::max<int64_t>(n.h, 1);
    g_.filter = s.interpolation;
    g_.tensor = s.tensor;
    g_.reflect_x = mirrored_x_, g_.reflect_y = mirrored_y_;
  }

  void CenterCrop(const CenterCropParams& s) {
    const int64_t ch = s.size_h, cw = s.size_w;
    // torchvision pads with zeros first when the crop is larger, then crops the padded
    // image; padding by (c - size) // 2 on the leading side gives these offsets.
    const int64_t top = ch > v_.h ? -((ch - v_.h) / 2)
                                  : RoundHalfEven(static_cast<double>(v_.h - ch) / 2.0);
    const int64_t left = cw > v_.w ? -((cw - v_.w) / 2)
                                   : RoundHalfEven(static_cast<double>(v_.w - cw) / 2.0);
    v_.Crop(top, left, ch, cw);
  }

  void RandomResizedCrop(const RandomResizedCropParams& s, SampleRng& rng) {
    const CropBox box =
        RandomResizedCropBox(static_cast<int>(v_.w), static_cast<int>(v_.h), s.scale_min,
                             s.scale_max, s.ratio_min, s.ratio_max, rng);
    v_.Crop(box.top, box.left, box.height, box.width);
    v_.Resize();  // PIL resizes the cropped image: taps stop at the crop
    key_dx_ *= static_cast<double>(s.size_w) / static_cast<double>(v_.w);
    key_dy_ *= static_cast<double>(s.size_h) / static_cast<double>(v_.h);
    v_.w = s.size_w;
    v_.h = s.size_h;
    g_.filter = s.interpolation;
    g_.tensor = s.tensor;
    g_.reflect_x = mirrored_x_, g_.reflect_y = mirrored_y_;
  }

  /// Pad, or v2's RandomZoomOut (nothing when its draw skips it).
  void Pad(const PadParams& s, SampleRng& rng) {
    if (s.zoom_out) {
      // v2's RandomZoomOut: skipped when torch.rand(1) >= p; else ratio = lo + rand * (hi -
      // lo), canvas int(side * ratio), offsets int((canvas - side) * rand), in float32.
      if (Rand24(rng) >= static_cast<float>(s.p)) return;
      const float ratio = static_cast<float>(s.zoom_out->lo) +
                          Rand24(rng) * static_cast<float>(s.zoom_out->hi - s.zoom_out->lo);
      const int64_t cw = static_cast<int64_t>(static_cast<float>(v_.w) * ratio);
      const int64_t ch = static_cast<int64_t>(static_cast<float>(v_.h) * ratio);
      const float rx = Rand24(rng), ry = Rand24(rng);
      const int64_t left = static_cast<int64_t>(static_cast<float>(cw - v_.w) * rx);
      const int64_t top = static_cast<int64_t>(static_cast<float>(ch - v_.h) * ry);
      PadView(v_, left, top, cw - (left + v_.w), ch - (top + v_.h));
    } else {
      PadView(v_, s.pad[0], s.pad[1], s.pad[2], s.pad[3]);
    }
    TakeFill(s, &g_);
  }

  void RandomCrop(const RandomCropParams& s, SampleRng& rng) {
    TakeFill(s, &g_);
    // torchvision RandomCrop.forward: padding, then pad_if_needed on each axis (both sides
    // by the missing amount), then get_params.
    PadView(v_, s.pad[0], s.pad[1], s.pad[2], s.pad[3]);
    const int64_t th = s.size_h, tw = s.size_w;
    if (s.pad_if_needed && v_.w < tw) PadView(v_, tw - v_.w, 0, tw - v_.w, 0);
    if (s.pad_if_needed && v_.h < th) PadView(v_, 0, th - v_.h, 0, th - v_.h);
    if (v_.h < th || v_.w < tw) {
      g_.error = "RandomCrop: required crop size is larger than the (padded) input image";
      v_.Crop(0, 0, th, tw);
      return;
    }
    if (v_.h == th && v_.w == tw) return;
    const int64_t top = rng.RandInt(0, v_.h - th + 1);
    const int64_t left = rng.RandInt(0, v_.w - tw + 1);
    v_.Crop(top, left, th, tw);
  }

  View v_;
  SampleGeometry g_;
  double key_dx_ = 0, key_dy_ = 0;  // SampleGeometry::key_dx in the current image's pixels
  bool mirrored_x_ = false, mirrored_y_ = false;  // an odd number of flips so far
};

}  // namespace

/// torchvision.transforms.functional._compute_resized_output_size for an image of h x w.
Size2 ResizedOutputSize(int64_t h, int64_t w, int size_h, int size_w, int max_size) {
  if (size_w > 0) return {size_h, size_w};
  const bool w_short = w <= h;
  const int64_t short_side = w_short ? w : h;
  const int64_t long_side = w_short ? h : w;
  int64_t new_short = size_h;
  int64_t new_long =
      Trunc(static_cast<double>(size_h * long_side) / static_cast<double>(short_side));
  if (max_size > 0 && new_long > max_size) {
    new_short = Trunc(static_cast<double>(int64_t{max_size} * new_short) /
                      static_cast<double>(new_long));
    new_long = max_size;
  }
  return w_short ? Size2{new_long, new_short} : Size2{new_short, new_long};
}

SampleGeometry TransformPipeline::Plan(int src_w, int src_h, SampleRng& rng) const {
  GeometryPlanner planner(src_w, src_h);
  for (size_t i = 0; i < image_begin_ && i < steps_.size(); ++i) planner.Step(steps_[i], rng);
  return planner.Finish();
}

CropBox RandomResizedCropBox(int width, int height, double scale_min, double scale_max,
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
