#pragma once
/// torchvision's output size of a resize, which the chain's validation (Create: the output size
/// known before any sample) and the per-sample planning (Plan) both compute. Internal to
/// csrc/transform.

#include <cstdint>

#include "ringloader/transform_step.h"

namespace ringloader {

struct Size2 {
  int64_t h = 0, w = 0;
};

/// torchvision.transforms.functional._compute_resized_output_size for an image of h x w and a
/// Resize to size_h x size_w (size_w 0: the shorter side becomes size_h, the longer one capped
/// by max_size when > 0).
Size2 ResizedOutputSize(int64_t h, int64_t w, int size_h, int size_w, int max_size);

}  // namespace ringloader
