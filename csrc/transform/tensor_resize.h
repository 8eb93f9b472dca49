#pragma once
/// torch's antialiased bilinear resize of uint8 images (torch.nn.functional.interpolate with
/// mode="bilinear", antialias=True, align_corners=False, sizes given), the kernel torchvision v2
/// runs on a uint8 video or image tensor: per axis, the triangle filter widened by the
/// downscale factor, taps normalised in double, then rescaled to int16 with the most fractional
/// bits the largest tap allows; the horizontal pass first into an 8-bit image, then the
/// vertical one, each output rounded (half up) and saturated. The arithmetic is torch's, so the
/// levels are equal (its vectorised and scalar kernels compute the same integers).

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ringloader {

/// One axis's taps: output i reads `count[i]` source pixels from `first[i]`, weighted by
/// weights[i * ksize ...] with `precision` fractional bits. `bicubic`: torch's antialiased
/// bicubic kernel of uint8 images instead (Keys' cubic with a = -0.5, support 2 widened by the
/// downscale factor: the same taps rule, precision and passes).
struct TensorAxisTaps {
  int in = 0, out = 0, ksize = 0;
  bool bicubic = false;
  unsigned precision = 0;
  std::vector<int32_t> first, count;
  std::vector<int16_t> weights;
  void Compute(int in_size, int out_size, bool cubic = false);
};

/// torch's int16 tap of the normalised weight `v` at `precision` fractional bits: v * 2^precision
/// rounded half away from zero.
int16_t TensorTap(double v, unsigned precision);

/// Reusable buffers of TensorResize (grow-only; one per thread).
struct TensorResizeScratch {
  TensorAxisTaps x, y;
  std::vector<uint8_t> mid;
};

/// Resizes `channels` planes of h x w (row stride `row_stride`, plane stride `plane_stride`
/// bytes) to out_h x out_w planes written contiguously at `dst`.
void TensorResize(const uint8_t* src, int channels, int h, int w, ptrdiff_t row_stride,
                  ptrdiff_t plane_stride, int out_h, int out_w, uint8_t* dst,
                  TensorResizeScratch& scratch);

}  // namespace ringloader
