#pragma once
/// AdjustHue's round trip (Pillow's rgb2hsv, the hue shifted, hsv2rgb: image_ops.cc) for 4
/// pixels at a time in SSE/AVX2 lanes, for x86 CPUs with AVX2 (image_ops.cc asks
/// resample_internal::CpuHasAvx2 once). Bit-identical to the scalar round trip: the same float
/// and double operations in the same order, each rounded alone (no fused multiply-add).

#include <cstdint>

#include "transform/resample_kernels.h"

namespace ringloader::image_ops_internal {

#ifdef RL_HAVE_AVX2_KERNELS
/// Shifts the hue of the first (n / 4) * 4 of the n RGB pixels at `p` by `shift` (levels,
/// modulo 256), in place; returns how many pixels it changed (the rest are the caller's).
int HueRowAvx2(uint8_t* p, int n, uint8_t shift);
#endif

}  // namespace ringloader::image_ops_internal
