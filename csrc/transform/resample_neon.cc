// NEON kernels of the resampler (AArch64). They compute the scalar kernels' sums exactly:
// every product pixel * weight is formed in 32-bit lanes (a level of at most 255 times a weight
// of at most 2^23 in magnitude fits), the adds wrap modulo 2^32 like any integer vector add, and
// the true sum fits in 32 bits (as in Pillow's int accumulator), so the order of the adds does
// not matter and the result is the scalar sum. The rounding half, the arithmetic shift by
// kResamplePrecisionBits and the saturating narrows (int32 -> uint16 -> uint8, which clamp
// exactly like clip8) then give the scalar kernels' levels bit for bit.
#include "transform/resample_kernels.h"

#if defined(__aarch64__)

#include <arm_neon.h>

#include <cstring>

#include "transform/resample.h"

namespace ringloader::resample_internal {
namespace {

/// Levels 0..255 of a fixed-point sum (the rounding half already added) in each lane; the
/// low 4 bytes of the result are lanes 0..3.
inline uint8x8_t Levels(int32x4_t acc) {
  const uint16x4_t words = vqmovun_s32(vshrq_n_s32(acc, kResamplePrecisionBits));
  return vqmovn_u16(vcombine_u16(words, words));
}

/// The low 4 bytes (one RGBX pixel), each widened to an int32 lane.
inline int32x4_t Widen4(uint8x8_t bytes) {
  return vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(bytes))));
}

}  // namespace

void HorizontalNeon(const uint8_t* src, int origin, const int32_t* bounds, const int32_t* weights,
                    int taps, int out_w, uint8_t* dst) {
  // One output pixel per vector (lanes R, G, B, X), four taps per step (one 16-byte load); two
  // accumulators so the multiply-adds of consecutive taps do not wait on each other.
  const int32x4_t half = vdupq_n_s32(kHalf);
  for (int x = 0; x < out_w; ++x) {
    const uint8_t* p = src + static_cast<ptrdiff_t>(bounds[2 * x] - origin) * 4;
    const int32_t* k = weights + static_cast<ptrdiff_t>(x) * taps;
    int32x4_t a = half;
    int32x4_t b = vdupq_n_s32(0);
    int t = 0;
    for (; t + 4 <= taps; t += 4) {
      const uint8x16_t px = vld1q_u8(p + 4 * t);
      const int32x4_t w = vld1q_s32(k + t);
      const uint16x8_t lo = vmovl_u8(vget_low_u8(px));
      const uint16x8_t hi = vmovl_high_u8(px);
      a = vmlaq_laneq_s32(a, vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(lo))), w, 0);
      b = vmlaq_laneq_s32(b, vreinterpretq_s32_u32(vmovl_high_u16(lo)), w, 1);
      a = vmlaq_laneq_s32(a, vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(hi))), w, 2);
      b = vmlaq_laneq_s32(b, vreinterpretq_s32_u32(vmovl_high_u16(hi)), w, 3);
    }
    if (t + 2 <= taps) {
      const uint16x8_t px = vmovl_u8(vld1_u8(p + 4 * t));
      a = vmlaq_n_s32(a, vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(px))), k[t]);
      b = vmlaq_n_s32(b, vreinterpretq_s32_u32(vmovl_high_u16(px)), k[t + 1]);
      t += 2;
    }
    if (t < taps) {  // the last tap: its 4 bytes only, never past the window
      uint32_t one;
      std::memcpy(&one, p + 4 * t, sizeof(one));
      a = vmlaq_n_s32(a, Widen4(vreinterpret_u8_u32(vdup_n_u32(one))), k[t]);
    }
    const uint32_t rgbx = vget_lane_u32(vreinterpret_u32_u8(Levels(vaddq_s32(a, b))), 0);
    // Little-endian: the low 3 bytes are R, G, B. Every pixel but the last stores 4 bytes (the
    // 4th is overwritten by the next pixel), the last exactly 3.
    std::memcpy(dst + 3 * x, &rgbx, x + 1 < out_w ? 4 : 3);
  }
}

void VerticalNeon(const uint8_t* rows, size_t stride, int n, const int32_t* k, int width,
                  uint8_t* out) {
  const int32x4_t half = vdupq_n_s32(kHalf);
  int i = 0;
  // 16 bytes per step in four 4-lane accumulators.
  for (; i + 16 <= width; i += 16) {
    int32x4_t a0 = half, a1 = half, a2 = half, a3 = half;
    const uint8_t* p = rows + i;
    for (int t = 0; t < n; ++t, p += stride) {
      const int32_t w = k[t];
      const uint8x16_t px = vld1q_u8(p);
      const uint16x8_t lo = vmovl_u8(vget_low_u8(px));
      const uint16x8_t hi = vmovl_high_u8(px);
      a0 = vmlaq_n_s32(a0, vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(lo))), w);
      a1 = vmlaq_n_s32(a1, vreinterpretq_s32_u32(vmovl_high_u16(lo)), w);
      a2 = vmlaq_n_s32(a2, vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(hi))), w);
      a3 = vmlaq_n_s32(a3, vreinterpretq_s32_u32(vmovl_high_u16(hi)), w);
    }
    const uint16x8_t w01 = vcombine_u16(vqmovun_s32(vshrq_n_s32(a0, kResamplePrecisionBits)),
                                        vqmovun_s32(vshrq_n_s32(a1, kResamplePrecisionBits)));
    const uint16x8_t w23 = vcombine_u16(vqmovun_s32(vshrq_n_s32(a2, kResamplePrecisionBits)),
                                        vqmovun_s32(vshrq_n_s32(a3, kResamplePrecisionBits)));
    vst1q_u8(out + i, vcombine_u8(vqmovn_u16(w01), vqmovn_u16(w23)));
  }
  // 8 bytes per step.
  for (; i + 8 <= width; i += 8) {
    int32x4_t a0 = half, a1 = half;
    const uint8_t* p = rows + i;
    for (int t = 0; t < n; ++t, p += stride) {
      const uint16x8_t px = vmovl_u8(vld1_u8(p));
      a0 = vmlaq_n_s32(a0, vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(px))), k[t]);
      a1 = vmlaq_n_s32(a1, vreinterpretq_s32_u32(vmovl_high_u16(px)), k[t]);
    }
    const uint16x8_t words = vcombine_u16(vqmovun_s32(vshrq_n_s32(a0, kResamplePrecisionBits)),
                                          vqmovun_s32(vshrq_n_s32(a1, kResamplePrecisionBits)));
    vst1_u8(out + i, vqmovn_u16(words));
  }
  // The last bytes (fewer than 8) one at a time, as the scalar kernel does them.
  for (; i < width; ++i) {
    uint32_t acc = static_cast<uint32_t>(kHalf);  // wraps like the vector lanes
    for (int t = 0; t < n; ++t) {
      acc += static_cast<uint32_t>(rows[static_cast<size_t>(t) * stride + i]) *
             static_cast<uint32_t>(k[t]);
    }
    const int32_t level = static_cast<int32_t>(acc) >> kResamplePrecisionBits;
    out[i] = static_cast<uint8_t>(level < 0 ? 0 : level > 255 ? 255 : level);
  }
}

void StorePlanar8Neon(const uint8_t* levels, int out_w, uint8_t* row, size_t plane) {
  int x = 0;
  // vld3 splits 16 RGB pixels (48 bytes) into the three channels' 16 bytes.
  for (; x + 16 <= out_w; x += 16) {
    const uint8x16x3_t rgb = vld3q_u8(levels + 3 * x);
    vst1q_u8(row + x, rgb.val[0]);
    vst1q_u8(row + plane + x, rgb.val[1]);
    vst1q_u8(row + 2 * plane + x, rgb.val[2]);
  }
  for (int c = 0; c < 3; ++c) {
    for (int i = x; i < out_w; ++i) row[c * plane + i] = levels[3 * i + c];
  }
}

}  // namespace ringloader::resample_internal

#endif  // __aarch64__
