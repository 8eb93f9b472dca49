// The resampler's x86 kernels: SSE4.1/AVX2 intrinsics in target("avx2") functions, so the
// same binary runs everywhere; resample.cc picks them once, at start-up, when CpuHasAvx2()
// says so. Each is bit-identical to resample.cc's scalar kernel of the same job (see
// resample_kernels.h). Empty on other architectures.
#include "transform/resample_kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <cpuid.h>
#include <immintrin.h>

#include <array>
#include <cstring>

namespace ringloader::resample_internal {

/// AVX2 from CPUID and XGETBV themselves: __builtin_cpu_supports needs the compiler runtime's
/// CPU model filled in at start-up, which Zig's (the manylinux_2_28 wheels' toolchain) leaves
/// empty, and its answer was then always "no".
bool CpuHasAvx2() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) || !(c & bit_AVX)) return false;
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 0x6) != 0x6) return false;  // the OS saves the XMM and YMM registers
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_AVX2);
}

__attribute__((target("avx2"))) int CopyRgbxAvx2(const uint8_t* src, int step, int n,
                                                 uint8_t* dst) {
  // Pixels i..i+3 in 16 bytes; the store's last 4 bytes land on pixels i+4 and i+5, which the
  // next store (or the caller's copy of the rest) writes again: so a store needs i + 6 <= n.
  const __m128i forward = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  const __m128i backward = _mm_setr_epi8(12, 13, 14, 8, 9, 10, 4, 5, 6, 0, 1, 2, -1, -1, -1, -1);
  int i = 0;
  if (step == 1) {
    for (; i + 6 <= n; i += 4) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 4 * i));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 3 * i), _mm_shuffle_epi8(v, forward));
    }
  } else if (step == -1) {
    for (; i + 6 <= n; i += 4) {
      // Pixels i+3 .. i in memory order, 16 bytes from the pixel of i+3.
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src - 4 * (i + 3)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 3 * i), _mm_shuffle_epi8(v, backward));
    }
  }
  return i;
}

/// One row of levels (out_w RGB) into three uint8 planes as they are (WriteRow's CHW layout
/// through an identity lookup table; plane c's row starts at row + c * plane), 16 pixels (48
/// bytes, three 16-byte loads) at a time: each plane's 16 bytes are three byte shuffles, one
/// per load, OR-ed together.
__attribute__((target("avx2"))) void StorePlanar8Avx2(const uint8_t* levels, int out_w,
                                                      uint8_t* row, size_t plane) {
  // kPick[c][k]: for channel c and load k, the byte of the load that lands at each position
  // of the plane's 16 bytes (-1: another load's byte).
  static constexpr auto kPick = [] {
    std::array<std::array<std::array<int8_t, 16>, 3>, 3> pick{};
    for (int c = 0; c < 3; ++c) {
      for (int i = 0; i < 16; ++i) {
        const int byte = 3 * i + c;  // byte of the 48 that holds pixel i's channel c
        for (int k = 0; k < 3; ++k) {
          pick[c][k][i] = static_cast<int8_t>(byte / 16 == k ? byte % 16 : -1);
        }
      }
    }
    return pick;
  }();
  __m128i mask[3][3];
  for (int c = 0; c < 3; ++c) {
    for (int k = 0; k < 3; ++k) {
      mask[c][k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kPick[c][k].data()));
    }
  }
  int x = 0;
  for (; x + 16 <= out_w; x += 16) {
    const uint8_t* p = levels + 3 * x;
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32));
    for (int c = 0; c < 3; ++c) {
      const __m128i v = _mm_or_si128(
          _mm_or_si128(_mm_shuffle_epi8(a, mask[c][0]), _mm_shuffle_epi8(b, mask[c][1])),
          _mm_shuffle_epi8(d, mask[c][2]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(row + c * plane + x), v);
    }
  }
  for (int c = 0; c < 3; ++c) {
    for (int i = x; i < out_w; ++i) row[c * plane + i] = levels[3 * i + c];
  }
}

/// One row of levels (out_w RGB) into three planes of 32-bit elements through the per-channel
/// lookup table (WriteRow's CHW layout; plane c's row starts at row + c * plane), 8 lookups per
/// gather. The loads stay inside the row's 3 * out_w bytes (the rows of WriteImage have no
/// padding); the rest of the row is stored one element at a time.
__attribute__((target("avx2"))) void StorePlanar32Avx2(const uint8_t* levels, int out_w,
                                                       const uint32_t (*lut)[256],
                                                       uint32_t* row, size_t plane) {
  // Channel c of pixels 0..7, from 16 bytes at 3x + c (pixels 0..5) and 16 at 3x + c + 8
  // (pixels 6 and 7 at offsets 10 and 13).
  const __m128i first = _mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m128i second =
      _mm_setr_epi8(-1, -1, -1, -1, -1, -1, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1);
  const size_t bytes = static_cast<size_t>(out_w) * 3;
  for (int c = 0; c < 3; ++c) {
    uint32_t* out = row + c * plane;
    const auto* l = reinterpret_cast<const int*>(lut[c]);
    int x = 0;
    for (; static_cast<size_t>(3 * x + c + 24) <= bytes; x += 8) {
      const uint8_t* p = levels + 3 * x + c;
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8));
      const __m256i index =
          _mm256_cvtepu8_epi32(_mm_or_si128(_mm_shuffle_epi8(a, first), _mm_shuffle_epi8(b, second)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + x), _mm256_i32gather_epi32(l, index, 4));
    }
    for (; x < out_w; ++x) out[x] = static_cast<uint32_t>(l[levels[3 * x + c]]);
  }
}

__attribute__((target("avx2"))) void StorePlanar32OpsAvx2(const uint8_t* levels, int out_w,
                                                          const uint32_t (*lut)[256],
                                                          const LevelOps& ops, uint32_t* row,
                                                          size_t plane) {
  // The byte picks of StorePlanar32Avx2; each operation its own instruction (no FMA in this
  // target), as torch runs each step over the tensor.
  const __m128i first = _mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m128i second =
      _mm_setr_epi8(-1, -1, -1, -1, -1, -1, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1);
  const size_t bytes = static_cast<size_t>(out_w) * 3;
  for (int c = 0; c < 3; ++c) {
    __m256 k[LevelOps::kMax];
    for (int i = 0; i < ops.n; ++i) k[i] = _mm256_set1_ps(ops.k[i][c]);
    uint32_t* out = row + c * plane;
    int x = 0;
    for (; static_cast<size_t>(3 * x + c + 24) <= bytes; x += 8) {
      const uint8_t* p = levels + 3 * x + c;
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8));
      __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
          _mm_or_si128(_mm_shuffle_epi8(a, first), _mm_shuffle_epi8(b, second))));
      for (int i = 0; i < ops.n; ++i) {
        switch (ops.op[i]) {
          case '*': v = _mm256_mul_ps(v, k[i]); break;
          case '/': v = _mm256_div_ps(v, k[i]); break;
          default: v = _mm256_sub_ps(v, k[i]); break;
        }
      }
      _mm256_storeu_ps(reinterpret_cast<float*>(out + x), v);
    }
    for (; x < out_w; ++x) out[x] = lut[c][levels[3 * x + c]];
  }
}

namespace {

/// The sums of HorizontalAvx2's pair of output pixels at p0 and p1 (their first taps), over
/// `pairs` pairs of taps and, when `odd`, a last single tap; `w` at their PairWeights.
/// `kPairs` >= 0 fixes the pair count at compile time (the loop unrolled, no loop counter);
/// -1 reads it from `pairs`.
template <int kPairs, bool kOdd>
__attribute__((target("avx2"), always_inline)) inline __m256i PixelPairSums(
    const uint8_t* p0, const uint8_t* p1, const int16_t* w, int pairs) {
  // Bytes R G B X of taps t and t+1 -> R_t R_t+1 G_t G_t+1 ..., for each of the two pixels.
  const __m128i interleave = _mm_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
  __m256i lo = _mm256_setzero_si256();
  __m256i hi = _mm256_setzero_si256();
  const int n = kPairs >= 0 ? kPairs : pairs;
#pragma GCC unroll 8
  for (int s = 0; s < n; ++s) {
    __m128i two = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p0 + 8 * s));
    two = _mm_castpd_si128(
        _mm_loadh_pd(_mm_castsi128_pd(two), reinterpret_cast<const double*>(p1 + 8 * s)));
    const __m256i px = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(two, interleave));
    const auto* k = reinterpret_cast<const __m256i*>(w + 32 * s);
    lo = _mm256_add_epi32(lo, _mm256_madd_epi16(px, _mm256_loadu_si256(k)));
    hi = _mm256_add_epi32(hi, _mm256_madd_epi16(px, _mm256_loadu_si256(k + 1)));
  }
  if (kOdd) {  // the last tap: 4 bytes per pixel, never past the window
    int32_t a, b;
    std::memcpy(&a, p0 + 8 * n, sizeof(a));
    std::memcpy(&b, p1 + 8 * n, sizeof(b));
    const __m256i px =
        _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_setr_epi32(a, 0, b, 0), interleave));
    const auto* k = reinterpret_cast<const __m256i*>(w + 32 * n);
    lo = _mm256_add_epi32(lo, _mm256_madd_epi16(px, _mm256_loadu_si256(k)));
    hi = _mm256_add_epi32(hi, _mm256_madd_epi16(px, _mm256_loadu_si256(k + 1)));
  }
  return _mm256_add_epi32(_mm256_add_epi32(lo, _mm256_set1_epi32(kHalf)),
                          _mm256_slli_epi32(hi, 15));
}

/// HorizontalAvx2 for a tap count of 2 * kPairs + kOdd (kPairs -1: any count).
template <int kPairs, bool kOdd>
__attribute__((target("avx2"))) void HorizontalAvx2T(const uint8_t* src, int origin,
                                                     const HorizontalTaps& h, uint8_t* dst) {
  const int pairs = h.taps / 2;
  const int step = 32 * (pairs + (kOdd ? 1 : 0));  // PairWeights' int16 values per pixel pair
  const uint8_t* base = src + static_cast<ptrdiff_t>(h.first - origin) * 4;
  const int16_t* w = h.pair_weights;
  // Four pixels a step: both pairs' sums packed together, and their RGB levels (12 bytes)
  // stored at once. The store's 4 bytes past them land on the next pixel or in the padding
  // after the row (the 4 bytes Resampler::Prepare keeps after each row of levels).
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m128i rgb = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  int x = 0;
  for (; x + 4 <= h.out_w; x += 4, w += 2 * step) {
    const __m256i a = _mm256_srai_epi32(
        PixelPairSums<kPairs, kOdd>(base + h.offsets[x], base + h.offsets[x + 1], w, pairs),
        kResamplePrecisionBits);
    const __m256i b = _mm256_srai_epi32(PixelPairSums<kPairs, kOdd>(base + h.offsets[x + 2],
                                                                     base + h.offsets[x + 3],
                                                                     w + step, pairs),
                                        kResamplePrecisionBits);
    // Saturating packs clamp to 0..255 exactly like clip8. The bytes' dwords are then pixels
    // x, x+2, x, x+2 | x+1, x+3, x+1, x+3 (RGBX each), put in order by the permute.
    const __m256i words = _mm256_packs_epi32(a, b);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(words, words), order);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 3 * x),
                     _mm_shuffle_epi8(_mm256_castsi256_si128(bytes), rgb));
  }
  for (; x < h.out_w; x += 2, w += step) {
    const __m256i acc = _mm256_srai_epi32(
        PixelPairSums<kPairs, kOdd>(base + h.offsets[x], base + h.offsets[x + 1], w, pairs),
        kResamplePrecisionBits);
    // Each lane's low 4 bytes are its pixel's RGBX.
    const __m256i words = _mm256_packs_epi32(acc, acc);
    const __m256i bytes = _mm256_packus_epi16(words, words);
    const int32_t first = _mm256_cvtsi256_si32(bytes);
    std::memcpy(dst + 3 * x, &first, sizeof(first));
    if (x + 1 < h.out_w) {
      const int32_t second = _mm_cvtsi128_si32(_mm256_extracti128_si256(bytes, 1));
      std::memcpy(dst + 3 * x + 3, &second, sizeof(second));
    }
  }
}

}  // namespace

/// Two output pixels per 256-bit vector (one per 128-bit lane), two taps per pmaddwd: the
/// lane holds a pixel's (R_t, R_t+1, G_t, G_t+1, ...) as 16-bit values, multiplied by
/// PairWeights' lo and hi halves. `src` is RGBX whose first pixel is source column `origin`.
/// Each output stores 4 bytes; the 4th is overwritten by the next pixel or lands in the row's
/// padding. The tap counts of downscales up to 4x with the bilinear filter (up to 2x bicubic)
/// run with the pair loop unrolled at compile time.
__attribute__((target("avx2"))) void HorizontalAvx2(const uint8_t* src, int origin,
                                                    const HorizontalTaps& h, uint8_t* dst) {
  using Fn = void (*)(const uint8_t*, int, const HorizontalTaps&, uint8_t*);
  // [pairs of taps][odd tap]: 0..4 pairs unrolled, more through the loop (index 5).
  static constexpr Fn kByTaps[6][2] = {
      {HorizontalAvx2T<0, false>, HorizontalAvx2T<0, true>},
      {HorizontalAvx2T<1, false>, HorizontalAvx2T<1, true>},
      {HorizontalAvx2T<2, false>, HorizontalAvx2T<2, true>},
      {HorizontalAvx2T<3, false>, HorizontalAvx2T<3, true>},
      {HorizontalAvx2T<4, false>, HorizontalAvx2T<4, true>},
      {HorizontalAvx2T<-1, false>, HorizontalAvx2T<-1, true>},
  };
  kByTaps[std::min(h.taps / 2, 5)][h.taps % 2](src, origin, h, dst);
}

/// 32 bytes per step, four 8-lane accumulators in registers.
__attribute__((target("avx2"))) void VerticalAvx2(const uint8_t* rows, size_t stride, int n,
                                                  const int32_t* k, int width, uint8_t* out) {
  const __m256i half = _mm256_set1_epi32(kHalf);
  int i = 0;
  for (; i + 32 <= width; i += 32) {
    __m256i a0 = half, a1 = half, a2 = half, a3 = half;
    const uint8_t* p = rows + i;
    for (int t = 0; t < n; ++t, p += stride) {
      const __m256i w = _mm256_set1_epi32(k[t]);
      const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16));
      a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(lo), w));
      a1 = _mm256_add_epi32(a1, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)), w));
      a2 = _mm256_add_epi32(a2, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(hi), w));
      a3 = _mm256_add_epi32(a3, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)), w));
    }
    a0 = _mm256_srai_epi32(a0, kResamplePrecisionBits);
    a1 = _mm256_srai_epi32(a1, kResamplePrecisionBits);
    a2 = _mm256_srai_epi32(a2, kResamplePrecisionBits);
    a3 = _mm256_srai_epi32(a3, kResamplePrecisionBits);
    // packs/packus work within 128-bit lanes; the permute restores pixel order.
    const __m256i s01 = _mm256_packs_epi32(a0, a1);
    const __m256i s23 = _mm256_packs_epi32(a2, a3);
    const __m256i bytes = _mm256_permute4x64_epi64(_mm256_packus_epi16(s01, s23), 0xD8);
    const __m256i ordered = _mm256_shuffle_epi32(bytes, 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), ordered);
  }
  VerticalScalar(rows + i, stride, n, k, width - i, out + i);
}

}  // namespace ringloader::resample_internal

#endif
