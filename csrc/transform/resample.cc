#include "transform/resample.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "transform/resample_kernels.h"

namespace ringloader {
namespace {

using resample_internal::Clip8;
using resample_internal::HorizontalTaps;
using resample_internal::kHalf;
using resample_internal::VerticalScalar;

/// Pillow's 22-bit weights do not fit the 16-bit multipliers of pmaddwd, so each weight w is
/// split into w = hi * 2^15 + lo with lo in [0, 2^15) and hi = w >> 15 (a few bits, signed),
/// and the kernel keeps two sums: sum(p * lo) and sum(p * hi), each exact in 32 bits per
/// pmaddwd, combined as sum_lo + (sum_hi << 15). Every add wraps modulo 2^32 and the true sum
/// fits in 32 bits (as in Pillow's int accumulator), so the result is that sum exactly:
/// bit-identical to the scalar kernel for any tap count and any filter.
///
/// PairWeights' layout: per pair of output pixels (x, x+1) and per pair of taps (2s, 2s+1),
/// 16 lo values then 16 hi values; the first 8 of each belong to pixel x, the last 8 to pixel
/// x+1, and each pixel's 8 are (w_2s, w_2s+1) repeated for R, G, B and X. A missing tap (odd
/// count) or pixel (odd width) weighs 0. `offsets` gets each pixel's first tap as a byte offset
/// from source column `first`, the odd width's missing pixel repeating the last one.
void PairWeights(const int32_t* weights, const int32_t* bounds, int first, int taps, int out_w,
                 std::vector<int16_t>* out, std::vector<uint32_t>* offsets) {
  const int tap_pairs = (taps + 1) / 2;
  const int pixel_pairs = (out_w + 1) / 2;
  out->assign(static_cast<size_t>(pixel_pairs) * tap_pairs * 32, 0);
  offsets->resize(static_cast<size_t>(pixel_pairs) * 2);
  for (int x = 0; x < pixel_pairs * 2; ++x) {
    (*offsets)[x] = static_cast<uint32_t>(bounds[2 * std::min(x, out_w - 1)] - first) * 4;
  }
  for (int j = 0; j < pixel_pairs; ++j) {
    for (int s = 0; s < tap_pairs; ++s) {
      int16_t* lo = out->data() + (static_cast<size_t>(j) * tap_pairs + s) * 32;
      int16_t* hi = lo + 16;
      for (int half = 0; half < 2; ++half) {
        const int x = 2 * j + half;
        for (int u = 0; u < 2; ++u) {
          const int t = 2 * s + u;
          const int32_t w = x < out_w && t < taps ? weights[static_cast<size_t>(x) * taps + t] : 0;
          const auto w_lo = static_cast<int16_t>(w & 0x7fff);
          const auto w_hi = static_cast<int16_t>(w >> 15);
          for (int c = 0; c < 4; ++c) {
            lo[half * 8 + 2 * c + u] = w_lo;
            hi[half * 8 + 2 * c + u] = w_hi;
          }
        }
      }
    }
  }
}

// The two kernels below carry almost all resampling time. Each has a portable scalar version
// and an AVX2 version (resample_x86.cc: SSE4.1/AVX2 intrinsics in target("avx2") functions),
// picked once at startup from the CPU's feature bits, so the same binary runs everywhere. On
// AArch64 the NEON versions (resample_neon.cc) always run: NEON is part of that
// architecture's baseline.

/// Horizontal pass of one row: `src` is RGBX (4 bytes per pixel) whose first pixel is source
/// column `origin`; writes out_w RGB levels to `dst`.
void HorizontalScalar(const uint8_t* src, int origin, const HorizontalTaps& h, uint8_t* dst) {
  for (int x = 0; x < h.out_w; ++x) {
    const int n = h.bounds[2 * x + 1];
    const uint8_t* p = src + static_cast<ptrdiff_t>(h.bounds[2 * x] - origin) * 4;
    const int32_t* k = h.weights + static_cast<ptrdiff_t>(x) * h.taps;
    int32_t r = kHalf, g = kHalf, b = kHalf;
    for (int t = 0; t < n; ++t) {
      const int32_t w = k[t];
      r += p[4 * t + 0] * w;
      g += p[4 * t + 1] * w;
      b += p[4 * t + 2] * w;
    }
    dst[3 * x + 0] = Clip8(r);
    dst[3 * x + 1] = Clip8(g);
    dst[3 * x + 2] = Clip8(b);
  }
}


using HorizontalFn = void (*)(const uint8_t* src, int origin, const HorizontalTaps& taps,
                              uint8_t* dst);
using VerticalFn = void (*)(const uint8_t*, size_t, int, const int32_t*, int, uint8_t*);
using StorePlanar32Fn = void (*)(const uint8_t* levels, int out_w, const uint32_t (*lut)[256],
                                 uint32_t* row, size_t plane);
using StorePlanar8Fn = void (*)(const uint8_t* levels, int out_w, uint8_t* row, size_t plane);
using CopyRgbxFn = int (*)(const uint8_t* src, int step, int n, uint8_t* dst);
using StorePlanar32OpsFn = void (*)(const uint8_t* levels, int out_w, const uint32_t (*lut)[256],
                                    const LevelOps& ops, uint32_t* row, size_t plane);

struct Kernels {
  HorizontalFn horizontal = HorizontalScalar;
  VerticalFn vertical = VerticalScalar;
  // CHW write-outs for this CPU; null: WriteRow's.
  StorePlanar32Fn store_planar32 = nullptr;
  StorePlanar8Fn store_planar8 = nullptr;
  StorePlanar32OpsFn store_planar32_ops = nullptr;  // float32 values computed, not looked up
  // The copying horizontal pass for steps of 1 and -1 (a prefix); null: pixel by pixel.
  CopyRgbxFn copy_rgbx = nullptr;
  bool pair_weights = false;  // horizontal takes PairWeights' layout
};

Kernels BestKernels() {
  Kernels k;
#ifdef RL_HAVE_AVX2_KERNELS
  if (resample_internal::CpuHasAvx2()) {
    k.horizontal = resample_internal::HorizontalAvx2;
    k.vertical = resample_internal::VerticalAvx2;
    k.store_planar32 = resample_internal::StorePlanar32Avx2;
    k.store_planar8 = resample_internal::StorePlanar8Avx2;
    k.copy_rgbx = resample_internal::CopyRgbxAvx2;
    k.store_planar32_ops = resample_internal::StorePlanar32OpsAvx2;
    k.pair_weights = true;
  }
#endif
#if defined(__aarch64__)
  k.horizontal = [](const uint8_t* src, int origin, const HorizontalTaps& h, uint8_t* dst) {
    resample_internal::HorizontalNeon(src, origin, h.bounds, h.weights, h.taps, h.out_w, dst);
  };
  k.vertical = resample_internal::VerticalNeon;
  k.store_planar8 = resample_internal::StorePlanar8Neon;
#endif
  return k;
}

Kernels& MutableKernels() {
  static Kernels kernels = BestKernels();
  return kernels;
}

const Kernels& GetKernels() { return MutableKernels(); }

/// Stores pixels [x0, x1) of output row y through the per-channel lookup table: those of
/// `levels` (the row's levels from its pixel 0), or with `fill` (3 levels) that pixel each.
/// T is the element's bit type.
template <typename T>
void WriteRow(const uint8_t* levels, const uint8_t* fill, int x0, int x1, int out_w, int out_h,
              int y, Layout layout, const uint32_t (*lut)[256], void* dst) {
  T* base = static_cast<T*>(dst);
  const size_t step = fill != nullptr ? 0 : 3;
  const uint8_t* first = fill != nullptr ? fill : levels + static_cast<size_t>(x0) * 3;
  if (layout == Layout::kHWC) {
    T* row = base + static_cast<size_t>(y) * out_w * 3;
    const uint8_t* p = first;
    for (int x = x0; x < x1; ++x, p += step) {
      row[3 * x + 0] = static_cast<T>(lut[0][p[0]]);
      row[3 * x + 1] = static_cast<T>(lut[1][p[1]]);
      row[3 * x + 2] = static_cast<T>(lut[2][p[2]]);
    }
  } else {
    const size_t plane = static_cast<size_t>(out_h) * out_w;
    for (int c = 0; c < 3; ++c) {
      T* row = base + c * plane + static_cast<size_t>(y) * out_w;
      const uint32_t* l = lut[c];
      if (fill != nullptr) {
        std::fill(row + x0, row + x1, static_cast<T>(l[fill[c]]));
      } else {
        for (int x = x0; x < x1; ++x) row[x] = static_cast<T>(l[levels[3 * x + c]]);
      }
    }
  }
}

/// Pillow's filter kernels (Resample.c) and their support at scale 1.
double FilterSupport(Interpolation f) {
  switch (f) {
    case Interpolation::kBox: return 0.5;
    case Interpolation::kBicubic: return 2.0;
    case Interpolation::kLanczos: return 3.0;
    default: return 1.0;  // bilinear, hamming
  }
}

double Sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= M_PI;
  return std::sin(x) / x;
}

double FilterWeight(Interpolation f, double x) {
  switch (f) {
    case Interpolation::kBox:
      return (x > -0.5 && x <= 0.5) ? 1.0 : 0.0;  // half-open, as Pillow: not symmetric
    case Interpolation::kBicubic: {
      constexpr double a = -0.5;
      x = std::abs(x);
      if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
      if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
      return 0.0;
    }
    case Interpolation::kHamming:
      x = std::abs(x);
      if (x == 0.0) return 1.0;
      if (x >= 1.0) return 0.0;
      x *= M_PI;
      return std::sin(x) / x * (0.54f + 0.46f * std::cos(x));  // float constants, as Pillow
    case Interpolation::kLanczos:
      return (-3.0 <= x && x < 3.0) ? Sinc(x) * Sinc(x / 3.0) : 0.0;
    default:
      x = std::abs(x);
      return x < 1.0 ? 1.0 - x : 0.0;
  }
}

/// Pillow's normalize_coeffs_8bpc: round half away from zero into fixed point.
int32_t FixedWeight(double v) {
  const double scaled = v * (1 << kResamplePrecisionBits);
  return static_cast<int32_t>(v < 0 ? -0.5 + scaled : 0.5 + scaled);
}

/// torch's int16 tap of `v` at `precision` fractional bits (TensorAxisTaps: rounded half away
/// from zero), in kResamplePrecisionBits fixed point: (2^(p-1) + sum(v * w)) >> p equals
/// (2^21 + sum(v * (w << (22 - p)))) >> 22, so the resampler's sums give torch's levels.
int32_t TensorWeight(double v, int precision) {
  return static_cast<int32_t>(TensorTap(v, static_cast<unsigned>(precision))) *
         (int32_t{1} << (kResamplePrecisionBits - precision));
}

/// Converts a window edge to int without overflow for absurd geometries.
inline int ClampToInt(double v, double edge) {
  return static_cast<int>(std::clamp(v, -1.0, edge));
}

bool SameFormat(const OutputFormat& a, const OutputFormat& b) {
  return a.dtype == b.dtype && std::memcmp(a.scale, b.scale, sizeof(a.scale)) == 0 &&
         std::memcmp(a.bias, b.bias, sizeof(a.bias)) == 0 && a.exact == b.exact &&
         (!a.exact || std::memcmp(a.values.data(), b.values.data(), sizeof(a.values)) == 0);
}

}  // namespace

namespace resample_internal {

void VerticalScalar(const uint8_t* rows, size_t stride, int n, const int32_t* k, int width,
                    uint8_t* out) {
  for (int i = 0; i < width; ++i) {
    int32_t acc = kHalf;
    for (int t = 0; t < n; ++t) acc += rows[static_cast<size_t>(t) * stride + i] * k[t];
    out[i] = Clip8(acc);
  }
}

}  // namespace resample_internal

OutputFormat OutputFormat::FromPipeline(const TransformPipeline& pipeline) {
  OutputFormat f;
  f.dtype = pipeline.dtype();
  f.layout = pipeline.layout();
  for (int c = 0; c < 3; ++c) {
    f.scale[c] = pipeline.scale()[c];
    f.bias[c] = pipeline.bias()[c];
  }
  f.exact = true;
  std::copy(pipeline.values(), pipeline.values() + f.values.size(), f.values.begin());
  f.ops = pipeline.level_ops();
  return f;
}

void GeometryToAxes(const SampleGeometry& g, double factor, int src_w, int src_h, AxisMapping* x,
                    AxisMapping* y) {
  x->begin = g.x0 * factor;
  x->end = g.x1 * factor;
  y->begin = g.y0 * factor;
  y->end = g.y1 * factor;
  if (g.clip_x1 > g.clip_x0) {
    x->clip_lo = g.clip_x0 * factor;
    x->clip_hi = g.clip_x1 * factor;
  } else {
    x->clip_lo = 0;
    x->clip_hi = src_w;
  }
  if (g.clip_y1 > g.clip_y0) {
    y->clip_lo = g.clip_y0 * factor;
    y->clip_hi = g.clip_y1 * factor;
  } else {
    y->clip_lo = 0;
    y->clip_hi = src_h;
  }
  x->read_lo = g.read_x0 * factor;
  x->read_hi = g.read_x1 * factor;
  y->read_lo = g.read_y0 * factor;
  y->read_hi = g.read_y1 * factor;
  x->show_lo = g.show_x0 * factor;
  x->show_hi = g.show_x1 * factor;
  y->show_lo = g.show_y0 * factor;
  y->show_hi = g.show_y1 * factor;
  x->out_size = g.out_w;
  y->out_size = g.out_h;
  x->filter = y->filter = g.filter;
  x->tensor_nearest = y->tensor_nearest =
      g.tensor_nearest || (g.tensor && g.filter == Interpolation::kNearest);
  x->tensor_taps = y->tensor_taps =
      g.tensor && (g.filter == Interpolation::kBilinear || g.filter == Interpolation::kBicubic);
  // Mirrored about the decoded image's edge: exact at full scale only (a DCT-scaled image's last
  // pixel may cover part of one, where its mirror would shift the image; the output's mirror
  // stays the approximation there, as the scaled decode is one).
  x->reflect = g.reflect_x && factor == 1.0;
  y->reflect = g.reflect_y && factor == 1.0;
}

int AxisCoeffs::Taps(Interpolation filter, double center, int xmin, int n, int keep_lo,
                     int keep_hi, double inv_filterscale, int32_t* k) {
  n = std::max(n, 0);
  if (scratch_.size() < static_cast<size_t>(n)) scratch_.resize(n);
  double ww = 0.0;
  for (int t = 0; t < n; ++t) {
    const double w = FilterWeight(filter, (t + xmin - center + 0.5) * inv_filterscale);
    scratch_[t] = w;
    ww += w;
  }
  // Pillow normalises over the whole window and multiplies the padding's zeros by their
  // weights; leaving those taps out gives the same sums.
  const int t0 = std::clamp(keep_lo - xmin, 0, n);
  const int t1 = std::clamp(keep_hi - xmin, t0, n);
  for (int t = t0; t < t1; ++t) {
    const double v = ww != 0.0 ? scratch_[t] / ww : scratch_[t];
    k[t - t0] = tensor_precision_ < 0 ? FixedWeight(v) : TensorWeight(v, tensor_precision_);
  }
  return ww == 0.0 ? 0 : t1 - t0;
}

int AxisCoeffs::TensorPrecision(int in_size, int64_t resized, Interpolation filter) {
  // torch's precision follows the largest tap of the whole resize, of which the axis shows part.
  tensor_.Compute(in_size, static_cast<int>(resized), filter == Interpolation::kBicubic);
  return static_cast<int>(tensor_.precision);
}

namespace {

/// `m` in the coordinates of the source mirrored about its centre (c -> src_size - c): the
/// pixel grid maps onto itself, pixel j onto src_size - 1 - j.
AxisMapping Reflected(const AxisMapping& m, int src_size) {
  const double s = src_size;
  AxisMapping r = m;
  r.begin = s - m.begin;
  r.end = s - m.end;
  r.clip_lo = s - m.clip_hi;
  r.clip_hi = s - m.clip_lo;
  r.read_lo = s - m.read_hi;
  r.read_hi = s - m.read_lo;
  r.show_lo = s - m.show_hi;
  r.show_hi = s - m.show_lo;
  r.reflect = false;
  return r;
}

}  // namespace

void AxisCoeffs::Compute(const AxisMapping& given, int src_size) {
  // A resize of the mirrored source: its taps on the mirrored source, mirrored back below.
  const AxisMapping m = given.reflect ? Reflected(given, src_size) : given;
  const int out = std::max(m.out_size, 0);
  const bool mirrored = m.end < m.begin;
  const double lo = mirrored ? m.end : m.begin;
  const double hi = mirrored ? m.begin : m.end;
  const double scale = out > 0 ? (hi - lo) / out : 1.0;
  const bool nearest = m.filter == Interpolation::kNearest;
  const double edge = static_cast<double>(src_size) + 1.0;
  // The clip box rounded to pixel edges; it reaches beyond the source where the resized image
  // was padded. Taps read only [read_lo, read_hi): the source pixels the crops before the
  // resize kept. The bound keeps absurd paddings inside int.
  constexpr double kFar = 1 << 30;
  const auto pixel_edge = [&](double v) {
    return static_cast<int>(std::floor(std::clamp(v, -kFar, kFar) + 0.5));
  };
  const int clip_lo = pixel_edge(m.clip_lo);
  const int clip_hi = pixel_edge(m.clip_hi);
  const int read_lo = std::max({0, clip_lo, pixel_edge(m.read_lo)});
  const int read_hi = std::min({src_size, clip_hi, pixel_edge(m.read_hi)});

  // Pillow resizes the clip box (the image the last resize read: the whole image, or the crop
  // of RandomResizedCrop) into `resized` pixels, computing every filter position relative to
  // that image; this axis shows `out` of those pixels starting at `offset`. When the box starts
  // on a whole pixel (always, at full decode scale) the same arithmetic is done here, so the
  // taps are bit-identical to Pillow's even where a tap sits exactly on a filter edge (box).
  // (The view must lie on that image's pixel grid; otherwise the absolute form below is used.)
  const double resized_f = out > 0 ? (m.clip_hi - m.clip_lo) / scale : 0.0;
  const double offset_f = out > 0 ? (lo - m.clip_lo) / scale : 0.0;
  const bool exact = m.clip_hi > m.clip_lo && out > 0 &&
                     std::abs(m.clip_lo - std::round(m.clip_lo)) < 1e-9 &&
                     std::abs(resized_f - std::round(resized_f)) < 1e-6 &&
                     std::abs(offset_f - std::round(offset_f)) < 1e-6 && resized_f >= 0.5;
  double in_scale = scale;  // Pillow's (in1 - in0) / outSize
  int64_t offset = 0, resized = out;
  int base = 0, in_size = src_size;
  if (exact) {
    resized = std::llround(resized_f);
    in_scale = static_cast<double>(static_cast<float>(m.clip_hi - m.clip_lo)) /
               static_cast<double>(resized);
    offset = std::llround(offset_f);
    base = clip_lo;
    in_size = std::max(0, clip_hi - clip_lo);
  }
  // The resized pixels the crops after the resize keep, as indices of the resized image (exact)
  // or source coordinates: outputs centred outside are zero padding.
  const auto resized_index = [&](double v) {
    return std::llround(std::clamp((v - m.clip_lo) / scale, -1.0, static_cast<double>(resized) + 1));
  };
  const int64_t show_lo = exact ? std::max<int64_t>(0, resized_index(m.show_lo)) : 0;
  const int64_t show_hi = exact ? std::min<int64_t>(resized, resized_index(m.show_hi)) : 0;
  resize_in_ = exact ? in_size : std::max(0.0, m.clip_hi - m.clip_lo);
  resize_out_ = exact ? static_cast<double>(resized) : resized_f;
  const double filterscale = std::max(in_scale, 1.0);
  const double support = nearest ? 0.5 : FilterSupport(m.filter) * filterscale;
  // Pillow's ksize. No window holds more than the whole source, which bounds the table for
  // absurd geometries.
  const int ksize =
      static_cast<int>(std::ceil(std::min(support, static_cast<double>(src_size) + 1.0))) * 2 + 1;
  // Pillow's window over the resized image, which padding can make wider than the source (only
  // the taps inside the source are stored, so ksize still bounds them).
  const int window =
      static_cast<int>(std::ceil(std::min(support, static_cast<double>(in_size) + 1.0))) * 2 + 1;
  const double inv_filterscale = 1.0 / filterscale;

  out_size_ = out;
  ksize_ = ksize;
  if (bounds_.size() < static_cast<size_t>(out) * 2) bounds_.resize(static_cast<size_t>(out) * 2);
  const size_t nweights = static_cast<size_t>(out) * ksize;
  if (weights_.size() < nweights) weights_.resize(nweights);
  if (scratch_.size() < static_cast<size_t>(window)) scratch_.resize(window);

  // Nearest: Pillow's resize(NEAREST) is an affine scale whose source position is accumulated
  // pixel by pixel (xo += a0) and truncated (COORD).
  double xo = in_scale * 0.5;
  int64_t next_k = 0;
  tensor_precision_ =
      exact && m.tensor_taps && in_size > 0 ? TensorPrecision(in_size, resized, m.filter) : -1;

  int first = src_size, last = 0;
  for (int xx = 0; xx < out; ++xx) {
    int32_t* k = weights_.data() + static_cast<size_t>(xx) * ksize;
    std::fill(k, k + ksize, 0);
    int xmin = 0, n = 0;
    if (exact) {
      const int64_t kx = offset + xx;  // index in the resized image
      if (kx >= show_lo && kx < show_hi && in_size > 0) {  // outside: zero padding
        if (nearest) {
          int xin;
          if (m.tensor_nearest) {
            // ATen's nearest_idx: the scale and the product in float, floored, clamped.
            const float s = static_cast<float>(in_size) / static_cast<float>(resized);
            xin = std::min(static_cast<int>(std::floor(static_cast<float>(kx) * s)), in_size - 1);
          } else {
            for (; next_k < kx; ++next_k) xo += in_scale;
            xin = xo < 0.0 ? -1 : static_cast<int>(xo);
          }
          if (xin >= 0 && xin < in_size && base + xin >= read_lo && base + xin < read_hi) {
            xmin = base + xin;
            n = 1;
            k[0] = 1 << kResamplePrecisionBits;
          }
        } else {
          const double center = (static_cast<double>(kx) + 0.5) * in_scale;
          const int rmin = std::max(0, static_cast<int>(center - support + 0.5));
          const int rmax = std::min(in_size, static_cast<int>(center + support + 0.5));
          n = Taps(m.filter, center, rmin, std::min(rmax - rmin, window), read_lo - base,
                   read_hi - base, inv_filterscale, k);
          xmin = base + std::max(rmin, read_lo - base);
        }
      }
    } else {
      // Scaled decode (fractional clip box): the same filter in source coordinates.
      const double center = lo + (xx + 0.5) * scale;
      if (center >= m.clip_lo && center < m.clip_hi && center >= m.show_lo &&
          center < m.show_hi && read_hi > read_lo) {
        xmin = std::max(read_lo, ClampToInt(std::floor(center - support + 0.5), edge));
        const int xmax = std::min(read_hi, ClampToInt(std::floor(center + support + 0.5), edge));
        n = std::max(0, std::min(xmax - xmin, ksize));
        if (nearest && n > 0) {
          xmin = std::clamp(static_cast<int>(std::floor(center)), xmin, xmin + n - 1);
          n = 1;
          k[0] = 1 << kResamplePrecisionBits;
        } else {
          n = Taps(m.filter, center, xmin, n, xmin, xmin + n, inv_filterscale, k);
        }
      }
    }
    if (given.reflect && n > 0) {
      std::reverse(k, k + n);  // taps [xmin, xmin + n) of the mirrored source
      xmin = src_size - (xmin + n);
    }
    bounds_[2 * xx] = xmin;
    bounds_[2 * xx + 1] = n;
    if (n > 0) {
      first = std::min(first, xmin);
      last = std::max(last, xmin + n);
    }
  }
  // Coefficients of the unmirrored box in reverse order: an exact mirror of the output.
  if (mirrored) ReverseOutputs();
  if (last > first) {
    first_ = first;
    end_ = last;
  } else {
    first_ = end_ = 0;
  }
  EqualizeTaps();
  FindCopies();
}

void AxisCoeffs::FindCopies() {
  constexpr int32_t kOne = 1 << kResamplePrecisionBits;
  const int out = out_size_, taps = ksize_;
  copies_ = true;
  copy_lo_ = copy_hi_ = copy_step_ = 0;
  if (copy_source_.size() < static_cast<size_t>(out)) copy_source_.resize(out);
  int lo = -1, hi = 0, count = 0;
  for (int xx = 0; xx < out && copies_; ++xx) {
    const int32_t* k = weights_.data() + static_cast<size_t>(xx) * taps;
    int source = -1;
    for (int t = 0; t < bounds_[2 * xx + 1] && copies_; ++t) {
      if (k[t] == 0) continue;
      copies_ = k[t] == kOne && source < 0;
      source = bounds_[2 * xx] + t;
    }
    copy_source_[xx] = source;
    if (source < 0) continue;
    if (lo < 0) lo = xx;
    hi = xx + 1;
    ++count;
  }
  if (!copies_ || lo < 0) return;
  copy_lo_ = lo;
  copy_hi_ = hi;
  const int step = hi - lo > 1 ? copy_source_[lo + 1] - copy_source_[lo] : 1;
  if (count != hi - lo || (step != 1 && step != -1)) return;
  for (int xx = lo + 1; xx < hi; ++xx) {
    if (copy_source_[xx] - copy_source_[xx - 1] != step) return;
  }
  copy_step_ = step;
}

void AxisCoeffs::ReverseOutputs() {
  const int out = out_size_, ksize = ksize_;
  for (int a = 0, b = out - 1; a < b; ++a, --b) {
    std::swap(bounds_[2 * a], bounds_[2 * b]);
    std::swap(bounds_[2 * a + 1], bounds_[2 * b + 1]);
    std::swap_ranges(weights_.begin() + static_cast<ptrdiff_t>(a) * ksize,
                     weights_.begin() + static_cast<ptrdiff_t>(a + 1) * ksize,
                     weights_.begin() + static_cast<ptrdiff_t>(b) * ksize);
  }
}

void AxisCoeffs::EqualizeTaps() {
  const int out = out_size_, ksize = ksize_;
  // Give every output the same number of taps (the largest), zero-padded and shifted to stay
  // inside [first_, end_): the kernels' inner loops then have a fixed trip count, which removes
  // a branch misprediction per output pixel. Zero weights do not change any sum.
  int taps = 0;
  for (int xx = 0; xx < out; ++xx) taps = std::max(taps, bounds_[2 * xx + 1]);
  taps = std::min(taps, end_ - first_);
  if (row_tmp_.size() < static_cast<size_t>(ksize)) row_tmp_.resize(ksize);
  for (int xx = 0; xx < out; ++xx) {
    // Rows move to a stride of `taps` <= ksize, so row xx only ever overlaps its own old slot.
    const int start = bounds_[2 * xx];
    const int n = bounds_[2 * xx + 1];
    std::copy_n(weights_.begin() + static_cast<ptrdiff_t>(xx) * ksize, n, row_tmp_.begin());
    const int new_start = n > 0 ? std::min(start, end_ - taps) : first_;
    int32_t* k = weights_.data() + static_cast<size_t>(xx) * taps;
    std::fill(k, k + taps, 0);
    std::copy_n(row_tmp_.begin(), n, k + (start - new_start) * (n > 0));
    bounds_[2 * xx] = new_start;
    bounds_[2 * xx + 1] = taps;
  }
  ksize_ = taps;
}

bool ResizesVerticallyFirst(double in_w, double in_h, double out_w, double out_h) {
  // A pass whose size does not change is skipped (the clip box is the whole image Pillow
  // resizes, so no box offset forces it); with one pass there is no order.
  const bool horizontal = out_w != in_w;
  const bool vertical = out_h != in_h;
  return horizontal && vertical && in_h > out_h && in_h - out_h > 2 * (in_w - out_w);
}

bool ResizesVerticallyFirst(const AxisMapping& x, const AxisCoeffs& xc, const AxisCoeffs& yc) {
  return !x.tensor_taps &&
         ResizesVerticallyFirst(xc.resize_in(), yc.resize_in(), xc.resize_out(), yc.resize_out());
}

void Resampler::Prepare(const AxisMapping& x, const AxisMapping& y, int src_w, int src_h) {
  xc_.Compute(x, src_w);
  yc_.Compute(y, src_h);
  x_origin_ = 0;
  vertical_first_ = ResizesVerticallyFirst(x, xc_, yc_);
  // Padding after each row of levels absorbs the horizontal kernel's 4-byte store of the last
  // pixel.
  const size_t level_bytes = static_cast<size_t>(xc_.out_size()) * 3 + 4;
  if (vertical_first_) {
    tmp_stride_ = static_cast<size_t>(xc_.end() - xc_.first()) * 4;
    if (column_row_.size() < tmp_stride_) column_row_.resize(tmp_stride_);
  } else {
    tmp_stride_ = level_bytes;
  }
  const size_t rows = static_cast<size_t>(yc_.end() - yc_.first());
  if (tmp_.size() < rows * tmp_stride_) tmp_.resize(rows * tmp_stride_);
  if (levels_.size() < level_bytes) levels_.resize(level_bytes);
  if (GetKernels().pair_weights) {
    PairWeights(xc_.weights(), xc_.bounds(), xc_.first(), xc_.ksize(), xc_.out_size(),
                &pair_weights_, &pair_offsets_);
  }
}

uint64_t Resampler::IntermediateBytes(const AxisMapping& x, const AxisMapping& y, int src_w, int src_h) {
  AxisCoeffs xc, yc;
  xc.Compute(x, src_w);
  yc.Compute(y, src_h);
  const uint64_t level_bytes = static_cast<uint64_t>(xc.out_size()) * 3 + 4;
  const uint64_t cols = static_cast<uint64_t>(std::max(0, xc.end() - xc.first()));
  const uint64_t rows = static_cast<uint64_t>(std::max(0, yc.end() - yc.first()));
  const bool vertical_first = ResizesVerticallyFirst(x, xc, yc);
  const uint64_t stride = vertical_first ? cols * 4 : level_bytes;
  // Taps (int32 weights and bounds of both axes, the kernel's pairs) beside the rows.
  const uint64_t taps = (static_cast<uint64_t>(xc.out_size()) * (xc.ksize() + 2) +
                         static_cast<uint64_t>(yc.out_size()) * (yc.ksize() + 2)) * 8;
  return rows * stride + (vertical_first ? cols * 4 : 0) + level_bytes + cols * 4 + taps;
}

uint64_t Resampler::RetainedBytes() const {
  return tmp_.capacity() + column_row_.capacity() + rgbx_row_.capacity() + levels_.capacity() +
         pair_weights_.capacity() * sizeof(int16_t) + pair_offsets_.capacity() * sizeof(uint32_t);
}

void Resampler::Trim() {
  std::vector<uint8_t>().swap(tmp_);
  std::vector<uint8_t>().swap(column_row_);
  std::vector<uint8_t>().swap(rgbx_row_);
}

void Resampler::HorizontalPass(const uint8_t* src, int origin, uint8_t* dst) const {
  if (xc_.copies()) {
    // Zeros outside the copied span, each output inside its source pixel's R, G, B (4 bytes
    // stored a pixel, the 4th overwritten by the next pixel or the padding after the row).
    const int lo = xc_.copy_lo(), hi = xc_.copy_hi(), out_w = xc_.out_size();
    const int32_t* source = xc_.copy_source();
    std::memset(dst, 0, static_cast<size_t>(lo) * 3);
    const int step = xc_.copy_step();
    if (step != 0) {
      const uint8_t* p = src + static_cast<ptrdiff_t>(source[lo] - origin) * 4;
      int x = lo;
      const CopyRgbxFn copy = GetKernels().copy_rgbx;
      if (copy != nullptr && (step == 1 || step == -1)) {
        const int done = copy(p, step, hi - lo, dst + static_cast<size_t>(lo) * 3);
        x += done;
        p += static_cast<ptrdiff_t>(done) * step * 4;
      }
      for (; x < hi; ++x, p += step * 4) std::memcpy(dst + static_cast<size_t>(x) * 3, p, 4);
    } else {
      for (int x = lo; x < hi; ++x) {
        uint8_t* d = dst + static_cast<size_t>(x) * 3;
        if (source[x] < 0) {
          std::memset(d, 0, 3);
        } else {
          std::memcpy(d, src + static_cast<ptrdiff_t>(source[x] - origin) * 4, 3);
        }
      }
    }
    std::memset(dst + static_cast<size_t>(hi) * 3, 0, static_cast<size_t>(out_w - hi) * 3);
    return;
  }
  const HorizontalTaps taps{xc_.bounds(),         xc_.weights(), pair_weights_.data(),
                            pair_offsets_.data(), xc_.first(),   xc_.ksize(),
                            xc_.out_size()};
  GetKernels().horizontal(src, origin, taps, dst);
}

void Resampler::VerticalPass(const uint8_t* rows, int y, int width, uint8_t* out) const {
  if (width <= 0) return;  // no columns: the output is padding across (out may be null)
  if (yc_.copies()) {
    const int32_t source = yc_.copy_source()[y];
    if (source < 0) {
      std::memset(out, 0, static_cast<size_t>(width));
    } else {
      std::memcpy(out, tmp_.data() + static_cast<size_t>(source - yc_.first()) * tmp_stride_,
                  static_cast<size_t>(width));
    }
    return;
  }
  GetKernels().vertical(rows, tmp_stride_, yc_.bounds()[2 * y + 1],
                        yc_.weights() + static_cast<size_t>(y) * yc_.ksize(), width, out);
}

void Resampler::AddRow(int y, const uint8_t* rgbx) {
  if (y < yc_.first() || y >= yc_.end()) return;
  uint8_t* dst = tmp_.data() + static_cast<size_t>(y - yc_.first()) * tmp_stride_;
  if (vertical_first_) {
    // No columns (the output is padding across): nothing to keep, and tmp_ may be unallocated.
    if (tmp_stride_ != 0) {
      std::memcpy(dst, rgbx + static_cast<ptrdiff_t>(xc_.first() - x_origin_) * 4, tmp_stride_);
    }
    return;
  }
  HorizontalPass(rgbx, x_origin_, dst);
}

bool Resampler::computes_values() const {
  return lut_ops_ && lut_fmt_.layout == Layout::kCHW && GetKernels().store_planar32_ops != nullptr;
}

void Resampler::PrepareLut(const OutputFormat& fmt) {
  // Kept while the format and the kernels stay (SetResampleSimdForTesting may swap them).
  const StorePlanar32OpsFn ops = GetKernels().store_planar32_ops;
  if (lut_valid_ && SameFormat(fmt, lut_fmt_) && (ops != nullptr) == probed_) return;
  probed_ = ops != nullptr;
  for (int c = 0; c < 3; ++c) {
    for (int level = 0; level < 256; ++level) {
      const float v = fmt.exact ? fmt.values[static_cast<size_t>(c) * 256 + level]
                                : static_cast<float>(level) * fmt.scale[c] + fmt.bias[c];
      uint32_t bits = 0;
      switch (fmt.dtype) {
        case DType::kUint8:
          bits = static_cast<uint32_t>(std::clamp(std::nearbyint(v), 0.0f, 255.0f));
          break;
        case DType::kFloat32:
          bits = std::bit_cast<uint32_t>(v);
          break;
        case DType::kFloat16:
          bits = FloatToHalf(v);
          break;
        case DType::kBFloat16:
          bits = FloatToBFloat16(v);
          break;
      }
      lut_[c][level] = bits;
    }
  }
  lut_fmt_ = fmt;
  lut_valid_ = true;
  lut_identity_ = fmt.dtype == DType::kUint8;
  for (int c = 0; c < 3 && lut_identity_; ++c) {
    for (int level = 0; level < 256 && lut_identity_; ++level) {
      lut_identity_ = lut_[c][level] == static_cast<uint32_t>(level);
    }
  }
  // The lanes' arithmetic is used only where it gives every level's value bit for bit: checked
  // once per format by the kernel itself, on a row holding each level in each channel (and 8
  // more pixels, so that none of the 256 falls in the row's looked-up tail).
  lut_ops_ = false;
  if (ops != nullptr && fmt.dtype == DType::kFloat32 && fmt.exact && fmt.ops.n >= 0) {
    constexpr int kProbe = 256 + 8;
    std::array<uint8_t, 3 * kProbe> probe{};
    for (int i = 0; i < 3 * 256; ++i) probe[i] = static_cast<uint8_t>(i / 3);
    std::array<uint32_t, 3 * kProbe> got;
    ops(probe.data(), kProbe, lut_, fmt.ops, got.data(), kProbe);
    lut_ops_ = true;
    for (int c = 0; c < 3; ++c) {
      lut_ops_ = lut_ops_ && std::memcmp(got.data() + c * kProbe, lut_[c], sizeof(lut_[c])) == 0;
    }
  }
}

void Resampler::Finish(const OutputFormat& fmt, void* dst) {
  PrepareLut(fmt);
  const int out_w = xc_.out_size();
  const int out_h = yc_.out_size();
  const int width = out_w * 3;
  const int32_t* bounds = yc_.bounds();
  // uint8 HWC levels as they are (the image stage's input, or a uint8 batch): the vertical
  // pass writes straight into the output rows.
  const bool direct = lut_identity_ && fmt.layout == Layout::kHWC;
  if (vertical_first_) {
    FinishVerticalFirst(fmt, direct, dst);
    return;
  }
  for (int y = 0; y < out_h; ++y) {
    uint8_t* levels = direct ? static_cast<uint8_t*>(dst) + static_cast<size_t>(y) * width
                             : levels_.data();
    const int n = bounds[2 * y + 1];
    if (!direct && n != 0 && yc_.copies() && yc_.copy_source()[y] >= 0) {
      // A row the vertical pass would copy is stored from the intermediate rows themselves.
      const int32_t source = yc_.copy_source()[y] - yc_.first();
      StoreRow(tmp_.data() + static_cast<size_t>(source) * tmp_stride_, out_w, out_h, y, fmt, dst);
      continue;
    }
    if (n == 0) {
      std::fill(levels, levels + width, 0);
    } else {
      const uint8_t* rows = tmp_.data() + static_cast<size_t>(bounds[2 * y] - yc_.first()) *
                                              tmp_stride_;
      VerticalPass(rows, y, width, levels);
    }
    if (!direct) StoreRow(levels, out_w, out_h, y, fmt, dst);
  }
}

void Resampler::FinishVerticalFirst(const OutputFormat& fmt, bool direct, void* dst) {
  const int out_w = xc_.out_size();
  const int out_h = yc_.out_size();
  const size_t width = static_cast<size_t>(out_w) * 3;
  const int32_t* bounds = yc_.bounds();
  // The horizontal kernel stores 4 bytes per pixel, one past the row: rows go through levels_
  // even when they are stored unchanged.
  uint8_t* levels = levels_.data();
  for (int y = 0; y < out_h; ++y) {
    const int n = bounds[2 * y + 1];
    if (n == 0) {
      std::fill(levels, levels + width, 0);
    } else {
      const uint8_t* rows = tmp_.data() + static_cast<size_t>(bounds[2 * y] - yc_.first()) *
                                              tmp_stride_;
      VerticalPass(rows, y, static_cast<int>(tmp_stride_), column_row_.data());
      HorizontalPass(column_row_.data(), xc_.first(), levels);
    }
    if (direct) {
      std::memcpy(static_cast<uint8_t*>(dst) + static_cast<size_t>(y) * width, levels, width);
    } else {
      StoreRow(levels, out_w, out_h, y, fmt, dst);
    }
  }
}

void Resampler::StoreRow(const uint8_t* levels, int out_w, int out_h, int y,
                         const OutputFormat& fmt, void* dst, int x0, int x1,
                         const uint8_t* fill) const {
  x1 = x1 < 0 ? out_w : x1;
  if (x0 >= x1) return;
  const Kernels& kernels = GetKernels();
  // Element x0 of row y in a plane; the kernels store pixels from levels + 3 * x0.
  const size_t first = static_cast<size_t>(y) * out_w + static_cast<size_t>(x0);
  const size_t plane = static_cast<size_t>(out_h) * out_w;
  const uint8_t* from = levels + static_cast<size_t>(x0) * 3;
  const bool chw = fmt.layout == Layout::kCHW && fill == nullptr;
  switch (fmt.dtype) {
    case DType::kUint8:
      if (kernels.store_planar8 != nullptr && lut_identity_ && chw) {
        kernels.store_planar8(from, x1 - x0, static_cast<uint8_t*>(dst) + first, plane);
      } else {
        WriteRow<uint8_t>(levels, fill, x0, x1, out_w, out_h, y, fmt.layout, lut_, dst);
      }
      break;
    case DType::kFloat32:
      if (kernels.store_planar32_ops != nullptr && lut_ops_ && chw) {
        kernels.store_planar32_ops(from, x1 - x0, lut_, lut_fmt_.ops,
                                   static_cast<uint32_t*>(dst) + first, plane);
      } else if (kernels.store_planar32 != nullptr && chw) {
        kernels.store_planar32(from, x1 - x0, lut_, static_cast<uint32_t*>(dst) + first, plane);
      } else {
        WriteRow<uint32_t>(levels, fill, x0, x1, out_w, out_h, y, fmt.layout, lut_, dst);
      }
      break;
    case DType::kFloat16:
    case DType::kBFloat16:
      WriteRow<uint16_t>(levels, fill, x0, x1, out_w, out_h, y, fmt.layout, lut_, dst);
      break;
  }
}

void Resampler::WriteImage(const uint8_t* rgb, size_t stride, int width, int height,
                           const OutputFormat& fmt, void* dst, const Frame* frame) {
  PrepareLut(fmt);
  for (int y = 0; y < height; ++y) {
    const uint8_t* row = rgb + static_cast<size_t>(y) * stride;
    if (frame == nullptr) {
      StoreRow(row, width, height, y, fmt, dst);
      continue;
    }
    // Outside the shown rectangle every pixel is the frame's fill: stored without reading.
    const bool shown = y >= frame->shown[1] && y < frame->shown[3];
    const int x0 = shown ? std::clamp(frame->shown[0], 0, width) : width;
    const int x1 = shown ? std::clamp(frame->shown[2], x0, width) : width;
    StoreRow(row, width, height, y, fmt, dst, 0, x0, frame->fill);
    StoreRow(row, width, height, y, fmt, dst, x0, x1);
    StoreRow(row, width, height, y, fmt, dst, x1, width, frame->fill);
  }
}

void Resampler::AddImage(const uint8_t* pixels, size_t stride, int bytes_per_pixel) {
  if (bytes_per_pixel == 4) {
    for (int r = first_row(); r < end_row(); ++r) {
      AddRow(r, pixels + static_cast<size_t>(r) * stride);
    }
    return;
  }
  // Packed RGB: widen the used columns of each row to RGBX for the kernel.
  const int c0 = first_col(), c1 = end_col();
  if (rgbx_row_.size() < static_cast<size_t>(c1 - c0) * 4 + 4) {
    rgbx_row_.resize(static_cast<size_t>(c1 - c0) * 4 + 4);
  }
  SetColumnOrigin(c0);
  for (int r = first_row(); r < end_row(); ++r) {
    const uint8_t* in = pixels + static_cast<size_t>(r) * stride + static_cast<size_t>(c0) * 3;
    uint8_t* out = rgbx_row_.data();
    for (int c = c0; c < c1; ++c, in += 3, out += 4) {
      out[0] = in[0];
      out[1] = in[1];
      out[2] = in[2];
      out[3] = 0;
    }
    AddRow(r, rgbx_row_.data());
  }
}

void Resampler::Resample(const uint8_t* pixels, size_t stride, int bytes_per_pixel, int src_w,
                         int src_h, const AxisMapping& x, const AxisMapping& y,
                         const OutputFormat& fmt, void* dst) {
  Prepare(x, y, src_w, src_h);
  AddImage(pixels, stride, bytes_per_pixel);
  Finish(fmt, dst);
}

bool SetResampleSimdForTesting(bool enabled) {
  const Kernels best = BestKernels();
  MutableKernels() = enabled ? best : Kernels{};
  return best.horizontal != HorizontalScalar;
}

uint16_t FloatToHalf(float v) {
  uint32_t x = std::bit_cast<uint32_t>(v);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) {  // inf or NaN (NaN keeps a quiet payload bit)
    return sign | 0x7c00u | (x > 0x7f800000u ? 0x200u | ((x >> 13) & 0x3ffu) : 0u);
  }
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
  if (x < 0x38800000u) {
    // Below the smallest normal half (2^-14): count units of 2^-24; the scaling is exact and
    // rint rounds half to even. 1024 units carry into the smallest normal's encoding.
    const float units = std::bit_cast<float>(x) * 16777216.0f;
    return sign | static_cast<uint16_t>(std::rint(units));
  }
  x += 0xfffu + ((x >> 13) & 1u);  // round to nearest even on the 13 dropped bits
  x -= 0x38000000u;                // rebias the exponent from 127 to 15
  return sign | static_cast<uint16_t>(x >> 13);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 5.9604644775390625e-08f;  // 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t FloatToBFloat16(float v) {
  uint32_t x = std::bit_cast<uint32_t>(v);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float BFloat16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

}  // namespace ringloader
