// AdjustHue's round trip in SSE/AVX2 lanes (hue_kernels.h): 4 pixels at a time, floats in
// 128-bit lanes and doubles in 256-bit lanes, every operation the scalar code's (image_ops.cc
// RgbToHsv and HsvToRgb: Pillow's Convert.c) in its order and precision. target("avx2") only,
// not "fma": the compiler may then not fuse a multiply and an add, which would round once
// where Pillow rounds twice. Empty on other architectures.
#include "transform/hue_kernels.h"

#ifdef RL_HAVE_AVX2_KERNELS

#include <immintrin.h>

namespace ringloader::image_ops_internal {
namespace {

// Pillow's round() of non-negative doubles (half away from zero), as int32 lanes: the whole
// part, plus one where the (exact) fraction is at least one half.
__attribute__((target("avx2"))) inline __m128i RoundHalfUp(__m256d x) {
  const __m256d whole = _mm256_round_pd(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256d up = _mm256_cmp_pd(_mm256_sub_pd(x, whole), _mm256_set1_pd(0.5), _CMP_GE_OQ);
  const __m128i w = _mm256_cvttpd_epi32(whole);
  // 1.0 where the mask is set, 0.0 elsewhere.
  const __m128i up32 = _mm256_cvtpd_epi32(_mm256_and_pd(up, _mm256_set1_pd(1.0)));
  return _mm_add_epi32(w, up32);
}

__attribute__((target("avx2"))) inline __m128i Clip8(__m128i v) {
  return _mm_min_epi32(_mm_max_epi32(v, _mm_setzero_si128()), _mm_set1_epi32(255));
}

// The round trip's levels for the 4 RGB pixels at `p`: v, p, q, t, the sector and whether the
// pixel stays grey, one int per pixel each.
struct Hue4 {
  alignas(16) int v[4], p[4], q[4], t[4], sector[4], grey[4];
};

__attribute__((target("avx2"), always_inline)) inline void Levels(const uint8_t* p, __m128i shift, Hue4* out) {
  const __m256d one = _mm256_set1_pd(1.0);
  const __m256d six = _mm256_set1_pd(6.0);
  const __m256d l255 = _mm256_set1_pd(255.0);
  const __m128i r = _mm_setr_epi32(p[0], p[3], p[6], p[9]);
  const __m128i g = _mm_setr_epi32(p[1], p[4], p[7], p[10]);
  const __m128i b = _mm_setr_epi32(p[2], p[5], p[8], p[11]);
  const __m128i maxc = _mm_max_epi32(r, _mm_max_epi32(g, b));
  const __m128i minc = _mm_min_epi32(r, _mm_min_epi32(g, b));
  // RgbToHsv. Grey lanes (minc == maxc) divide by zero here; they keep their pixel below.
  const __m128 cr = _mm_cvtepi32_ps(_mm_sub_epi32(maxc, minc));
  const __m128 s = _mm_div_ps(cr, _mm_cvtepi32_ps(maxc));
  const __m128 rc = _mm_div_ps(_mm_cvtepi32_ps(_mm_sub_epi32(maxc, r)), cr);
  const __m128 gc = _mm_div_ps(_mm_cvtepi32_ps(_mm_sub_epi32(maxc, g)), cr);
  const __m128 bc = _mm_div_ps(_mm_cvtepi32_ps(_mm_sub_epi32(maxc, b)), cr);
  const __m256d rcd = _mm256_cvtps_pd(rc), gcd = _mm256_cvtps_pd(gc), bcd = _mm256_cvtps_pd(bc);
  const __m128 h_r = _mm_sub_ps(bc, gc);
  const __m128 h_g = _mm256_cvtpd_ps(_mm256_sub_pd(_mm256_add_pd(_mm256_set1_pd(2.0), rcd), bcd));
  const __m128 h_b = _mm256_cvtpd_ps(_mm256_sub_pd(_mm256_add_pd(_mm256_set1_pd(4.0), gcd), rcd));
  const __m128 is_r = _mm_castsi128_ps(_mm_cmpeq_epi32(r, maxc));
  const __m128 is_g = _mm_castsi128_ps(_mm_cmpeq_epi32(g, maxc));
  const __m128 h = _mm_blendv_ps(_mm_blendv_ps(h_b, h_g, is_g), h_r, is_r);
  const __m256d turns = _mm256_add_pd(_mm256_div_pd(_mm256_cvtps_pd(h), six), one);
  const __m256d wrapped =
      _mm256_blendv_pd(turns, _mm256_sub_pd(turns, one), _mm256_cmp_pd(turns, one, _CMP_GE_OQ));
  const __m256d hd = _mm256_cvtps_pd(_mm256_cvtpd_ps(wrapped));
  const __m128i hue = Clip8(_mm256_cvttpd_epi32(_mm256_mul_pd(hd, l255)));
  const __m128i sat = Clip8(_mm256_cvttpd_epi32(_mm256_mul_pd(_mm256_cvtps_pd(s), l255)));
  // HsvToRgb of the shifted hue.
  const __m128i h2 = _mm_and_si128(_mm_add_epi32(hue, shift), _mm_set1_epi32(255));
  const __m256d h6 = _mm256_div_pd(_mm256_mul_pd(_mm256_cvtepi32_pd(h2), six), l255);
  const __m128i i = _mm256_cvttpd_epi32(h6);
  const __m128 f = _mm256_cvtpd_ps(_mm256_sub_pd(h6, _mm256_cvtepi32_pd(i)));
  const __m128 fs = _mm256_cvtpd_ps(_mm256_div_pd(_mm256_cvtepi32_pd(sat), l255));
  const __m256d fv = _mm256_cvtepi32_pd(maxc);
  const __m256d fsd = _mm256_cvtps_pd(fs), fd = _mm256_cvtps_pd(f);
  const __m128i pv = Clip8(RoundHalfUp(_mm256_mul_pd(fv, _mm256_sub_pd(one, fsd))));
  const __m128i qv = Clip8(RoundHalfUp(_mm256_mul_pd(fv, _mm256_sub_pd(one, _mm256_cvtps_pd(_mm_mul_ps(fs, f))))));
  const __m128i tv = Clip8(RoundHalfUp(
      _mm256_mul_pd(fv, _mm256_sub_pd(one, _mm256_mul_pd(fsd, _mm256_sub_pd(one, fd))))));
  _mm_store_si128(reinterpret_cast<__m128i*>(out->v), maxc);
  _mm_store_si128(reinterpret_cast<__m128i*>(out->p), pv);
  _mm_store_si128(reinterpret_cast<__m128i*>(out->q), qv);
  _mm_store_si128(reinterpret_cast<__m128i*>(out->t), tv);
  _mm_store_si128(reinterpret_cast<__m128i*>(out->sector), i);
  // Grey: no saturation after the round trip (s == 0), or none to begin with.
  _mm_store_si128(reinterpret_cast<__m128i*>(out->grey),
                  _mm_or_si128(_mm_cmpeq_epi32(sat, _mm_setzero_si128()), _mm_cmpeq_epi32(maxc, minc)));
}

// Writes the 4 pixels at `p` from their levels (hsv2rgb's switch: which of v, p, q, t each
// channel takes in each sector).
inline void Store(const Hue4& l, uint8_t* p) {
  static constexpr uint8_t kPick[6][3] = {{0, 3, 1}, {2, 0, 1}, {1, 0, 3}, {1, 2, 0}, {3, 1, 0}, {0, 1, 2}};
  for (int k = 0; k < 4; ++k, p += 3) {
    const uint8_t v = static_cast<uint8_t>(l.v[k]);
    if (l.grey[k]) {
      p[0] = p[1] = p[2] = v;
      continue;
    }
    const uint8_t levels[4] = {v, static_cast<uint8_t>(l.p[k]), static_cast<uint8_t>(l.q[k]),
                               static_cast<uint8_t>(l.t[k])};
    const uint8_t* pick = kPick[l.sector[k] % 6];
    p[0] = levels[pick[0]], p[1] = levels[pick[1]], p[2] = levels[pick[2]];
  }
}

}  // namespace

__attribute__((target("avx2"))) int HueRowAvx2(uint8_t* p, int n, uint8_t shift) {
  const __m128i by = _mm_set1_epi32(shift);
  Hue4 a, b;
  int x = 0;
  // Two independent groups a step, so that one's long chain of divisions overlaps the other's.
  for (; x + 8 <= n; x += 8, p += 24) {
    Levels(p, by, &a);
    Levels(p + 12, by, &b);
    Store(a, p);
    Store(b, p + 12);
  }
  for (; x + 4 <= n; x += 4, p += 12) {
    Levels(p, by, &a);
    Store(a, p);
  }
  return x;
}

}  // namespace ringloader::image_ops_internal

#endif  // RL_HAVE_AVX2_KERNELS
