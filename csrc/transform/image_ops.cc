#include "transform/image_ops.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <iterator>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "transform/hue_kernels.h"

// Pillow and CPython evaluate every expression reproduced here as separate IEEE multiplies and
// adds; a fused multiply-add changes low bits and, through truncation, output levels.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace ringloader {
namespace {

// CPython's math.radians / math.degrees factors (Py_MATH_PI / 180.0 and 180.0 / Py_MATH_PI).
constexpr double kPi = 3.14159265358979323846;
constexpr double kDegToRad = kPi / 180.0;
constexpr double kRadToDeg = 180.0 / kPi;

// First byte of row y.
uint8_t* Row(const RgbView& img, int y) { return img.data + static_cast<size_t>(y) * img.stride; }

// A packed copy of `img` in `buffer` (grown when too small), the source of the operations that
// read neighbours or remap pixels while writing `img`.
RgbView CopyToScratch(const RgbView& img, std::vector<uint8_t>& buffer) {
  const size_t row_bytes = static_cast<size_t>(img.width) * 3;
  const size_t bytes = row_bytes * static_cast<size_t>(img.height);
  if (buffer.size() < bytes) buffer.resize(bytes);
  for (int y = 0; y < img.height; ++y) std::memcpy(buffer.data() + y * row_bytes, Row(img, y), row_bytes);
  return RgbView{buffer.data(), img.width, img.height, row_bytes};
}

// Pillow's Image.point with one 256-entry table for every channel.
void ApplyLut(RgbView img, const uint8_t lut[256]) {
  const int n = img.width * 3;
  for (int y = 0; y < img.height; ++y) {
    uint8_t* p = Row(img, y);
    for (int i = 0; i < n; ++i) p[i] = lut[p[i]];
  }
}

// Pillow's Image.point with a table per channel (R, G, B).
void ApplyLuts(RgbView img, const uint8_t luts[3][256]) {
  for (int y = 0; y < img.height; ++y) {
    uint8_t* p = Row(img, y);
    for (int x = 0; x < img.width; ++x, p += 3) {
      p[0] = luts[0][p[0]];
      p[1] = luts[1][p[1]];
      p[2] = luts[2][p[2]];
    }
  }
}

// Image.histogram() of an RGB image: 256 counts per channel.
void ChannelHistograms(const RgbView& img, uint32_t hist[3][256]) {
  std::memset(hist, 0, sizeof(uint32_t) * 3 * 256);
  for (int y = 0; y < img.height; ++y) {
    const uint8_t* p = Row(img, y);
    for (int x = 0; x < img.width; ++x, p += 3) {
      ++hist[0][p[0]];
      ++hist[1][p[1]];
      ++hist[2][p[2]];
    }
  }
}

// Pillow's RGB -> L (Convert.c L24): ITU-R 601-2 weights in 16.16 fixed point, rounded.
inline int Luma(int r, int g, int b) { return (r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16; }

// One level of Pillow's ImagingBlend(degenerate, image, alpha): degenerate + alpha * (value -
// degenerate) in float, clipped to 0..255 and truncated. (Inside [0, 1] Pillow skips the clip;
// the value cannot leave 0..255 there, so the result is the same.) Branch-free, so loops of it
// vectorise.
inline uint8_t BlendLevel(int degenerate, int value, float alpha) {
  const float blended = static_cast<float>(degenerate) + alpha * static_cast<float>(value - degenerate);
  return static_cast<uint8_t>(std::min(std::max(blended, 0.f), 255.f));
}

// Pillow's CLIP8 for the int results of its colour conversions.
inline uint8_t Clip8(int v) { return v <= 0 ? 0 : v >= 255 ? 255 : static_cast<uint8_t>(v); }

// The operands of Pillow's rgb2hsv and hsv2rgb that depend on one or two levels, computed
// once with the very operations the conversions perform (so the same values): a pixel then
// costs no division. quotient[b][a] = float(a) / float(b) (b > 0); for hue level h, hsv2rgb's
// sector i % 6 and fraction f; for saturation level s, its float s / 255.
struct HsvTables {
  float quotient[256][256];
  uint8_t sector[256];
  float fraction[256];
  float saturation[256];
};

const HsvTables& Hsv() {
  static const HsvTables* const tables = [] {
    auto* t = new HsvTables;
    for (int b = 0; b < 256; ++b) {
      for (int a = 0; a < 256; ++a) {
        t->quotient[b][a] = b == 0 ? 0.f : static_cast<float>(a) / static_cast<float>(b);
      }
    }
    for (int level = 0; level < 256; ++level) {
      const double h6 = static_cast<double>(static_cast<float>(level)) * 6.0 / 255.0;
      const int i = static_cast<int>(h6);  // floor: h6 >= 0
      t->sector[level] = static_cast<uint8_t>(i % 6);
      t->fraction[level] = static_cast<float>(h6 - static_cast<double>(static_cast<float>(i)));
      t->saturation[level] =
          static_cast<float>(static_cast<double>(static_cast<float>(level)) / 255.0);
    }
    return t;
  }();
  return *tables;
}

// Pillow's rgb2hsv_row (Convert.c, after colorsys), with its float/double mix reproduced.
inline void RgbToHsv(const HsvTables& t, int r, int g, int b, uint8_t* h_out, uint8_t* s_out,
                     uint8_t* v_out) {
  const int maxc = std::max(r, std::max(g, b));
  const int minc = std::min(r, std::min(g, b));
  *v_out = static_cast<uint8_t>(maxc);
  if (minc == maxc) {
    *h_out = 0;
    *s_out = 0;
    return;
  }
  const int cr = maxc - minc;
  const float* over_cr = t.quotient[cr];
  const float s = t.quotient[maxc][cr];  // cr / maxc
  const float rc = over_cr[maxc - r];    // (maxc - r) / cr, and likewise
  const float gc = over_cr[maxc - g];
  const float bc = over_cr[maxc - b];
  float h;
  if (r == maxc) {
    h = bc - gc;
  } else if (g == maxc) {
    h = static_cast<float>(2.0 + static_cast<double>(rc) - static_cast<double>(bc));
  } else {
    h = static_cast<float>(4.0 + static_cast<double>(gc) - static_cast<double>(rc));
  }
  // fmod(h / 6 + 1, 1): the argument lies in [5/6, 11/6], where subtracting 1 is exact.
  const double turns = static_cast<double>(h) / 6.0 + 1.0;
  h = static_cast<float>(turns >= 1.0 ? turns - 1.0 : turns);
  *h_out = Clip8(static_cast<int>(static_cast<double>(h) * 255.0));
  *s_out = Clip8(static_cast<int>(static_cast<double>(s) * 255.0));
}

// C round() (half away from zero) of a non-negative double, without the libm call: the
// fractional part x - trunc(x) is exact.
inline int RoundNonNegative(double x) {
  const int whole = static_cast<int>(x);
  return x - whole >= 0.5 ? whole + 1 : whole;
}

// Pillow's hsv2rgb (Convert.c), with its float/double mix and round() (half away from zero).
inline void HsvToRgb(const HsvTables& tables, int h, int s, int v, uint8_t* rgb) {
  if (s == 0) {
    rgb[0] = rgb[1] = rgb[2] = static_cast<uint8_t>(v);
    return;
  }
  const float f = tables.fraction[h];
  const float fs = tables.saturation[s];
  const double fv = static_cast<double>(static_cast<float>(v));
  // 0 <= fs <= 1 and 0 <= f < 1, so the products below are non-negative.
  const uint8_t p = Clip8(RoundNonNegative(fv * (1.0 - static_cast<double>(fs))));
  const uint8_t q = Clip8(RoundNonNegative(fv * (1.0 - static_cast<double>(fs * f))));
  const uint8_t t = Clip8(RoundNonNegative(fv * (1.0 - static_cast<double>(fs) * (1.0 - static_cast<double>(f)))));
  const uint8_t uv = static_cast<uint8_t>(v);
  switch (tables.sector[h]) {
    case 0: rgb[0] = uv, rgb[1] = t, rgb[2] = p; break;
    case 1: rgb[0] = q, rgb[1] = uv, rgb[2] = p; break;
    case 2: rgb[0] = p, rgb[1] = uv, rgb[2] = t; break;
    case 3: rgb[0] = p, rgb[1] = q, rgb[2] = uv; break;
    case 4: rgb[0] = t, rgb[1] = p, rgb[2] = uv; break;
    default: rgb[0] = uv, rgb[1] = p, rgb[2] = q; break;  // 5
  }
}

// Pillow's Geometry.c COORD for nearest sampling, as an index into [0, size) or -1 when the
// coordinate is outside (NaN included).
inline int NearestIndex(double v, int size) {
  if (!(v >= 0.0 && v < static_cast<double>(size))) return -1;
  return static_cast<int>(v);
}

// Pillow's Geometry.c FLOOR: truncation for non-negative values, floor() below zero.
inline int PillowFloor(double v) { return v < 0.0 ? static_cast<int>(std::floor(v)) : static_cast<int>(v); }

// Pillow's XCLIP/YCLIP (and numpy's edge padding): i clamped to [0, size).
inline int ClampIndex(int i, int size) { return i < 0 ? 0 : i >= size ? size - 1 : i; }

// Copies one RGB pixel.
inline void PutPixel(uint8_t* out, const uint8_t* in) {
  out[0] = in[0];
  out[1] = in[1];
  out[2] = in[2];
}

// Pillow's ImagingScaleAffine: nearest sampling for a matrix without rotation terms, with the
// source positions accumulated by repeated addition as Pillow does.
void NearestScaleAffine(const RgbView& src, RgbView dst, const double a[6], const uint8_t fill[3],
                        std::vector<int32_t>& columns) {
  if (columns.size() < static_cast<size_t>(dst.width)) columns.resize(dst.width);
  double xo = a[2] + a[0] * 0.5;
  for (int x = 0; x < dst.width; ++x) {
    columns[x] = NearestIndex(xo, src.width);
    xo += a[0];
  }
  double yo = a[5] + a[4] * 0.5;
  for (int y = 0; y < dst.height; ++y) {
    const int yi = NearestIndex(yo, src.height);
    yo += a[4];
    uint8_t* out = Row(dst, y);
    const uint8_t* in = yi >= 0 ? Row(src, yi) : nullptr;
    for (int x = 0; x < dst.width; ++x, out += 3) {
      PutPixel(out, in && columns[x] >= 0 ? in + 3 * columns[x] : fill);
    }
  }
}

// Pillow's check_fixed: whether an output corner maps within 16.16 fixed-point range.
inline bool FitsFixedPoint(const double a[6], int x, int y) {
  return std::fabs(x * a[0] + y * a[1] + a[2]) < 32768.0 && std::fabs(x * a[3] + y * a[4] + a[5]) < 32768.0;
}

// Pillow's FIX: 16.16 fixed point, rounded.
inline int32_t ToFixed(double v) { return PillowFloor(v * 65536.0 + 0.5); }

// Wrapping 32-bit addition, as Pillow's int arithmetic behaves.
inline int32_t AddWrap(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
}

// Pillow's affine_fixed: nearest sampling stepping the source position in 16.16 fixed point.
void NearestFixedAffine(const RgbView& src, RgbView dst, const double a[6], const uint8_t fill[3]) {
  const int32_t a0 = ToFixed(a[0]), a1 = ToFixed(a[1]), a3 = ToFixed(a[3]), a4 = ToFixed(a[4]);
  int32_t row_x = ToFixed(a[2] + a[0] * 0.5 + a[1] * 0.5);
  int32_t row_y = ToFixed(a[5] + a[3] * 0.5 + a[4] * 0.5);
  for (int y = 0; y < dst.height; ++y) {
    int32_t xx = row_x, yy = row_y;
    uint8_t* out = Row(dst, y);
    for (int x = 0; x < dst.width; ++x, out += 3) {
      const int32_t xi = xx >> 16, yi = yy >> 16;
      if (xi >= 0 && xi < src.width && yi >= 0 && yi < src.height) {
        PutPixel(out, Row(src, yi) + 3 * xi);
      } else {
        PutPixel(out, fill);
      }
      xx = AddWrap(xx, a0);
      yy = AddWrap(yy, a3);
    }
    row_x = AddWrap(row_x, a1);
    row_y = AddWrap(row_y, a4);
  }
}

// Pillow's floating-point ImagingTransformAffine loop (matrices out of fixed-point range).
void NearestFloatAffine(const RgbView& src, RgbView dst, const double a[6], const uint8_t fill[3]) {
  double xo = a[2] + a[1] * 0.5 + a[0] * 0.5;
  double yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
  for (int y = 0; y < dst.height; ++y) {
    double xx = xo, yy = yo;
    uint8_t* out = Row(dst, y);
    for (int x = 0; x < dst.width; ++x, out += 3) {
      const int xi = NearestIndex(xx, src.width);
      const int yi = xi >= 0 ? NearestIndex(yy, src.height) : -1;
      PutPixel(out, yi >= 0 ? Row(src, yi) + 3 * xi : fill);
      xx += a[0];
      yy += a[3];
    }
    xo += a[1];
    yo += a[4];
  }
}

// Pillow's bilinear_filter32RGB at source position (xin, yin); false when outside the image.
inline bool SampleBilinear(const RgbView& src, double xin, double yin, uint8_t* out) {
  if (xin < 0.0 || xin >= src.width || yin < 0.0 || yin >= src.height) return false;
  xin -= 0.5;
  yin -= 0.5;
  const int x = PillowFloor(xin), y = PillowFloor(yin);
  const double dx = xin - x, dy = yin - y;
  const int x0 = 3 * ClampIndex(x, src.width), x1 = 3 * ClampIndex(x + 1, src.width);
  const uint8_t* row0 = Row(src, ClampIndex(y, src.height));
  const uint8_t* row1 = y + 1 < src.height ? Row(src, y + 1) : nullptr;
  for (int c = 0; c < 3; ++c) {
    const double top = row0[x0 + c] + (row0[x1 + c] - row0[x0 + c]) * dx;
    const double bottom = row1 ? row1[x0 + c] + (row1[x1 + c] - row1[x0 + c]) * dx : top;
    out[c] = static_cast<uint8_t>(top + (bottom - top) * dy);
  }
  return true;
}

// Pillow's transform BICUBIC: the a = -1 cubic convolution of four samples at offset d, in
// its evaluation order.
inline double Cubic(double v1, double v2, double v3, double v4, double d) {
  const double p1 = v2;
  const double p2 = -v1 + v3;
  const double p3 = 2 * (v1 - v2) + v3 - v4;
  const double p4 = -v1 + v2 - v3 + v4;
  return p1 + d * (p2 + d * (p3 + d * p4));
}

// Pillow's bicubic_filter32RGB at source position (xin, yin); false when outside the image.
inline bool SampleBicubic(const RgbView& src, double xin, double yin, uint8_t* out) {
  if (xin < 0.0 || xin >= src.width || yin < 0.0 || yin >= src.height) return false;
  xin -= 0.5;
  yin -= 0.5;
  int x = PillowFloor(xin), y = PillowFloor(yin);
  const double dx = xin - x, dy = yin - y;
  --x;
  --y;
  int xs[4];
  for (int k = 0; k < 4; ++k) xs[k] = 3 * ClampIndex(x + k, src.width);
  // Rows past the bottom repeat the previous row, as Pillow's BICUBIC_BODY does.
  const uint8_t* rows[4];
  rows[0] = Row(src, ClampIndex(y, src.height));
  for (int k = 1; k < 4; ++k) rows[k] = (y + k >= 0 && y + k < src.height) ? Row(src, y + k) : rows[k - 1];
  for (int c = 0; c < 3; ++c) {
    double v[4];
    for (int k = 0; k < 4; ++k) {
      const uint8_t* r = rows[k] + c;
      v[k] = Cubic(r[xs[0]], r[xs[1]], r[xs[2]], r[xs[3]], dx);
    }
    const double value = Cubic(v[0], v[1], v[2], v[3], dy);
    out[c] = value <= 0.0 ? 0 : value >= 255.0 ? 255 : static_cast<uint8_t>(value);
  }
  return true;
}

// Pillow's ImagingGenericTransform with affine_transform: each output pixel centre mapped
// through the matrix and sampled with `sample`; `fill` where it falls outside.
template <typename Sampler>
void GenericAffine(const RgbView& src, RgbView dst, const double a[6], const uint8_t fill[3],
                   Sampler sample) {
  for (int y = 0; y < dst.height; ++y) {
    uint8_t* out = Row(dst, y);
    const double yin = y + 0.5;
    for (int x = 0; x < dst.width; ++x, out += 3) {
      const double xin = x + 0.5;
      const double xs = a[0] * xin + a[1] * yin + a[2];
      const double ys = a[3] * xin + a[4] * yin + a[5];
      if (!sample(src, xs, ys, out)) PutPixel(out, fill);
    }
  }
}

// CPython's float % for a positive modulus (result in [0, modulus)).
double PyFloatMod(double x, double modulus) {
  double mod = std::fmod(x, modulus);
  if (mod != 0.0) {
    if (mod < 0.0) mod += modulus;
  } else {
    mod = 0.0;
  }
  return mod;
}

// CPython's round(v, 15): correctly rounded to 15 decimals and read back.
double RoundTo15Decimals(double v) {
  char text[64];
  const std::to_chars_result printed = std::to_chars(text, text + sizeof(text), v, std::chars_format::fixed, 15);
  double rounded = v;
  std::from_chars(text, printed.ptr, rounded);
  return rounded;
}

// Pillow's Transpose.ROTATE_180 / ROTATE_90 / ROTATE_270 (the latter two on square images).
enum class QuarterTurn { k90, k180, k270 };
void RotateQuarterTurns(RgbView img, QuarterTurn turn, ImageOpScratch& scratch) {
  const RgbView src = CopyToScratch(img, scratch.image);
  const int w = img.width, h = img.height;
  for (int y = 0; y < h; ++y) {
    uint8_t* out = Row(img, y);
    for (int x = 0; x < w; ++x, out += 3) {
      int sx = x, sy = y;
      switch (turn) {
        case QuarterTurn::k180: sx = w - 1 - x, sy = h - 1 - y; break;
        case QuarterTurn::k90: sx = w - 1 - y, sy = x; break;   // out(y', W-1-x') = in(x', y')
        case QuarterTurn::k270: sx = y, sy = h - 1 - x; break;  // out(H-1-y', x') = in(x', y')
      }
      PutPixel(out, Row(src, sy) + 3 * sx);
    }
  }
}

// Source index of padded position `i` (relative to the image's first pixel) for an image of
// `size` pixels along the axis: numpy.pad's edge, reflect and symmetric modes (periodic for
// pads wider than the image; reflect of a single pixel repeats it, as numpy does).
int PadSourceIndex(int i, int size, PadMode mode) {
  if (i >= 0 && i < size) return i;
  switch (mode) {
    case PadMode::kReflect: {
      if (size == 1) return 0;
      const int period = 2 * (size - 1);
      int m = i % period;
      if (m < 0) m += period;
      return m < size ? m : period - m;
    }
    case PadMode::kSymmetric: {
      const int period = 2 * size;
      int m = i % period;
      if (m < 0) m += period;
      return m < size ? m : period - 1 - m;
    }
    default:  // edge (constant padding never asks for a source index)
      return ClampIndex(i, size);
  }
}

// Normalised 1-D Gaussian of odd `size` and `sigma` as torchvision's _get_gaussian_kernel1d
// (computed in double, stored as the float weights the convolution uses).
void GaussianKernel(int size, double sigma, float* weights) {
  const double half = (size - 1) * 0.5;
  auto pdf = [&](int i) {
    const double x = (i - half) / sigma;
    return std::exp(-0.5 * x * x);
  };
  double sum = 0;
  for (int i = 0; i < size; ++i) sum += pdf(i);
  for (int i = 0; i < size; ++i) weights[i] = static_cast<float>(pdf(i) / sum);
}

// Reflect index (torch reflect padding, periodic so any kernel size is defined).
inline int ReflectIndex(int i, int size) { return PadSourceIndex(i, size, PadMode::kReflect); }

// One interior row of ImageEnhance.Sharpness: Pillow's ImagingFilter3x3 with SMOOTH's kernel
// (1 1 1 / 1 5 1 / 1 1 1) / 13 in float, the row below first, +0.5 then truncation, blended
// with the row's levels. `above`, `centre` and `below` point at the first pixel of their
// rows, `out` at the second pixel of the output row; `count` levels are written.
void SharpenRow(const uint8_t* __restrict above, const uint8_t* __restrict centre,
                const uint8_t* __restrict below, uint8_t* __restrict out, int count, float alpha) {
  const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
  for (int j = 0; j < count; ++j) {
    const int i = j + 3;
    float sum = 0.5f;
    sum += static_cast<float>(below[i - 3]) * k1 + static_cast<float>(below[i]) * k1 +
           static_cast<float>(below[i + 3]) * k1;
    sum += static_cast<float>(centre[i - 3]) * k1 + static_cast<float>(centre[i]) * k5 +
           static_cast<float>(centre[i + 3]) * k1;
    sum += static_cast<float>(above[i - 3]) * k1 + static_cast<float>(above[i]) * k1 +
           static_cast<float>(above[i + 3]) * k1;
    // Pillow clips to 0..255 here; with positive weights summing to 1 the sum lies in
    // [0.5, 255.5], so truncation alone gives the same level.
    const int smooth = static_cast<int>(sum);
    out[j] = BlendLevel(smooth, centre[i], alpha);
  }
}

}  // namespace

// ---- colour ----------------------------------------------------------------------------------

void AdjustBrightness(RgbView img, double factor) {
  if (factor == 1.0) return;
  const float alpha = static_cast<float>(factor);
  uint8_t lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = BlendLevel(0, v, alpha);
  ApplyLut(img, lut);
}

void AdjustContrast(RgbView img, double factor) {
  if (factor == 1.0) return;
  // ImageStat mean of the L image (sum / count as Python floats), then int(mean + 0.5).
  uint64_t sum = 0;
  for (int y = 0; y < img.height; ++y) {
    const uint8_t* p = Row(img, y);
    for (int x = 0; x < img.width; ++x, p += 3) sum += static_cast<uint64_t>(Luma(p[0], p[1], p[2]));
  }
  const uint64_t count = static_cast<uint64_t>(img.width) * static_cast<uint64_t>(img.height);
  const double mean_level = count ? static_cast<double>(sum) / static_cast<double>(count) : 0.0;
  const int mean = static_cast<int>(mean_level + 0.5);
  const float alpha = static_cast<float>(factor);
  uint8_t lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = BlendLevel(mean, v, alpha);
  ApplyLut(img, lut);
}

void AdjustSaturation(RgbView img, double factor) {
  if (factor == 1.0) return;
  const float alpha = static_cast<float>(factor);
  // In chunks of pixels: the L level repeated per channel, then one flat (vectorisable) blend.
  constexpr int kChunk = 256;
  int gray[3 * kChunk];
  for (int y = 0; y < img.height; ++y) {
    uint8_t* row = Row(img, y);
    for (int x0 = 0; x0 < img.width; x0 += kChunk) {
      const int n = std::min(kChunk, img.width - x0);
      uint8_t* p = row + 3 * x0;
      for (int j = 0; j < n; ++j) gray[3 * j] = gray[3 * j + 1] = gray[3 * j + 2] = Luma(p[3 * j], p[3 * j + 1], p[3 * j + 2]);
      for (int i = 0; i < 3 * n; ++i) p[i] = BlendLevel(gray[i], p[i], alpha);
    }
  }
}

void AdjustHue(RgbView img, double hue_factor) {
  // np.int32(hue_factor * 255).astype(np.uint8): truncation, then wrap-around.
  const uint8_t shift = static_cast<uint8_t>(static_cast<int32_t>(hue_factor * 255));
  const HsvTables& tables = Hsv();
  // Neighbouring pixels often repeat a colour: the last one's result is reused.
  uint8_t last_in[3] = {0, 0, 0}, last_out[3] = {0, 0, 0};
  bool have_last = false;
  for (int y = 0; y < img.height; ++y) {
    uint8_t* p = Row(img, y);
    int x = 0;
#ifdef RL_HAVE_AVX2_KERNELS
    static const bool avx2 = resample_internal::CpuHasAvx2();  // 4 pixels a step, the same levels
    if (avx2) x = image_ops_internal::HueRowAvx2(p, img.width, shift), p += 3 * x;
#endif
    for (; x < img.width; ++x, p += 3) {
      if (have_last && p[0] == last_in[0] && p[1] == last_in[1] && p[2] == last_in[2]) {
        p[0] = last_out[0], p[1] = last_out[1], p[2] = last_out[2];
        continue;
      }
      last_in[0] = p[0], last_in[1] = p[1], last_in[2] = p[2];
      uint8_t h, s, v;
      RgbToHsv(tables, p[0], p[1], p[2], &h, &s, &v);
      HsvToRgb(tables, static_cast<uint8_t>(h + shift), s, v, p);
      last_out[0] = p[0], last_out[1] = p[1], last_out[2] = p[2];
      have_last = true;
    }
  }
}

void AdjustSharpness(RgbView img, double factor, ImageOpScratch& scratch) {
  // ImageFilter.SMOOTH leaves images smaller than its 3x3 kernel unchanged, and its border
  // pixels equal the image's, so the blend keeps them.
  if (factor == 1.0 || img.width < 3 || img.height < 3) return;
  const RgbView src = CopyToScratch(img, scratch.image);
  const float alpha = static_cast<float>(factor);
  for (int y = 1; y < img.height - 1; ++y) {
    SharpenRow(Row(src, y - 1), Row(src, y), Row(src, y + 1), Row(img, y) + 3, 3 * (img.width - 2), alpha);
  }
}

void ToGrayscale(RgbView img) {
  for (int y = 0; y < img.height; ++y) {
    uint8_t* p = Row(img, y);
    for (int x = 0; x < img.width; ++x, p += 3) {
      p[0] = p[1] = p[2] = static_cast<uint8_t>(Luma(p[0], p[1], p[2]));
    }
  }
}

// ---- point operations ------------------------------------------------------------------------

void Posterize(RgbView img, int bits) {
  if (bits >= 8) return;
  const uint8_t mask = bits <= 0 ? 0 : static_cast<uint8_t>(0xFF << (8 - bits));
  uint8_t lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = static_cast<uint8_t>(v & mask);
  ApplyLut(img, lut);
}

void Solarize(RgbView img, double threshold) {
  uint8_t lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = static_cast<uint8_t>(static_cast<double>(v) < threshold ? v : 255 - v);
  ApplyLut(img, lut);
}

void Invert(RgbView img) {
  const int n = img.width * 3;
  for (int y = 0; y < img.height; ++y) {
    uint8_t* p = Row(img, y);
    for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(255 - p[i]);
  }
}

void AutoContrast(RgbView img) {
  uint32_t hist[3][256];
  ChannelHistograms(img, hist);
  uint8_t luts[3][256];
  for (int c = 0; c < 3; ++c) {
    int lo = 0, hi = 255;
    while (lo < 255 && hist[c][lo] == 0) ++lo;
    while (hi > 0 && hist[c][hi] == 0) --hi;
    if (hi <= lo) {
      for (int v = 0; v < 256; ++v) luts[c][v] = static_cast<uint8_t>(v);
      continue;
    }
    // ImageOps.autocontrast: int(ix * scale + offset) in Python floats, clipped.
    const double scale = 255.0 / (hi - lo);
    const double offset = -lo * scale;
    for (int v = 0; v < 256; ++v) {
      const int level = static_cast<int>(v * scale + offset);
      luts[c][v] = Clip8(level);
    }
  }
  ApplyLuts(img, luts);
}

void Equalize(RgbView img) {
  uint32_t hist[3][256];
  ChannelHistograms(img, hist);
  uint8_t luts[3][256];
  for (int c = 0; c < 3; ++c) {
    // ImageOps.equalize: step from the count of all but the last used level.
    uint64_t total = 0, last = 0;
    int used = 0;
    for (int v = 0; v < 256; ++v) {
      if (hist[c][v]) {
        total += hist[c][v];
        last = hist[c][v];
        ++used;
      }
    }
    const uint64_t step = used <= 1 ? 0 : (total - last) / 255;
    if (step == 0) {
      for (int v = 0; v < 256; ++v) luts[c][v] = static_cast<uint8_t>(v);
      continue;
    }
    // Levels above 255 (possible for the last used level) are clipped by Image.point.
    uint64_t n = step / 2;
    for (int v = 0; v < 256; ++v) {
      luts[c][v] = static_cast<uint8_t>(std::min<uint64_t>(n / step, 255));
      n += hist[c][v];
    }
  }
  ApplyLuts(img, luts);
}

void SolarizeAdd(RgbView img, int add, int threshold) {
  uint8_t lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = v < threshold ? Clip8(v + add) : static_cast<uint8_t>(v);
  ApplyLut(img, lut);
}

// ---- filtering -------------------------------------------------------------------------------

void GaussianBlur(RgbView img, int kernel_w, int kernel_h, double sigma_x, double sigma_y,
                  ImageOpScratch& scratch) {
  if (img.width <= 0 || img.height <= 0) return;
  const int rx = kernel_w / 2, ry = kernel_h / 2;
  const int w = img.width, h = img.height, row_len = 3 * w;
  // Scratch: the two kernels, the horizontally filtered image (h rows of 3w floats), one
  // reflect-padded source row and one output accumulator row.
  const size_t padded_len = static_cast<size_t>(3 * (w + 2 * rx));
  const size_t needed = static_cast<size_t>(kernel_w + kernel_h) + static_cast<size_t>(h) * row_len + padded_len + row_len;
  if (scratch.floats.size() < needed) scratch.floats.resize(needed);
  float* kx = scratch.floats.data();
  float* ky = kx + kernel_w;
  float* rows = ky + kernel_h;
  float* padded = rows + static_cast<size_t>(h) * row_len;
  float* acc = padded + padded_len;
  GaussianKernel(kernel_w, sigma_x, kx);
  GaussianKernel(kernel_h, sigma_y, ky);
  for (int y = 0; y < h; ++y) {
    const uint8_t* in = Row(img, y);
    for (int x = -rx; x < w + rx; ++x) {
      const uint8_t* p = in + 3 * ReflectIndex(x, w);
      float* q = padded + 3 * (x + rx);
      q[0] = p[0], q[1] = p[1], q[2] = p[2];
    }
    float* out = rows + static_cast<size_t>(y) * row_len;
    for (int i = 0; i < row_len; ++i) out[i] = 0.f;
    for (int j = 0; j < kernel_w; ++j) {
      const float weight = kx[j];
      const float* tap = padded + 3 * j;
      for (int i = 0; i < row_len; ++i) out[i] += weight * tap[i];
    }
  }
  for (int y = 0; y < h; ++y) {
    for (int i = 0; i < row_len; ++i) acc[i] = 0.f;
    for (int j = 0; j < kernel_h; ++j) {
      const float weight = ky[j];
      const float* tap = rows + static_cast<size_t>(ReflectIndex(y + j - ry, h)) * row_len;
      for (int i = 0; i < row_len; ++i) acc[i] += weight * tap[i];
    }
    uint8_t* out = Row(img, y);
    for (int i = 0; i < row_len; ++i) {
      // torch.round (half to even) then the uint8 cast; adding and removing 2^23 rounds a
      // float below 2^23 to an integer, ties to even.
      const float level = (acc[i] + 8388608.f) - 8388608.f;
      out[i] = level <= 0.f ? 0 : level >= 255.f ? 255 : static_cast<uint8_t>(level);
    }
  }
}

// ---- geometry --------------------------------------------------------------------------------

void TransformAffine(RgbView img, const double matrix[6], Interpolation interpolation,
                     const uint8_t fill[3], ImageOpScratch& scratch) {
  if (img.width <= 0 || img.height <= 0) return;
  const RgbView src = CopyToScratch(img, scratch.image);
  switch (interpolation) {
    case Interpolation::kBilinear:
      GenericAffine(src, img, matrix, fill, SampleBilinear);
      return;
    case Interpolation::kBicubic:
      GenericAffine(src, img, matrix, fill, SampleBicubic);
      return;
    default:  // kNearest; the header rules out the filters Image.transform rejects
      break;
  }
  // Nearest: Pillow's ImagingTransformAffine picks the scale-only loop, the 16.16 fixed-point
  // loop when all four corners fit, or the floating-point loop.
  if (matrix[1] == 0 && matrix[3] == 0) {
    NearestScaleAffine(src, img, matrix, fill, scratch.ints);
  } else if (FitsFixedPoint(matrix, 0, 0) && FitsFixedPoint(matrix, img.width, img.height) &&
             FitsFixedPoint(matrix, 0, img.height) && FitsFixedPoint(matrix, img.width, 0)) {
    NearestFixedAffine(src, img, matrix, fill);
  } else {
    NearestFloatAffine(src, img, matrix, fill);
  }
}

void Affine(RgbView img, double angle, double translate_x, double translate_y, double scale,
            double shear_x, double shear_y, Interpolation interpolation, const uint8_t fill[3],
            bool has_center, double center_x, double center_y, ImageOpScratch& scratch) {
  // torchvision's _get_inverse_affine_matrix, term by term in its order.
  const double cx = has_center ? center_x : img.width * 0.5;
  const double cy = has_center ? center_y : img.height * 0.5;
  const double rot = angle * kDegToRad;
  const double sx = shear_x * kDegToRad;
  const double sy = shear_y * kDegToRad;
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  double m[6] = {d / scale, -b / scale, 0.0 / scale, -c / scale, a / scale, 0.0 / scale};
  m[2] += m[0] * (-cx - translate_x) + m[1] * (-cy - translate_y);
  m[5] += m[3] * (-cx - translate_x) + m[4] * (-cy - translate_y);
  m[2] += cx;
  m[5] += cy;
  TransformAffine(img, m, interpolation, fill, scratch);
}

void Rotate(RgbView img, double angle, Interpolation interpolation, const uint8_t fill[3],
            bool has_center, double center_x, double center_y, ImageOpScratch& scratch) {
  const double degrees = PyFloatMod(angle, 360.0);
  if (!has_center) {
    if (degrees == 0) return;
    if (degrees == 180) return RotateQuarterTurns(img, QuarterTurn::k180, scratch);
    if ((degrees == 90 || degrees == 270) && img.width == img.height) {
      return RotateQuarterTurns(img, degrees == 90 ? QuarterTurn::k90 : QuarterTurn::k270, scratch);
    }
  }
  const double cx = has_center ? center_x : img.width / 2.0;
  const double cy = has_center ? center_y : img.height / 2.0;
  const double rad = -(degrees * kDegToRad);
  double m[6] = {RoundTo15Decimals(std::cos(rad)), RoundTo15Decimals(std::sin(rad)), 0.0,
                 RoundTo15Decimals(-std::sin(rad)), RoundTo15Decimals(std::cos(rad)), 0.0};
  // Image.rotate: matrix[2], matrix[5] = transform(-cx, -cy), then += centre.
  m[2] = m[0] * -cx + m[1] * -cy + 0.0;
  m[5] = m[3] * -cx + m[4] * -cy + 0.0;
  m[2] += cx;
  m[5] += cy;
  TransformAffine(img, m, interpolation, fill, scratch);
}

void Pad(const RgbView& src, int left, int top, int right, int bottom, PadMode mode,
         const uint8_t fill[3], RgbView dst) {
  if (mode == PadMode::kConstant) {
    // ImageOps.expand: the image pasted at (left, top) on a canvas of `fill`.
    for (int y = 0; y < dst.height; ++y) {
      uint8_t* out = Row(dst, y);
      const int sy = y - top;
      for (int x = 0; x < dst.width; ++x, out += 3) {
        const int sx = x - left;
        const bool inside = sy >= 0 && sy < src.height && sx >= 0 && sx < src.width;
        PutPixel(out, inside ? Row(src, sy) + 3 * sx : fill);
      }
    }
    return;
  }
  // Negative padding crops first; then numpy.pad of the cropped image.
  const int crop_left = std::max(-left, 0), crop_top = std::max(-top, 0);
  const int cropped_w = src.width - crop_left - std::max(-right, 0);
  const int cropped_h = src.height - crop_top - std::max(-bottom, 0);
  const int pad_left = std::max(left, 0), pad_top = std::max(top, 0);
  for (int y = 0; y < dst.height; ++y) {
    const uint8_t* in = Row(src, crop_top + PadSourceIndex(y - pad_top, cropped_h, mode)) + 3 * crop_left;
    uint8_t* out = Row(dst, y);
    for (int x = 0; x < pad_left && x < dst.width; ++x) {
      PutPixel(out + 3 * x, in + 3 * PadSourceIndex(x - pad_left, cropped_w, mode));
    }
    const int copy = std::min(cropped_w, dst.width - pad_left);
    if (copy > 0) std::memcpy(out + 3 * pad_left, in, static_cast<size_t>(copy) * 3);
    for (int x = pad_left + cropped_w; x < dst.width; ++x) {
      PutPixel(out + 3 * x, in + 3 * PadSourceIndex(x - pad_left, cropped_w, mode));
    }
  }
}

// ---- policy operations -----------------------------------------------------------------------

void ApplyAugOp(AugOp op, double magnitude, Interpolation interpolation, const uint8_t fill[3],
                RgbView img, ImageOpScratch& scratch) {
  switch (op) {
    case AugOp::kIdentity: return;
    case AugOp::kShearX:
      return Affine(img, 0.0, 0, 0, 1.0, std::atan(magnitude) * kRadToDeg, 0.0, interpolation, fill,
                    /*has_center=*/true, 0, 0, scratch);
    case AugOp::kShearY:
      return Affine(img, 0.0, 0, 0, 1.0, 0.0, std::atan(magnitude) * kRadToDeg, interpolation, fill,
                    /*has_center=*/true, 0, 0, scratch);
    case AugOp::kTranslateX:
      return Affine(img, 0.0, std::trunc(magnitude), 0, 1.0, 0.0, 0.0, interpolation, fill,
                    /*has_center=*/false, 0, 0, scratch);
    case AugOp::kTranslateY:
      return Affine(img, 0.0, 0, std::trunc(magnitude), 1.0, 0.0, 0.0, interpolation, fill,
                    /*has_center=*/false, 0, 0, scratch);
    case AugOp::kRotate:
      return Rotate(img, magnitude, interpolation, fill, /*has_center=*/false, 0, 0, scratch);
    case AugOp::kBrightness: return AdjustBrightness(img, 1.0 + magnitude);
    case AugOp::kColor: return AdjustSaturation(img, 1.0 + magnitude);
    case AugOp::kContrast: return AdjustContrast(img, 1.0 + magnitude);
    case AugOp::kSharpness: return AdjustSharpness(img, 1.0 + magnitude, scratch);
    case AugOp::kPosterize: return Posterize(img, static_cast<int>(magnitude));
    case AugOp::kSolarize: return Solarize(img, magnitude);
    case AugOp::kAutoContrast: return AutoContrast(img);
    case AugOp::kEqualize: return Equalize(img);
    case AugOp::kInvert: return Invert(img);
    case AugOp::kSolarizeAdd: return SolarizeAdd(img, static_cast<int>(magnitude), 128);
  }
}

void ApplyTimmOp(AugOp op, double arg, Interpolation interpolation, const uint8_t fill[3],
                 RgbView img, ImageOpScratch& scratch) {
  switch (op) {
    case AugOp::kIdentity: return;
    case AugOp::kShearX: {
      const double m[6] = {1, arg, 0, 0, 1, 0};
      return TransformAffine(img, m, interpolation, fill, scratch);
    }
    case AugOp::kShearY: {
      const double m[6] = {1, 0, 0, arg, 1, 0};
      return TransformAffine(img, m, interpolation, fill, scratch);
    }
    case AugOp::kTranslateX: {
      const double m[6] = {1, 0, arg, 0, 1, 0};
      return TransformAffine(img, m, interpolation, fill, scratch);
    }
    case AugOp::kTranslateY: {
      const double m[6] = {1, 0, 0, 0, 1, arg};
      return TransformAffine(img, m, interpolation, fill, scratch);
    }
    case AugOp::kRotate:
      return Rotate(img, arg, interpolation, fill, /*has_center=*/false, 0, 0, scratch);
    case AugOp::kBrightness: return AdjustBrightness(img, arg);
    case AugOp::kColor: return AdjustSaturation(img, arg);
    case AugOp::kContrast: return AdjustContrast(img, arg);
    case AugOp::kSharpness: return AdjustSharpness(img, arg, scratch);
    case AugOp::kPosterize: return Posterize(img, static_cast<int>(arg));
    case AugOp::kSolarize: return Solarize(img, arg);
    case AugOp::kAutoContrast: return AutoContrast(img);
    case AugOp::kEqualize: return Equalize(img);
    case AugOp::kInvert: return Invert(img);
    case AugOp::kSolarizeAdd: return SolarizeAdd(img, static_cast<int>(arg), 128);
  }
}

namespace {

// AugOp names as torchvision (and timm, for SolarizeAdd) spell them.
constexpr std::pair<std::string_view, AugOp> kAugOpNames[] = {
    {"Identity", AugOp::kIdentity},       {"ShearX", AugOp::kShearX},
    {"ShearY", AugOp::kShearY},           {"TranslateX", AugOp::kTranslateX},
    {"TranslateY", AugOp::kTranslateY},   {"Rotate", AugOp::kRotate},
    {"Brightness", AugOp::kBrightness},   {"Color", AugOp::kColor},
    {"Contrast", AugOp::kContrast},       {"Sharpness", AugOp::kSharpness},
    {"Posterize", AugOp::kPosterize},     {"Solarize", AugOp::kSolarize},
    {"AutoContrast", AugOp::kAutoContrast}, {"Equalize", AugOp::kEqualize},
    {"Invert", AugOp::kInvert},           {"SolarizeAdd", AugOp::kSolarizeAdd},
};

}  // namespace

bool AugOpFromName(std::string_view name, AugOp* op) {
  for (const auto& [n, v] : kAugOpNames) {
    if (n == name) {
      *op = v;
      return true;
    }
  }
  return false;
}

const char* AugOpName(AugOp op) {
  for (const auto& [n, v] : kAugOpNames) {
    if (v == op) return n.data();  // the names are literals: NUL-terminated
  }
  return "unknown op";
}

}  // namespace ringloader
