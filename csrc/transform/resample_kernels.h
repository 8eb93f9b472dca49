#pragma once
/// The resampler's per-architecture kernels that live outside resample.cc (internal; only
/// resample.cc dispatches to them, and the cross-compiled kernel test calls them directly).
/// Each computes exactly what resample.cc's scalar kernel of the same job computes: Pillow's
/// 22-bit fixed-point sums (rounding half added first, arithmetic shift, clip to 0..255), so
/// the levels are bit-identical to the scalar path for every filter and tap count.

#include <cstddef>
#include <cstdint>

namespace ringloader::resample_internal {

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
