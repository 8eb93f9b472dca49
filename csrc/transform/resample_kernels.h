#pragma once
/// The resampler's per-architecture kernels that live outside resample.cc (internal; only
/// resample.cc dispatches to them, and the cross-compiled kernel test calls them directly).
/// Each computes exactly what resample.cc's scalar kernel of the same job computes: Pillow's
/// 22-bit fixed-point sums (rounding half added first, arithmetic shift, clip to 0..255), so
/// the levels are bit-identical to the scalar path for every filter and tap count.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "transform/resample.h"

namespace ringloader::resample_internal {

/// Pillow's rounding half, added to every fixed-point sum before the shift.
inline constexpr int32_t kHalf = 1 << (kResamplePrecisionBits - 1);

/// Pillow's clip8: fixed-point sum (with the rounding half already added) to a level 0..255.
inline uint8_t Clip8(int32_t v) {
  return static_cast<uint8_t>(std::clamp(v >> kResamplePrecisionBits, 0, 255));
}

/// The horizontal taps of one resample in the forms the kernels read.
struct HorizontalTaps {
  const int32_t* bounds;        ///< (first source column, count) per output pixel
  const int32_t* weights;       ///< `taps` int32 weights per output pixel
  const int16_t* pair_weights;  ///< PairWeights' layout (the SIMD kernel)
  const uint32_t* offsets;      ///< per output pixel (an even count): byte offset of its first
                                ///< tap from source column `first` in an RGBX row
  int first;
  int taps;
  int out_w;
};

/// Vertical pass of one output row over `width` contiguous bytes: n rows of `rows` (stride
/// `stride`) weighted by `k` (resample.cc; the SIMD kernels finish their rows' tails with it).
void VerticalScalar(const uint8_t* rows, size_t stride, int n, const int32_t* k, int width,
                    uint8_t* out);

#if defined(__x86_64__) || defined(__i386__)
#define RL_HAVE_AVX2_KERNELS 1
/// resample_x86.cc. Callable only where CpuHasAvx2() is true.

/// AVX2 usable: the CPU has it and the OS saves the YMM registers.
bool CpuHasAvx2();

/// HorizontalScalar's job, two output pixels per 256-bit vector; reads `h.pair_weights` and
/// `h.offsets` (PairWeights' layout).
void HorizontalAvx2(const uint8_t* src, int origin, const HorizontalTaps& h, uint8_t* dst);

/// VerticalScalar's job, 32 bytes per step.
void VerticalAvx2(const uint8_t* rows, size_t stride, int n, const int32_t* k, int width,
                  uint8_t* out);

/// One row of levels (out_w RGB) into three planes of 32-bit elements through the per-channel
/// lookup table (plane c's row starts at row + c * plane).
void StorePlanar32Avx2(const uint8_t* levels, int out_w, const uint32_t (*lut)[256],
                       uint32_t* row, size_t plane);

/// StorePlanar32Avx2's job for float32 values that `ops` computes from each level: 8 levels
/// converted and computed in lanes, the row's last few looked up in `lut`.
void StorePlanar32OpsAvx2(const uint8_t* levels, int out_w, const uint32_t (*lut)[256],
                          const LevelOps& ops, uint32_t* row, size_t plane);

/// One row of levels (out_w RGB) into three uint8 planes as they are.
void StorePlanar8Avx2(const uint8_t* levels, int out_w, uint8_t* row, size_t plane);

/// The copying horizontal pass's job for a step of 1 or -1: RGB pixel i of `dst` is the RGBX
/// pixel at src + 4 * i * step, four pixels a shuffle. Copies a prefix of the n pixels, never
/// writing past byte 3 * n of `dst` nor reading a pixel outside the n, and returns its length
/// (the caller copies the rest).
int CopyRgbxAvx2(const uint8_t* src, int step, int n, uint8_t* dst);
#endif

#if defined(__aarch64__)
/// NEON is part of the AArch64 baseline: these need no runtime check.

/// Horizontal pass of one row (HorizontalScalar's contract): `src` is RGBX (4 bytes per pixel)
/// whose first pixel is source column `origin`; output pixel x reads `taps` source pixels
/// from column bounds[2 * x] with the int32 weights weights[x * taps ...]; writes out_w RGB
/// levels to `dst` (exactly 3 * out_w bytes).
void HorizontalNeon(const uint8_t* src, int origin, const int32_t* bounds, const int32_t* weights,
                    int taps, int out_w, uint8_t* dst);

/// Vertical pass of one output row over `width` contiguous bytes (VerticalScalar's contract):
/// n rows of `rows` (stride `stride`) weighted by `k`.
void VerticalNeon(const uint8_t* rows, size_t stride, int n, const int32_t* k, int width,
                  uint8_t* out);

/// One row of levels (out_w RGB) into three uint8 planes as they are (plane c's row starts at
/// row + c * plane).
void StorePlanar8Neon(const uint8_t* levels, int out_w, uint8_t* row, size_t plane);
#endif

}  // namespace ringloader::resample_internal
