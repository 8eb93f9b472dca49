// Holds the resampler's SIMD kernels to its scalar ones, bit for bit, without GoogleTest or any
// library beyond the C++ runtime, so that it can be cross-compiled for AArch64 and run under
// qemu-user (scripts/test_neon.sh): there it checks the NEON kernels (resample_neon.cc), on
// x86_64 the AVX2 ones. Two parts:
//   1. Whole resamples (Resampler, through SetResampleSimdForTesting) over random sources,
//      crops, up- and downscales, every filter, both pass orders, mirrored axes, packed RGB and
//      RGBX rows, and the uint8 HWC, uint8 CHW and float32 CHW write-outs.
//   2. (AArch64) The NEON kernels called directly against wrap-defined reference loops, with
//      random tap counts, widths of every remainder and weights of either sign, and a canary
//      after each output row: a kernel writes exactly the bytes its contract names.
// Usage: resample_simd_check [--bench]   (--bench: also times SIMD against scalar resamples)
//        resample_simd_check --once simd|scalar|none [filter]   (one resample: to count
//        instructions under qemu, `none` being the set-up alone)
// Exit status 0 when everything agrees; the first mismatch is printed.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "transform/resample.h"
#include "transform/resample_kernels.h"

namespace {

using ringloader::AxisMapping;
using ringloader::DType;
using ringloader::Interpolation;
using ringloader::Layout;
using ringloader::OutputFormat;
using ringloader::Resampler;
using ringloader::SetResampleSimdForTesting;

int failures = 0;

void Fail(const std::string& what) {
  if (failures++ < 5) std::fprintf(stderr, "MISMATCH: %s\n", what.c_str());
}

/// Noise with flat runs and hard 0/255 edges (bicubic and lanczos overshoot past both ends
/// there, so the clamps are exercised).
std::vector<uint8_t> MakeImage(std::mt19937& rng, int w, int h, int bpp) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * bpp);
  const int kind = static_cast<int>(rng() % 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < bpp; ++c) {
        uint8_t v;
        if (kind == 0) {
          v = static_cast<uint8_t>(rng());
        } else if (kind == 1) {
          v = ((x / 3 + y / 2 + c) % 2) ? 255 : 0;
        } else {
          v = static_cast<uint8_t>((x * 7 + y * 13 + c * 50) % 256 < 128 ? rng() % 8 : 248 + rng() % 8);
        }
        px[(static_cast<size_t>(y) * w + x) * bpp + c] = v;
      }
    }
  }
  return px;
}

double Uniform(std::mt19937& rng, double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(rng);
}

int RandInt(std::mt19937& rng, int lo, int hi) {  // [lo, hi]
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

/// One axis: a crop of the source (sometimes reaching past its edges, sometimes mirrored),
/// scaled up or down to `out`.
AxisMapping RandomAxis(std::mt19937& rng, int src, int out, Interpolation filter) {
  double lo, hi;
  switch (rng() % 4) {
    case 0: lo = 0; hi = src; break;  // the whole axis
    case 1: lo = Uniform(rng, -0.2 * src, 0.4 * src); hi = Uniform(rng, 0.6 * src, 1.2 * src); break;
    case 2: lo = Uniform(rng, 0, src * 0.9); hi = lo + Uniform(rng, 0.5, src - lo); break;
    default: lo = RandInt(rng, 0, src / 2); hi = RandInt(rng, src / 2 + 1, src); break;
  }
  AxisMapping m;
  const bool mirrored = rng() % 5 == 0;
  m.begin = mirrored ? hi : lo;
  m.end = mirrored ? lo : hi;
  m.clip_lo = 0;
  m.clip_hi = src;
  m.out_size = out;
  m.filter = filter;
  m.reflect = rng() % 7 == 0;
  m.tensor_nearest = filter == Interpolation::kNearest && rng() % 3 == 0;
  m.tensor_taps = (filter == Interpolation::kBilinear || filter == Interpolation::kBicubic) &&
                  rng() % 3 == 0;  // torch's taps
  return m;
}

template <typename T>
bool Agree(Resampler& rs, const std::vector<uint8_t>& px, int bpp, int w, int h,
           const AxisMapping& ax, const AxisMapping& ay, const OutputFormat& fmt) {
  std::vector<T> simd(static_cast<size_t>(ax.out_size) * ay.out_size * 3), scalar(simd.size());
  SetResampleSimdForTesting(true);
  rs.Resample(px.data(), static_cast<size_t>(w) * bpp, bpp, w, h, ax, ay, fmt, simd.data());
  SetResampleSimdForTesting(false);
  rs.Resample(px.data(), static_cast<size_t>(w) * bpp, bpp, w, h, ax, ay, fmt, scalar.data());
  SetResampleSimdForTesting(true);
  return std::memcmp(simd.data(), scalar.data(), simd.size() * sizeof(T)) == 0;
}

int WholeResamples(int cases) {
  std::mt19937 rng(20261205);
  Resampler rs;
  const Interpolation filters[] = {Interpolation::kNearest, Interpolation::kLanczos,
                                   Interpolation::kBilinear, Interpolation::kBicubic,
                                   Interpolation::kBox,      Interpolation::kHamming};
  OutputFormat hwc8, chw8, chw32;
  hwc8.layout = Layout::kHWC;
  chw8.layout = Layout::kCHW;
  chw32.dtype = DType::kFloat32;
  chw32.layout = Layout::kCHW;
  for (int c = 0; c < 3; ++c) {
    chw32.scale[c] = 1.0f / (255.0f * (0.22f + 0.01f * c));
    chw32.bias[c] = -0.45f - 0.03f * c;
  }
  int vertical_first = 0, checked = 0;
  for (int i = 0; i < cases; ++i) {
    const Interpolation filter = filters[i % 6];
    const int w = RandInt(rng, 1, i % 9 == 0 ? 900 : 160);
    const int h = RandInt(rng, 1, 120);
    const int bpp = rng() % 2 ? 3 : 4;
    const std::vector<uint8_t> px = MakeImage(rng, w, h, bpp);
    // Down to 1/30, up to 4x, and odd sizes of every remainder.
    const int out_w = std::max(1, static_cast<int>(w * Uniform(rng, 0.033, 4.0)));
    const int out_h = std::max(1, static_cast<int>(h * Uniform(rng, 0.033, 3.0)));
    AxisMapping ax = RandomAxis(rng, w, out_w, filter);
    AxisMapping ay = RandomAxis(rng, h, out_h, filter);
    Resampler probe;
    probe.Prepare(ax, ay, w, h);
    vertical_first += probe.vertical_first();
    const char* what = nullptr;
    if (!Agree<uint8_t>(rs, px, bpp, w, h, ax, ay, hwc8)) what = "uint8 HWC";
    else if (!Agree<uint8_t>(rs, px, bpp, w, h, ax, ay, chw8)) what = "uint8 CHW";
    else if (!Agree<float>(rs, px, bpp, w, h, ax, ay, chw32)) what = "float32 CHW";
    ++checked;
    if (what != nullptr) {
      char msg[256];
      std::snprintf(msg, sizeof(msg),
                    "resample case %d (%s): filter %d, %dx%d bpp %d -> %dx%d, x [%g, %g), "
                    "y [%g, %g), reflect %d/%d",
                    i, what, static_cast<int>(filter), w, h, bpp, out_w, out_h, ax.begin, ax.end,
                    ay.begin, ay.end, ax.reflect, ay.reflect);
      Fail(msg);
    }
  }
  std::printf("whole resamples: %d cases (%d vertical-first), every filter, 3 write-outs\n",
              checked, vertical_first);
  if (vertical_first == 0 || vertical_first == checked) Fail("only one pass order was covered");
  return checked;
}

#if defined(__aarch64__)
namespace ri = ringloader::resample_internal;
constexpr int kShift = ringloader::kResamplePrecisionBits;
constexpr uint8_t kCanary = 0xA5;

uint8_t RefLevel(uint32_t sum) {  // sum includes the rounding half; wraps like int32 adds
  const int32_t v = static_cast<int32_t>(sum) >> kShift;
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

int32_t RandomWeight(std::mt19937& rng) {
  // Mostly Pillow's range (a tap of a normalised filter: about -0.2..1 of 2^22), sometimes
  // the extremes that still keep a tap's product inside 32 bits.
  switch (rng() % 4) {
    case 0: return RandInt(rng, -(1 << 23), 1 << 23);
    case 1: return RandInt(rng, -(1 << 15), 1 << 15);
    default: return RandInt(rng, -(1 << 20), 1 << 22);
  }
}

void DirectKernels() {
  std::mt19937 rng(38);
  for (int i = 0; i < 3000; ++i) {
    // Horizontal: out_w pixels, `taps` taps each, from random columns of an RGBX row.
    const int taps = RandInt(rng, 0, i % 10 == 0 ? 90 : 13);
    const int out_w = RandInt(rng, 1, 70);
    const int src_w = taps + RandInt(rng, 0, 60);
    const int origin = RandInt(rng, 0, 5);
    std::vector<uint8_t> src(static_cast<size_t>(src_w) * 4);
    for (auto& b : src) b = static_cast<uint8_t>(rng() % 3 == 0 ? (rng() % 2) * 255 : rng());
    std::vector<int32_t> bounds(2 * out_w), weights(static_cast<size_t>(out_w) * taps);
    for (int x = 0; x < out_w; ++x) {
      bounds[2 * x] = origin + RandInt(rng, 0, src_w - taps);
      bounds[2 * x + 1] = taps;
    }
    for (auto& k : weights) k = RandomWeight(rng);
    std::vector<uint8_t> got(static_cast<size_t>(out_w) * 3 + 16, kCanary);
    ri::HorizontalNeon(src.data(), origin, bounds.data(), weights.data(), taps, out_w, got.data());
    for (int x = 0; x < out_w; ++x) {
      const uint8_t* p = src.data() + static_cast<size_t>(bounds[2 * x] - origin) * 4;
      for (int c = 0; c < 3; ++c) {
        uint32_t sum = 1u << (kShift - 1);
        for (int t = 0; t < taps; ++t) {
          sum += static_cast<uint32_t>(p[4 * t + c]) *
                 static_cast<uint32_t>(weights[static_cast<size_t>(x) * taps + t]);
        }
        if (got[3 * x + c] != RefLevel(sum)) {
          Fail("HorizontalNeon case " + std::to_string(i) + " taps " + std::to_string(taps) +
               " out_w " + std::to_string(out_w) + " pixel " + std::to_string(x));
          break;
        }
      }
    }
    for (size_t b = static_cast<size_t>(out_w) * 3; b < got.size(); ++b) {
      if (got[b] != kCanary) Fail("HorizontalNeon wrote past 3 * out_w, case " + std::to_string(i));
    }

    // Vertical: width bytes of every remainder mod 16 and mod 8, n rows.
    const int n = RandInt(rng, 1, i % 10 == 0 ? 60 : 12);
    const int width = RandInt(rng, 1, 150);
    const size_t stride = static_cast<size_t>(width) + RandInt(rng, 0, 9);
    std::vector<uint8_t> rows(stride * n);
    for (auto& b : rows) b = static_cast<uint8_t>(rng() % 3 == 0 ? (rng() % 2) * 255 : rng());
    std::vector<int32_t> k(n);
    for (auto& v : k) v = RandomWeight(rng);
    std::vector<uint8_t> out(static_cast<size_t>(width) + 16, kCanary);
    ri::VerticalNeon(rows.data(), stride, n, k.data(), width, out.data());
    for (int b = 0; b < width; ++b) {
      uint32_t sum = 1u << (kShift - 1);
      for (int t = 0; t < n; ++t) {
        sum += static_cast<uint32_t>(rows[static_cast<size_t>(t) * stride + b]) *
               static_cast<uint32_t>(k[t]);
      }
      if (out[b] != RefLevel(sum)) {
        Fail("VerticalNeon case " + std::to_string(i) + " n " + std::to_string(n) + " width " +
             std::to_string(width) + " byte " + std::to_string(b));
        break;
      }
    }
    for (size_t b = width; b < out.size(); ++b) {
      if (out[b] != kCanary) Fail("VerticalNeon wrote past width, case " + std::to_string(i));
    }

    // uint8 planes: each plane's row exactly out_w bytes.
    const int pw = RandInt(rng, 1, 100);
    std::vector<uint8_t> levels(static_cast<size_t>(pw) * 3);
    for (auto& b : levels) b = static_cast<uint8_t>(rng());
    const size_t plane = pw + RandInt(rng, 0, 5);
    std::vector<uint8_t> planes(plane * 3 + 16, kCanary);
    ri::StorePlanar8Neon(levels.data(), pw, planes.data(), plane);
    for (int c = 0; c < 3; ++c) {
      for (size_t b = 0; b < plane; ++b) {
        const uint8_t want = b < static_cast<size_t>(pw) ? levels[3 * b + c] : kCanary;
        if (planes[c * plane + b] != want) {
          Fail("StorePlanar8Neon case " + std::to_string(i) + " width " + std::to_string(pw));
          c = 3;
          break;
        }
      }
    }
  }
  std::printf("NEON kernels called directly: 3000 cases each (horizontal, vertical, planes)\n");
}
#endif

/// Times whole resamples with the SIMD kernels and the scalar ones, interleaved.
void Bench() {
  struct Case {
    const char* name;
    int w, h, out_w, out_h;
    Interpolation filter;
  };
  const Case cases[] = {
      {"500x375 -> 224x224 bilinear", 500, 375, 224, 224, Interpolation::kBilinear},
      {"500x375 -> 224x224 bicubic", 500, 375, 224, 224, Interpolation::kBicubic},
      {"1024x768 -> 256x192 lanczos", 1024, 768, 256, 192, Interpolation::kLanczos},
      {"160x120 -> 320x240 bilinear (up)", 160, 120, 320, 240, Interpolation::kBilinear},
  };
  std::mt19937 rng(1);
  Resampler rs;
  OutputFormat fmt;
  fmt.layout = Layout::kCHW;
  for (const Case& c : cases) {
    const std::vector<uint8_t> px = MakeImage(rng, c.w, c.h, 3);
    AxisMapping ax{0, static_cast<double>(c.w), 0, static_cast<double>(c.w), c.out_w, c.filter};
    AxisMapping ay{0, static_cast<double>(c.h), 0, static_cast<double>(c.h), c.out_h, c.filter};
    std::vector<uint8_t> out(static_cast<size_t>(c.out_w) * c.out_h * 3);
    double best[2] = {1e30, 1e30};
    for (int rep = 0; rep < 5; ++rep) {
      for (int simd = 0; simd < 2; ++simd) {
        SetResampleSimdForTesting(simd == 1);
        const auto t0 = std::chrono::steady_clock::now();
        rs.Resample(px.data(), static_cast<size_t>(c.w) * 3, 3, c.w, c.h, ax, ay, fmt, out.data());
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best[simd] = std::min(best[simd], s);
      }
    }
    SetResampleSimdForTesting(true);
    std::printf("bench %-34s scalar %7.2f ms  simd %7.2f ms  ratio %.2fx\n", c.name,
                best[0] * 1e3, best[1] * 1e3, best[0] / best[1]);
  }
}

/// One 500x375 -> 224x224 resample (bicubic unless `filter` names another) with the SIMD
/// kernels or the scalar ones, for counting instructions under an emulator (`--once`).
void Once(const std::string& mode, Interpolation filter) {
  std::mt19937 rng(1);
  const std::vector<uint8_t> px = MakeImage(rng, 500, 375, 3);
  AxisMapping ax{0, 500, 0, 500, 224, filter};
  AxisMapping ay{0, 375, 0, 375, 224, filter};
  OutputFormat fmt;
  std::vector<uint8_t> out(224 * 224 * 3);
  Resampler rs;
  SetResampleSimdForTesting(mode == "simd");
  if (mode != "none") rs.Resample(px.data(), 500 * 3, 3, 500, 375, ax, ay, fmt, out.data());
  unsigned sum = 0;
  for (uint8_t v : out) sum = sum * 31 + v;
  std::printf("once: %s, checksum %08x\n", mode.c_str(), sum);
}

}  // namespace

int main(int argc, char** argv) {
  // --once simd|scalar|none [filter number]: one resample only (none: the set-up alone).
  if (argc > 2 && std::strcmp(argv[1], "--once") == 0) {
    const auto filter = static_cast<Interpolation>(argc > 3 ? std::atoi(argv[3]) : 3);
    Once(argv[2], filter);
    return 0;
  }
  const bool has_simd = SetResampleSimdForTesting(true);
#if defined(__aarch64__)
  if (!has_simd) {
    std::fprintf(stderr, "FAIL: no NEON kernels are dispatched on AArch64\n");
    return 1;
  }
  std::printf("architecture: aarch64 (NEON kernels)\n");
  DirectKernels();
#else
  std::printf("architecture: not aarch64 (SIMD kernels here: %s)\n", has_simd ? "yes" : "none");
#endif
  WholeResamples(600);
  if (failures > 0) {
    std::fprintf(stderr, "FAIL: %d mismatches between the SIMD and scalar kernels\n", failures);
    return 1;
  }
  std::printf("OK: SIMD and scalar kernels agree bit for bit\n");
  if (argc > 1 && std::strcmp(argv[1], "--bench") == 0) Bench();
  return 0;
}
