#pragma once
/// torchvision v2's RandomPhotometricDistort (the first step of the detection reference's
/// `ssd` preset) on the 8-bit image: a ColorJitter step with ColorJitterParams::photometric set.
/// Each of brightness, contrast, saturation and hue is applied with probability p (its factor
/// uniform in its range), contrast before saturation or after hue (one even draw), then the
/// channels permuted with probability p; each adjustment is Pillow's (image_ops.h), as v2 runs
/// them on a PIL image, so for the same draws the pixels equal v2's.

#include <string>

#include "absl/status/status.h"
#include "transform/image_ops.h"
#include "transform/image_transform.h"
#include "transform/random.h"

namespace ringloader {

/// The draws of one RandomPhotometricDistort call, in v2's make_params order.
struct PhotometricDraws {
  /// The index of each adjustment in apply[] and factor[].
  enum Adjustment : int { kBrightness = 0, kContrast = 1, kSaturation = 2, kHue = 3 };
  bool apply[4] = {false, false, false, false};  ///< by Adjustment
  double factor[4] = {1.0, 1.0, 1.0, 0.0};
  bool contrast_before = true;
  /// Output channel c takes input channel permutation[c] (v2's image[:, permutation]); the
  /// identity when no permutation was drawn.
  int permutation[3] = {0, 1, 2};
};

/// Draws one call's parameters from `rng` as v2's make_params draws them: per adjustment a
/// uniform below p, then its factor; one uniform for the contrast's place; a uniform below p,
/// then a uniform permutation of the three channels.
void DrawPhotometric(const ColorJitterParams& s, SampleRng& rng, PhotometricDraws* draws);

/// Applies fixed `draws` to `img` in place, in v2's transform order. The contrast blends with
/// the mean of `img`'s L conversion at that point (the whole image, as Pillow's ImageEnhance).
void ApplyPhotometric(const PhotometricDraws& draws, RgbView img);

/// The "color_jitter" kind's parameters: "ranges", and for RandomPhotometricDistort
/// "photometric" (1: on the whole image; 2: on the output pixels that show the source, where
/// the step came before a fused padding, which v2 fills after it) with its "p".
absl::Status ParseColorJitter(StepParamReader& params, ColorJitterParams* step);
std::string DescribeColorJitter(const ColorJitterParams& step);
/// The "color_jitter" kind's image-stage function: ColorJitter, or RandomPhotometricDistort
/// (on scratch.shown's rectangle of `*img` with photometric == 2).
absl::Status ApplyColorJitterStep(const ColorJitterParams& step, SampleRng& rng,
                                  AugmentScratch& scratch, RgbView* img);

}  // namespace ringloader
