// AugMix (torchvision/transforms/autoaugment.py AugMix and v2/_auto_augment.py AugMix): its
// draws (DrawAugMix) and the chains it mixes, on torch's tensor kernels (augment.h). Apart from
// augment.cc's other image steps because AugMix alone runs torch's numerics, not Pillow's.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "transform/augment.h"

namespace ringloader {
namespace {

// ---- AugMix (torchvision/transforms/autoaugment.py AugMix, v2/_auto_augment.py AugMix) -------
//
// AugMix turns a PIL image into a uint8 tensor before anything else, so its ops run torch's
// tensor kernels, not Pillow's: the affine ops sample a float32 grid with grid_sample, the
// enhance ops blend in float32 and truncate. The functions below follow those kernels as the
// x86 CPU build of torch evaluates them: v1 rounds each multiply and add, v2's add_(alpha=)
// and torch's grid and grid_sample kernels fuse a multiply and an add (std::fma). Posterize,
// Equalize agree with Pillow's (image_ops.h); Solarize compares in float32.

enum class MixOp { kShearX, kShearY, kTranslateX, kTranslateY, kRotate, kPosterize, kSolarize,
                   kAutoContrast, kEqualize, kBrightness, kColor, kContrast, kSharpness };
constexpr int kMixOpsPartial = 9, kMixOpsAll = 13;

bool MixOpHasBins(MixOp op) { return op != MixOp::kAutoContrast && op != MixOp::kEqualize; }
bool MixOpSigned(MixOp op) {
  return op != MixOp::kPosterize && op != MixOp::kSolarize && MixOpHasBins(op);
}

/// magnitudes[bin] of AugMix's _augmentation_space (10 bins) as float(tensor[bin]).
double MixMagnitude(MixOp op, bool v2, int bin, int height, int width) {
  constexpr int kBins = 10;
  switch (op) {
    case MixOp::kShearX:
    case MixOp::kShearY: return LinspaceF32(0.0, 0.3, kBins, bin);
    case MixOp::kTranslateX: return LinspaceF32(0.0, width / 3.0, kBins, bin);
    case MixOp::kTranslateY: return LinspaceF32(0.0, height / 3.0, kBins, bin);
    case MixOp::kRotate: return LinspaceF32(0.0, 30.0, kBins, bin);
    case MixOp::kPosterize:
      // 4 - (arange(10) / ((10 - 1) / 4)).round().int(): float32 division, halves to even.
      return 4.0 - std::nearbyint(static_cast<float>(bin) / static_cast<float>(9.0 / 4.0));
    case MixOp::kSolarize:
      return v2 ? 255.0 * LinspaceF32(1.0, 0.0, kBins, bin) : LinspaceF32(255.0, 0.0, kBins, bin);
    case MixOp::kAutoContrast:
    case MixOp::kEqualize: return 0.0;
    default: return LinspaceF32(0.0, 0.9, kBins, bin);  // the enhance ops
  }
}

/// torchvision's _get_inverse_affine_matrix (Python floats), with math.degrees/radians.
void InverseAffine(double cx, double cy, double angle, double tx, double ty, double shear_x,
                   double shear_y, double m[6]) {
  constexpr double kDegToRad = 3.141592653589793 / 180.0;
  const double rot = angle * kDegToRad, sx = shear_x * kDegToRad, sy = shear_y * kDegToRad;
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  m[0] = d; m[1] = -b; m[2] = 0.0; m[3] = -c; m[4] = a; m[5] = 0.0;
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
}

/// Packed copy of `img` into `buf`.
const uint8_t* PackedCopy(const RgbView& img, std::vector<uint8_t>& buf) {
  const size_t row = static_cast<size_t>(img.width) * 3;
  if (buf.size() < row * img.height) buf.resize(row * img.height);
  for (int y = 0; y < img.height; ++y) {
    std::memcpy(buf.data() + y * row, img.data + static_cast<size_t>(y) * img.stride, row);
  }
  return buf.data();
}

// Built twice (target_clones) where that is safe: the clones' ifunc resolver runs while the
// dynamic loader relocates, before ThreadSanitizer's runtime is up, and crashes a TSan build at
// start-up; there one plain build (libm's fmaf) serves.
#if defined(__SANITIZE_THREAD__)
#define RL_FMA_CLONES
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RL_FMA_CLONES
#endif
#endif
#ifndef RL_FMA_CLONES
#define RL_FMA_CLONES __attribute__((target_clones("fma", "default")))
#endif

// The grid's products and sums where torch's bmm rounds each (fused_grid false): kept apart
// here, even in the FMA clone below.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
inline float GridPoint(float x, float rx, float y, float ry, float r1, bool fused) {
  return fused ? std::fma(y, ry, x * rx) + r1 : (x * rx + y * ry) + r1;
}

/// F_t.affine / F_t.rotate on a uint8 tensor without fill: _gen_affine_grid (float32 theta
/// over half-pixel centres, bmm: `fused` as AugMixParams::fused_grid) and
/// grid_sample(align_corners=False, zeros padding), rounded half to even. Built twice
/// (RL_FMA_CLONES): with the FMA instruction where the CPU has it, else with libm's fmaf; both
/// round each std::fma once, so the results are the same.
RL_FMA_CLONES void TensorAffine(RgbView img, const double m[6], bool nearest, bool fused,
                                AugmentScratch& scratch) {
  const int w = img.width, h = img.height;
  const uint8_t* src = PackedCopy(img, scratch.source);
  const size_t row = static_cast<size_t>(w) * 3;
  const float half_w = static_cast<float>(0.5 * w), half_h = static_cast<float>(0.5 * h);
  const float r0x = static_cast<float>(m[0]) / half_w, r1x = static_cast<float>(m[1]) / half_w,
              r2x = static_cast<float>(m[2]) / half_w;
  const float r0y = static_cast<float>(m[3]) / half_h, r1y = static_cast<float>(m[4]) / half_h,
              r2y = static_cast<float>(m[5]) / half_h;
  const float scale_x = static_cast<float>(w) / 2, scale_y = static_cast<float>(h) / 2;
  static constexpr uint8_t kZero[3] = {0, 0, 0};
  const auto pixel = [&](int x, int y) -> const uint8_t* {
    return x >= 0 && x < w && y >= 0 && y < h ? src + y * row + static_cast<size_t>(x) * 3 : kZero;
  };
  for (int y = 0; y < h; ++y) {
    const float gy_base = static_cast<float>(y + (-h * 0.5 + 0.5));
    uint8_t* out = img.data + static_cast<size_t>(y) * img.stride;
    for (int x = 0; x < w; ++x, out += 3) {
      const float gx_base = static_cast<float>(x + (-w * 0.5 + 0.5));
      const float gx = GridPoint(gx_base, r0x, gy_base, r1x, r2x, fused);
      const float gy = GridPoint(gx_base, r0y, gy_base, r1y, r2y, fused);
      const float ix = std::fma(gx + 1.f, scale_x, -0.5f);
      const float iy = std::fma(gy + 1.f, scale_y, -0.5f);
      if (!(ix > -2.f && ix < w + 1.f && iy > -2.f && iy < h + 1.f)) {
        out[0] = out[1] = out[2] = 0;
        continue;
      }
      if (nearest) {
        const uint8_t* p = pixel(static_cast<int>(std::nearbyint(ix)), static_cast<int>(std::nearbyint(iy)));
        out[0] = p[0];
        out[1] = p[1];
        out[2] = p[2];
        continue;
      }
      const float fx = std::floor(ix), fy = std::floor(iy);
      const float we = ix - fx, ee = 1.f - we, n = iy - fy, s = 1.f - n;
      const float nw = s * ee, ne = s * we, sw = n * ee, se = n * we;
      const int x0 = static_cast<int>(fx), y0 = static_cast<int>(fy);
      const uint8_t *a = pixel(x0, y0), *b = pixel(x0 + 1, y0), *c = pixel(x0, y0 + 1),
                    *d = pixel(x0 + 1, y0 + 1);
      for (int k = 0; k < 3; ++k) {
        float v = static_cast<float>(a[k]) * nw;
        v = std::fma(static_cast<float>(b[k]), ne, v);
        v = std::fma(static_cast<float>(c[k]), sw, v);
        v = std::fma(static_cast<float>(d[k]), se, v);
        out[k] = static_cast<uint8_t>(std::clamp(std::nearbyint(v), 0.f, 255.f));
      }
    }
  }
}

/// _blend(img1, img2, ratio).to(uint8): v1 ratio * a + (1 - ratio) * b, each product rounded;
/// v2 a.mul(ratio).add_(b, alpha=1 - ratio), one fused multiply-add; clamped and truncated.
uint8_t Blend(bool v2, float ratio, float one_minus, float a, float b) {
  const float v = v2 ? std::fma(b, one_minus, ratio * a) : ratio * a + one_minus * b;
  return static_cast<uint8_t>(std::clamp(v, 0.f, 255.f));
}

/// rgb_to_grayscale in float32 before its cast: v1 rounds each product, v2 fuses.
float TensorGray(bool v2, const uint8_t* p) {
  const float r = p[0], g = p[1], b = p[2];
  if (v2) return std::fma(b, 0.114f, std::fma(g, 0.587f, r * 0.2989f));
  return (0.2989f * r + 0.587f * g) + 0.114f * b;
}

template <typename Fn>
void ForEachPixel(RgbView img, Fn fn) {
  for (int y = 0; y < img.height; ++y) {
    uint8_t* p = img.data + static_cast<size_t>(y) * img.stride;
    for (int x = 0; x < img.width; ++x, p += 3) fn(p, x, y);
  }
}

/// Maps every level through `lut` (an op whose result depends on the level alone).
void ApplyLut(RgbView img, const uint8_t lut[256]) {
  ForEachPixel(img, [&](uint8_t* p, int, int) {
    p[0] = lut[p[0]];
    p[1] = lut[p[1]];
    p[2] = lut[p[2]];
  });
}

/// adjust_brightness / adjust_saturation / adjust_contrast on the tensor.
void TensorEnhance(MixOp op, bool v2, double factor, RgbView img) {
  const float ratio = static_cast<float>(factor), one_minus = static_cast<float>(1.0 - factor);
  if (op == MixOp::kContrast) {
    double sum = 0;  // of integer levels: exact
    ForEachPixel(img, [&](uint8_t* p, int, int) {
      sum += v2 ? std::floor(TensorGray(true, p)) : static_cast<uint8_t>(TensorGray(false, p));
    });
    const float mean = static_cast<float>(sum) /
                       static_cast<float>(static_cast<double>(img.width) * img.height);
    uint8_t lut[256];
    for (int v = 0; v < 256; ++v) lut[v] = Blend(v2, ratio, one_minus, static_cast<float>(v), mean);
    return ApplyLut(img, lut);
  }
  if (op == MixOp::kBrightness) {
    uint8_t lut[256];
    for (int v = 0; v < 256; ++v) lut[v] = Blend(v2, ratio, one_minus, static_cast<float>(v), 0.f);
    return ApplyLut(img, lut);
  }
  ForEachPixel(img, [&](uint8_t* p, int, int) {  // kColor: blend with the pixel's gray level
    const float other = static_cast<uint8_t>(TensorGray(v2, p));
    for (int c = 0; c < 3; ++c) p[c] = Blend(v2, ratio, one_minus, p[c], other);
  });
}

/// adjust_sharpness on the tensor: the 3x3 smoothing kernel (1s around 5, over 13) by conv2d,
/// rounded (its exact value is never a half, so float32 summation cannot change the level), the
/// border kept; v1 blends the whole image, v2 x + (1 - factor) * (blur - x) inside.
void TensorSharpness(bool v2, double factor, RgbView img, AugmentScratch& scratch) {
  const int w = img.width, h = img.height;
  if (w <= 2 || h <= 2) return;
  const uint8_t* src = PackedCopy(img, scratch.source);
  const float ratio = static_cast<float>(factor), one_minus = static_cast<float>(1.0 - factor);
  const size_t row = static_cast<size_t>(w) * 3;
  ForEachPixel(img, [&](uint8_t* p, int x, int y) {
    const bool inside = x > 0 && y > 0 && x < w - 1 && y < h - 1;
    for (int c = 0; c < 3; ++c) {
      const float v = p[c];
      float blur = v;
      if (inside) {
        const uint8_t* q = src + (y - 1) * row + (x - 1) * 3 + c;
        const int ring = q[0] + q[3] + q[6] + q[row] + q[row + 6] + q[2 * row] + q[2 * row + 3] +
                         q[2 * row + 6];
        // round((ring + 5 * centre) / 13): the exact quotient is never a half (2n = 13 (2k + 1)
        // has no solution), and the float32 kernel's error (< 1e-3) cannot cross one.
        blur = static_cast<float>((2 * (ring + 5 * q[row + 3]) + 13) / 26);
      }
      if (v2) {
        if (inside) {
          p[c] = static_cast<uint8_t>(std::clamp(std::fma(blur - v, one_minus, v), 0.f, 255.f));
        }
      } else {
        p[c] = Blend(false, ratio, one_minus, v, blur);
      }
    }
  });
}

/// autocontrast on the tensor, per channel: v1 (x - min) * (1 / (max - min) * 255), v2
/// (x - min) / ((max - min) * (1 / 255)); a flat channel keeps its levels.
void TensorAutoContrast(bool v2, RgbView img) {
  float lo[3] = {255.f, 255.f, 255.f}, hi[3] = {0.f, 0.f, 0.f};
  ForEachPixel(img, [&](uint8_t* p, int, int) {
    for (int c = 0; c < 3; ++c) {
      lo[c] = std::min<float>(lo[c], p[c]);
      hi[c] = std::max<float>(hi[c], p[c]);
    }
  });
  float scale[3];
  for (int c = 0; c < 3; ++c) {
    if (hi[c] == lo[c]) {
      lo[c] = 0.f;
      scale[c] = 1.f;
    } else {
      // v1's bound / (max - min) is Tensor.__rtruediv__: reciprocal() * bound.
      scale[c] = v2 ? (hi[c] - lo[c]) * static_cast<float>(1.0 / 255.0)
                    : (1.f / (hi[c] - lo[c])) * 255.f;
    }
  }
  uint8_t lut[3][256];
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      const float d = static_cast<float>(v) - lo[c];
      lut[c][v] = static_cast<uint8_t>(std::clamp(v2 ? d / scale[c] : d * scale[c], 0.f, 255.f));
    }
  }
  ForEachPixel(img, [&](uint8_t* p, int, int) {
    for (int c = 0; c < 3; ++c) p[c] = lut[c][p[c]];
  });
}

/// One AugMix op with torchvision's magnitude (sign applied) on the tensor.
void ApplyMixOp(MixOp op, double magnitude, bool v2, bool nearest, bool fused_grid, RgbView img,
                AugmentScratch& scratch) {
  const double w = img.width, h = img.height;
  constexpr double kRadToDeg = 180.0 / 3.141592653589793;
  double m[6];
  switch (op) {
    case MixOp::kShearX:
    case MixOp::kShearY: {
      // F.affine(angle=0, translate=[0, 0], scale=1, shear=degrees(atan(magnitude)), center=[0, 0])
      const double shear = std::atan(magnitude) * kRadToDeg;
      InverseAffine(-w * 0.5, -h * 0.5, 0.0, 0.0, 0.0, op == MixOp::kShearX ? shear : 0.0,
                    op == MixOp::kShearY ? shear : 0.0, m);
      return TensorAffine(img, m, nearest, fused_grid, scratch);
    }
    case MixOp::kTranslateX:
    case MixOp::kTranslateY: {
      const double t = static_cast<double>(static_cast<int>(magnitude));
      InverseAffine(0.0, 0.0, 0.0, op == MixOp::kTranslateX ? t : 0.0,
                    op == MixOp::kTranslateY ? t : 0.0, 0.0, 0.0, m);
      return TensorAffine(img, m, nearest, fused_grid, scratch);
    }
    case MixOp::kRotate:
      InverseAffine(0.0, 0.0, -magnitude, 0.0, 0.0, 0.0, 0.0, m);  // F.rotate passes -angle
      return TensorAffine(img, m, nearest, fused_grid, scratch);
    case MixOp::kPosterize: return Posterize(img, static_cast<int>(magnitude));
    case MixOp::kSolarize: {
      const float threshold = static_cast<float>(magnitude);  // compared in float32
      uint8_t lut[256];
      for (int v = 0; v < 256; ++v) {
        lut[v] = static_cast<uint8_t>(static_cast<float>(v) >= threshold ? 255 - v : v);
      }
      return ApplyLut(img, lut);
    }
    case MixOp::kAutoContrast: return TensorAutoContrast(v2, img);
    case MixOp::kEqualize: return Equalize(img);
    case MixOp::kSharpness: return TensorSharpness(v2, 1.0 + magnitude, img, scratch);
    default: return TensorEnhance(op, v2, 1.0 + magnitude, img);
  }
}

/// A Gamma(alpha, 1) draw (Marsaglia and Tsang; alpha < 1 by the u^(1/alpha) boost).
double GammaDraw(SampleRng& rng, double alpha) {
  if (alpha < 1.0) {
    const double u = 1.0 - rng.Uniform();  // (0, 1]
    return GammaDraw(rng, alpha + 1.0) * std::pow(u, 1.0 / alpha);
  }
  const double d = alpha - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = rng.Normal();
    double v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    const double u = 1.0 - rng.Uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x || std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) {
      return d * v;
    }
  }
}

/// A Dirichlet(alpha, ..., alpha) draw of `n` float32 weights.
void DirichletDraw(SampleRng& rng, double alpha, int n, float* out) {
  double g[64], sum = 0;
  for (int i = 0; i < n; ++i) sum += g[i] = GammaDraw(rng, alpha);
  for (int i = 0; i < n; ++i) {
    out[i] = sum > 0 ? static_cast<float>(g[i] / sum) : (i == 0 ? 1.f : 0.f);
  }
}

}  // namespace

void DrawAugMix(const AugMixParams& s, SampleRng& rng, AugMixDraws* draws) {
  const int width = std::clamp(s.width, 1, 64);
  float m[2];
  DirichletDraw(rng, s.alpha, 2, m);
  draws->m0 = m[0];
  draws->m1 = m[1];
  draws->weights.resize(width);
  DirichletDraw(rng, s.alpha, width, draws->weights.data());
  const int ops = s.all_ops ? kMixOpsAll : kMixOpsPartial;
  draws->chains.resize(width);
  for (std::vector<AugMixDraws::Op>& chain : draws->chains) {
    const int depth = s.depth > 0 ? s.depth : static_cast<int>(rng.RandInt(1, 4));
    chain.resize(depth);
    for (AugMixDraws::Op& op : chain) {
      op.index = static_cast<int>(rng.RandInt(0, ops));
      const MixOp kind = static_cast<MixOp>(op.index);
      op.bin = MixOpHasBins(kind) ? static_cast<int>(rng.RandInt(0, s.severity)) : 0;
      op.negate = MixOpSigned(kind) && rng.RandInt(0, 2) == 1;
    }
  }
}

absl::Status ApplyAugMixDraws(const AugMixParams& s, const AugMixDraws& draws,
                              AugmentScratch& scratch, RgbView img) {
  const int ops = s.all_ops ? kMixOpsAll : kMixOpsPartial;
  if (draws.weights.size() != draws.chains.size()) {
    return absl::InvalidArgumentError("AugMix: one weight per chain");
  }
  for (const std::vector<AugMixDraws::Op>& chain : draws.chains) {
    for (const AugMixDraws::Op& op : chain) {
      if (op.index < 0 || op.index >= ops || op.bin < 0 || op.bin >= 10) {
        return absl::InvalidArgumentError("AugMix: op index or magnitude bin out of range");
      }
    }
  }
  const bool v2 = s.v2_magnitudes, nearest = s.interpolation == Interpolation::kNearest;
  const size_t row = static_cast<size_t>(img.width) * 3, n = row * img.height;
  if (scratch.mix.size() < n) scratch.mix.resize(n);
  if (scratch.chain.size() < n) scratch.chain.resize(n);
  float* mix = scratch.mix.data();
  // mix = m[:, 0] * batch, then mix.add_(combined_weights[:, i] * aug) per chain, in float32.
  for (int y = 0; y < img.height; ++y) {
    const uint8_t* p = img.data + static_cast<size_t>(y) * img.stride;
    for (size_t k = 0; k < row; ++k) mix[y * row + k] = draws.m0 * static_cast<float>(p[k]);
  }
  for (size_t i = 0; i < draws.chains.size(); ++i) {
    const float weight = draws.weights[i] * draws.m1;  // combined_weights: float32 product
    RgbView aug{scratch.chain.data(), img.width, img.height, row};
    for (int y = 0; y < img.height; ++y) {
      std::memcpy(aug.data + y * row, img.data + static_cast<size_t>(y) * img.stride, row);
    }
    for (const AugMixDraws::Op& op : draws.chains[i]) {
      const MixOp kind = static_cast<MixOp>(op.index);
      double magnitude = MixMagnitude(kind, v2, op.bin, img.height, img.width);
      if (op.negate) magnitude = -magnitude;
      ApplyMixOp(kind, magnitude, v2, nearest, s.fused_grid, aug, scratch);
    }
    for (size_t k = 0; k < n; ++k) mix[k] = mix[k] + weight * static_cast<float>(aug.data[k]);
  }
  // .to(uint8): truncation.
  for (int y = 0; y < img.height; ++y) {
    uint8_t* p = img.data + static_cast<size_t>(y) * img.stride;
    for (size_t k = 0; k < row; ++k) {
      p[k] = static_cast<uint8_t>(std::clamp(mix[y * row + k], 0.f, 255.f));
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyAugMix(const AugMixParams& s, SampleRng& rng, AugmentScratch& scratch,
                         RgbView* img) {
  AugMixDraws draws;
  DrawAugMix(s, rng, &draws);
  return ApplyAugMixDraws(s, draws, scratch, *img);
}

}  // namespace ringloader
