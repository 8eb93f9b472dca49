#include "transform/tensor_resize.h"

#include <algorithm>
#include <cmath>

namespace ringloader {
namespace {

double Triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// torch's aa_filter of bicubic (UpSampleKernel.cpp's HelperInterpCubic), as Pillow's.
double Cubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

uint8_t Saturate(int32_t value) { return static_cast<uint8_t>(std::clamp(value, 0, 255)); }

}  // namespace

void TensorAxisTaps::Compute(int in_size, int out_size, bool cubic) {
  if (in == in_size && out == out_size && bicubic == cubic && !first.empty()) return;
  in = in_size, out = out_size, bicubic = cubic;
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  // Half the filter's footprint (bilinear 2 pixels, bicubic 4), widened when downscaling.
  const double half = cubic ? 2.0 : 1.0;
  const double support = scale >= 1.0 ? half * scale : half;
  const double inv = scale >= 1.0 ? 1.0 / scale : 1.0;
  ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  first.assign(out_size, 0);
  count.assign(out_size, 0);
  std::vector<double> w(static_cast<size_t>(out_size) * ksize, 0.0);
  double w_max = 0.0;
  for (int i = 0; i < out_size; ++i) {
    const double center = scale * (i + 0.5);
    const int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in_size);
    const int n = static_cast<int>(hi - lo);
    double* row = &w[static_cast<size_t>(i) * ksize];
    double total = 0.0;
    for (int j = 0; j < n; ++j) {
      const double x = (j + lo - center + 0.5) * inv;
      row[j] = cubic ? Cubic(x) : Triangle(x);
      total += row[j];
    }
    if (total != 0.0) {
      for (int j = 0; j < n; ++j) row[j] /= total;
    }
    first[i] = static_cast<int32_t>(lo);
    count[i] = n;
  }
  for (double v : w) w_max = std::max(w_max, v);
  // The most fractional bits (up to 22) for which the largest tap still fits an int16.
  for (precision = 0; precision < 22; ++precision) {
    const int next = static_cast<int>(0.5 + w_max * (1 << (precision + 1)));
    if (next >= (1 << 15)) break;
  }
  weights.assign(w.size(), 0);
  for (size_t k = 0; k < w.size(); ++k) weights[k] = TensorTap(w[k], precision);
}

int16_t TensorTap(double v, unsigned precision) {
  const double scaled = v * (1 << precision);
  return static_cast<int16_t>(scaled < 0 ? static_cast<int>(-0.5 + scaled) : static_cast<int>(0.5 + scaled));
}

void TensorResize(const uint8_t* src, int channels, int h, int w, ptrdiff_t row_stride,
                  ptrdiff_t plane_stride, int out_h, int out_w, uint8_t* dst,
                  TensorResizeScratch& scratch) {
  const bool horizontal = out_w != w, vertical = out_h != h;
  // After the horizontal pass (or none): an 8-bit image of h rows of out_w.
  const uint8_t* mid = src;
  ptrdiff_t mid_row = row_stride, mid_plane = plane_stride;
  if (horizontal) {
    TensorAxisTaps& t = scratch.x;
    t.Compute(w, out_w);
    uint8_t* out = dst;
    if (vertical) {
      scratch.mid.resize(static_cast<size_t>(channels) * h * out_w);
      out = scratch.mid.data();
    }
    const int32_t round = 1 << (t.precision - 1);
    for (int c = 0; c < channels; ++c) {
      for (int y = 0; y < h; ++y) {
        const uint8_t* line = src + c * plane_stride + y * row_stride;
        uint8_t* o = out + (static_cast<size_t>(c) * h + y) * out_w;
        for (int x = 0; x < out_w; ++x) {
          const int16_t* k = &t.weights[static_cast<size_t>(x) * t.ksize];
          const uint8_t* p = line + t.first[x];
          int32_t sum = round;
          for (int j = 0; j < t.count[x]; ++j) sum += p[j] * k[j];
          o[x] = Saturate(sum >> t.precision);
        }
      }
    }
    if (!vertical) return;
    mid = out;
    mid_row = out_w;
    mid_plane = static_cast<ptrdiff_t>(h) * out_w;
  }
  const int width = horizontal ? out_w : w;
  if (!vertical) {  // nothing to resize: a copy
    for (int c = 0; c < channels; ++c) {
      for (int y = 0; y < h; ++y) {
        std::copy_n(src + c * plane_stride + y * row_stride, w, dst + (static_cast<size_t>(c) * h + y) * w);
      }
    }
    return;
  }
  TensorAxisTaps& t = scratch.y;
  t.Compute(h, out_h);
  const int32_t round = 1 << (t.precision - 1);
  std::vector<int32_t> acc(width);
  for (int c = 0; c < channels; ++c) {
    for (int y = 0; y < out_h; ++y) {
      std::fill(acc.begin(), acc.end(), round);
      const int16_t* k = &t.weights[static_cast<size_t>(y) * t.ksize];
      for (int j = 0; j < t.count[y]; ++j) {
        const uint8_t* line = mid + c * mid_plane + (t.first[y] + j) * mid_row;
        const int32_t weight = k[j];
        for (int x = 0; x < width; ++x) acc[x] += line[x] * weight;
      }
      uint8_t* o = dst + (static_cast<size_t>(c) * out_h + y) * width;
      for (int x = 0; x < width; ++x) o[x] = Saturate(acc[x] >> t.precision);
    }
  }
}

}  // namespace ringloader
