#include "decode/png_unfilter.h"

#include <cstdlib>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#define RINGLOADER_UNFILTER_SIMD "SSE2"
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#define RINGLOADER_UNFILTER_SIMD "NEON"
#endif

namespace ringloader::decode_internal {
namespace {

enum Filter { kNone = 0, kSub = 1, kUp = 2, kAverage = 3, kPaeth = 4 };

inline uint8_t PaethPredictor(int a, int b, int c) {
  const int pa = std::abs(b - c), pb = std::abs(a - c), pc = std::abs(a + b - 2 * c);
  if (pa <= pb && pa <= pc) return static_cast<uint8_t>(a);
  return static_cast<uint8_t>(pb <= pc ? b : c);
}

void UpRow(const uint8_t* prev, uint8_t* row, size_t len) {
  for (size_t i = 0; i < len; ++i) row[i] = static_cast<uint8_t>(row[i] + prev[i]);
}

#if defined(RINGLOADER_UNFILTER_SIMD)

/// One pixel of `kBpp` bytes in the low bytes of a word (the others zero), for the low lanes of
/// a SIMD register; the loads and stores touch exactly the pixel's bytes, so the row can be
/// unfiltered in place with nothing read past its end. The bytes go through a general register,
/// never through memory: a 4-byte reload of bytes just stored in two pieces would stall on store
/// forwarding, on the Sub/Average/Paeth chain.
template <int kBpp>
inline uint32_t LoadPixelBits(const uint8_t* p) {
  uint32_t v;
  if constexpr (kBpp == 4) {
    std::memcpy(&v, p, 4);
  } else {
    uint16_t low;
    std::memcpy(&low, p, 2);
    v = low | uint32_t{p[2]} << 16;
  }
  return v;
}

template <int kBpp>
inline void StorePixelBits(uint8_t* p, uint32_t x) {
  if constexpr (kBpp == 4) {
    std::memcpy(p, &x, 4);
  } else {
    const uint16_t low = static_cast<uint16_t>(x);
    std::memcpy(p, &low, 2);
    p[2] = static_cast<uint8_t>(x >> 16);
  }
}

#endif  // RINGLOADER_UNFILTER_SIMD

#if defined(__SSE2__)

template <int kBpp>
inline __m128i LoadPixel(const uint8_t* p) {
  return _mm_cvtsi32_si128(static_cast<int>(LoadPixelBits<kBpp>(p)));
}

template <int kBpp>
inline void StorePixel(uint8_t* p, __m128i v) {
  StorePixelBits<kBpp>(p, static_cast<uint32_t>(_mm_cvtsi128_si32(v)));
}

template <int kBpp>
void SubPixels(uint8_t* row, size_t len) {
  __m128i left = _mm_setzero_si128();
  for (size_t i = 0; i < len; i += kBpp) {
    left = _mm_add_epi8(LoadPixel<kBpp>(row + i), left);
    StorePixel<kBpp>(row + i, left);
  }
}

/// floor((left + up) / 2) per byte: _mm_avg_epu8 rounds up, so subtract the odd sums' carry.
template <int kBpp>
void AveragePixels(const uint8_t* prev, uint8_t* row, size_t len) {
  const __m128i one = _mm_set1_epi8(1);
  __m128i left = _mm_setzero_si128();
  for (size_t i = 0; i < len; i += kBpp) {
    const __m128i up = LoadPixel<kBpp>(prev + i);
    const __m128i mean =
        _mm_sub_epi8(_mm_avg_epu8(left, up), _mm_and_si128(_mm_xor_si128(left, up), one));
    left = _mm_add_epi8(LoadPixel<kBpp>(row + i), mean);
    StorePixel<kBpp>(row + i, left);
  }
}

inline __m128i Abs16(__m128i v) { return _mm_max_epi16(v, _mm_sub_epi16(_mm_setzero_si128(), v)); }

/// `mask` lanes from `yes`, the others from `no`.
inline __m128i Select(__m128i mask, __m128i yes, __m128i no) {
  return _mm_or_si128(_mm_and_si128(mask, yes), _mm_andnot_si128(mask, no));
}

/// The Paeth predictor on 16-bit lanes: with p = a + b - c, |p - a| = |b - c|,
/// |p - b| = |a - c| and |p - c| = |(b - c) + (a - c)|; ties go to a, then b, as the spec says.
template <int kBpp>
void PaethPixels(const uint8_t* prev, uint8_t* row, size_t len) {
  const __m128i zero = _mm_setzero_si128();
  __m128i a = zero, c = zero;  // left and upper-left, widened
  for (size_t i = 0; i < len; i += kBpp) {
    const __m128i b = _mm_unpacklo_epi8(LoadPixel<kBpp>(prev + i), zero);
    const __m128i b_minus_c = _mm_sub_epi16(b, c), a_minus_c = _mm_sub_epi16(a, c);
    const __m128i pa = Abs16(b_minus_c), pb = Abs16(a_minus_c);
    const __m128i pc = Abs16(_mm_add_epi16(b_minus_c, a_minus_c));
    const __m128i b_or_c = Select(_mm_cmpgt_epi16(pb, pc), c, b);
    const __m128i pred = Select(_mm_cmpgt_epi16(pa, _mm_min_epi16(pb, pc)), b_or_c, a);
    const __m128i out = _mm_add_epi8(LoadPixel<kBpp>(row + i), _mm_packus_epi16(pred, pred));
    StorePixel<kBpp>(row + i, out);
    a = _mm_unpacklo_epi8(out, zero);
    c = b;
  }
}

#elif defined(__ARM_NEON)

// The same three chains in NEON's 64-bit registers (NEON is baseline on AArch64: no runtime
// check). The lanes above the pixel's bytes stay zero and are never stored.

template <int kBpp>
inline uint8x8_t LoadPixel(const uint8_t* p) {
  return vcreate_u8(LoadPixelBits<kBpp>(p));
}

template <int kBpp>
inline void StorePixel(uint8_t* p, uint8x8_t v) {
  StorePixelBits<kBpp>(p, vget_lane_u32(vreinterpret_u32_u8(v), 0));
}

template <int kBpp>
void SubPixels(uint8_t* row, size_t len) {
  uint8x8_t left = vdup_n_u8(0);
  for (size_t i = 0; i < len; i += kBpp) {
    left = vadd_u8(LoadPixel<kBpp>(row + i), left);
    StorePixel<kBpp>(row + i, left);
  }
}

/// floor((left + up) / 2) per byte is exactly vhadd_u8 (a halving add that truncates).
template <int kBpp>
void AveragePixels(const uint8_t* prev, uint8_t* row, size_t len) {
  uint8x8_t left = vdup_n_u8(0);
  for (size_t i = 0; i < len; i += kBpp) {
    left = vadd_u8(LoadPixel<kBpp>(row + i), vhadd_u8(left, LoadPixel<kBpp>(prev + i)));
    StorePixel<kBpp>(row + i, left);
  }
}

/// The Paeth predictor with the same identities as the SSE2 form: |p - a| = |b - c| and
/// |p - b| = |a - c| (absolute differences widened to 16 bits), |p - c| = |(b - c) + (a - c)|
/// on signed 16-bit lanes; ties go to a, then b. The 16-bit masks narrow to byte masks.
template <int kBpp>
void PaethPixels(const uint8_t* prev, uint8_t* row, size_t len) {
  uint8x8_t a = vdup_n_u8(0), c = vdup_n_u8(0);  // left and upper-left
  for (size_t i = 0; i < len; i += kBpp) {
    const uint8x8_t b = LoadPixel<kBpp>(prev + i);
    const uint16x8_t pa = vabdl_u8(b, c), pb = vabdl_u8(a, c);
    const int16x8_t b_minus_c = vreinterpretq_s16_u16(vsubl_u8(b, c));
    const int16x8_t a_minus_c = vreinterpretq_s16_u16(vsubl_u8(a, c));
    const uint16x8_t pc = vreinterpretq_u16_s16(vabsq_s16(vaddq_s16(b_minus_c, a_minus_c)));
    const uint8x8_t b_or_c = vbsl_u8(vmovn_u16(vcleq_u16(pb, pc)), b, c);
    const uint8x8_t pred = vbsl_u8(vmovn_u16(vcleq_u16(pa, vminq_u16(pb, pc))), a, b_or_c);
    a = vadd_u8(LoadPixel<kBpp>(row + i), pred);
    StorePixel<kBpp>(row + i, a);
    c = b;
  }
}

#endif  // __SSE2__ / __ARM_NEON

#if defined(RINGLOADER_UNFILTER_SIMD)

template <int kBpp>
void UnfilterPixels(int filter, const uint8_t* prev, uint8_t* row, size_t len) {
  switch (filter) {
    case kSub:
      SubPixels<kBpp>(row, len);
      break;
    case kUp:
      UpRow(prev, row, len);
      break;
    case kAverage:
      AveragePixels<kBpp>(prev, row, len);
      break;
    case kPaeth:
      PaethPixels<kBpp>(prev, row, len);
      break;
    default:
      break;
  }
}

#endif  // RINGLOADER_UNFILTER_SIMD

}  // namespace

const char* UnfilterRowSimd() {
#if defined(RINGLOADER_UNFILTER_SIMD)
  return RINGLOADER_UNFILTER_SIMD;
#else
  return "scalar";
#endif
}

bool UnfilterRowReference(int filter, int bpp, const uint8_t* prev, uint8_t* row, size_t len) {
  if (filter < kNone || filter > kPaeth) return false;
  for (size_t i = 0; i < len; ++i) {
    const int a = i >= static_cast<size_t>(bpp) ? row[i - bpp] : 0;
    const int b = prev[i];
    const int c = i >= static_cast<size_t>(bpp) ? prev[i - bpp] : 0;
    int pred = 0;
    switch (filter) {
      case kSub: pred = a; break;
      case kUp: pred = b; break;
      case kAverage: pred = (a + b) / 2; break;
      case kPaeth: pred = PaethPredictor(a, b, c); break;
      default: break;
    }
    row[i] = static_cast<uint8_t>(row[i] + pred);
  }
  return true;
}

bool UnfilterRow(int filter, int bpp, const uint8_t* prev, uint8_t* row, size_t len) {
  if (filter < kNone || filter > kPaeth) return false;
  if (filter == kNone) return true;
  if (filter == kUp) {
    UpRow(prev, row, len);
    return true;
  }
#if defined(RINGLOADER_UNFILTER_SIMD)
  if (bpp == 3) {
    UnfilterPixels<3>(filter, prev, row, len);
    return true;
  }
  if (bpp == 4) {
    UnfilterPixels<4>(filter, prev, row, len);
    return true;
  }
#endif
  return UnfilterRowReference(filter, bpp, prev, row, len);
}

}  // namespace ringloader::decode_internal
