#pragma once
/// The image and output stages of a transform chain: parameter sampling with torchvision's
/// (and timm's) distributions, drawn from the sample's generator, then the Pillow-exact
/// operations of image_ops.h. Called by render.cc for every sample whose chain has such steps.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "transform/image_ops.h"
#include "transform/image_transform.h"
#include "transform/photometric.h"
#include "transform/random.h"

namespace ringloader {

/// timm's RandAugment op names (timm/data/auto_augment.py NAME_TO_OP), the codes stored in
/// TimmRandAugmentParams::timm_ops.
enum class TimmOp : int {
  kAutoContrast = 0,
  kEqualize,
  kInvert,
  kRotate,
  kPosterize,
  kPosterizeIncreasing,
  kPosterizeOriginal,
  kSolarize,
  kSolarizeIncreasing,
  kSolarizeAdd,
  kColor,
  kColorIncreasing,
  kContrast,
  kContrastIncreasing,
  kBrightness,
  kBrightnessIncreasing,
  kSharpness,
  kSharpnessIncreasing,
  kShearX,
  kShearY,
  kTranslateX,
  kTranslateY,
  kTranslateXRel,
  kTranslateYRel,
  kCount,
};

/// The timm op code for timm's name ("SolarizeAdd"...), or -1.
int TimmOpFromName(const char* name);

/// Grow-only buffers of the image stage.
struct AugmentScratch {
  ImageOpScratch ops;
  std::vector<uint8_t> padded;   ///< target of Pad / RandomCrop padding
  std::vector<uint8_t> padded2;  ///< the other target, when the image already lives in padded
  std::vector<uint8_t> chain;    ///< AugMix: the chain being augmented
  std::vector<uint8_t> source;   ///< AugMix: the source of a geometric op or the blur
  std::vector<float> mix;        ///< AugMix: the float32 mixture
  /// The output pixels [x0, x1) x [y0, y1) that show the source, the rest padding; set by the
  /// render for each sample (RandomPhotometricDistort before a padding distorts only these).
  int shown[4] = {0, 0, 1 << 30, 1 << 30};
};

/// The random draws of one AugMix call, in torchvision's order: the Beta weight pair (m0 for
/// the original, m1 for the chains), the Dirichlet weights of the chains, and per chain its ops
/// as (index in the op list, magnitude bin, negated).
struct AugMixDraws {
  float m0 = 1.f, m1 = 0.f;
  std::vector<float> weights;
  struct Op {
    int index = 0;
    int bin = 0;
    bool negate = false;
  };
  std::vector<std::vector<Op>> chains;
};

/// Draws one AugMix call's parameters from `rng` with torchvision's distributions (Beta and
/// Dirichlet through Gamma(alpha) draws, uniform depths, ops, bins and signs).
void DrawAugMix(const AugMixParams& s, SampleRng& rng, AugMixDraws* draws);
/// Applies AugMix with fixed `draws` to `img` in place, with torchvision's tensor kernels (v1,
/// or v2 when s.v2_magnitudes): InvalidArgument for draws that do not fit the step.
absl::Status ApplyAugMixDraws(const AugMixParams& s, const AugMixDraws& draws,
                              AugmentScratch& scratch, RgbView img);

/// The image-stage function of each kind that has one (StepKindInfo::apply_image): one step on
/// `*img`, its random parameters drawn from `rng` in torchvision's (or timm's) order. Pad and the
/// crops may replace the view by one over scratch.padded.
/// Each reads only its kind's parameters.
template <typename Params>
using ImageStepFn = absl::Status(const Params& s, SampleRng& rng, AugmentScratch& scratch,
                                 RgbView* img);
ImageStepFn<ColorJitterParams> ApplyColorJitter;
ImageStepFn<GrayscaleParams> ApplyGrayscale;
ImageStepFn<RandomRotationParams> ApplyRandomRotation;
ImageStepFn<RandomAffineParams> ApplyRandomAffine;

/// The parameters a RandomRotation or RandomAffine step draws (torchvision's make_params, in
/// its order): the angle in degrees, the whole-pixel translation, the scale and the shears.
struct AffineDraw {
  double angle = 0, translate_x = 0, translate_y = 0, scale = 1, shear_x = 0, shear_y = 0;
};
/// The draws of RandomAffine `s` on a width x height image, as ApplyRandomAffine makes them:
/// float32 values, as torch's uniform_ gives them. A Joint records them for its boxes.
AffineDraw DrawRandomAffine(const RandomAffineParams& s, SampleRng& rng, int width, int height);
/// The angle RandomRotation `s` draws, as ApplyRandomRotation draws it (a float32 value).
double DrawRandomRotation(const RandomRotationParams& s, SampleRng& rng);
ImageStepFn<GaussianBlurParams> ApplyGaussianBlur;
ImageStepFn<AugOpParams> ApplyAugOpStep;
ImageStepFn<RandAugmentParams> ApplyRandAugment;
ImageStepFn<TrivialAugmentWideParams> ApplyTrivialAugmentWide;
ImageStepFn<AutoAugmentParams> ApplyAutoAugment;
ImageStepFn<TimmRandAugmentParams> ApplyTimmRandAugment;
ImageStepFn<PadParams> ApplyPad;
ImageStepFn<RandomCropParams> ApplyRandomCrop;
ImageStepFn<HorizontalFlipParams> ApplyHorizontalFlip;
ImageStepFn<VerticalFlipParams> ApplyVerticalFlip;
ImageStepFn<CenterCropParams> ApplyCenterCrop;
ImageStepFn<AugMixParams> ApplyAugMix;

/// Runs steps [pipeline.image_begin(), image_end()) on `*img` (packed RGB; the view may be
/// replaced by one over scratch.padded when a step changes the size). A RandomApply step draws
/// one uniform and, unless it is below its p, skips the steps it guards (their draws too).
absl::Status ApplyImageSteps(const TransformPipeline& pipeline, SampleRng& rng,
                             AugmentScratch& scratch, RgbView* img);

/// Runs the output stage's RandomErasing steps on a written output of height x width.
void ApplyErasing(const TransformPipeline& pipeline, SampleRng& rng, int height, int width,
                  void* dst);

/// torch.linspace(start, end, steps)[index] in float32, as torchvision's magnitude tables hold.
double LinspaceF32(double start, double end, int steps, int index);

}  // namespace ringloader
