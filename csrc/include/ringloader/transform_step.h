#pragma once
/// A transform chain's steps, as LoaderOptions::transform holds them: torchvision's
/// transforms with their parameters and meaning (ringloader/transforms.h builds them by name),
/// and the output's element type and layout. Loader::Create validates a chain.

#include <cstdint>
#include <vector>

namespace ringloader {

/// Element type of the output tensor.
enum class DType : uint8_t { kUint8 = 0, kFloat32 = 1, kFloat16 = 2, kBFloat16 = 3 };
/// Memory layout of one output image: planar (C,H,W) or interleaved (H,W,C).
enum class Layout : uint8_t { kCHW = 0, kHWC = 1 };

/// Resampling filter, numbered as Pillow's Image.Resampling (and torchvision's PIL modes).
enum class Interpolation : uint8_t {
  kNearest = 0,
  kLanczos = 1,
  kBilinear = 2,
  kBicubic = 3,
  kBox = 4,
  kHamming = 5,
};
/// "nearest", "bilinear", ... as torchvision's InterpolationMode values name them.
const char* InterpolationName(Interpolation interpolation);

/// torchvision's padding modes (transforms.Pad / RandomCrop).
enum class PadMode : uint8_t { kConstant = 0, kEdge = 1, kReflect = 2, kSymmetric = 3 };

/// The image operations of torchvision's AutoAugment family (and timm's RandAugment), in
/// torchvision's names. Used by the policy steps and by the single-op steps (RandomPosterize...).
enum class AugOp : uint8_t {
  kIdentity = 0,
  kShearX,
  kShearY,
  kTranslateX,
  kTranslateY,
  kRotate,
  kBrightness,
  kColor,
  kContrast,
  kSharpness,
  kPosterize,
  kSolarize,
  kAutoContrast,
  kEqualize,
  kInvert,
  kSolarizeAdd,  ///< timm: add `magnitude` to pixels below 128
};

/// One step of a transform chain, with torchvision's parameters and meaning.
struct TransformStep {
  enum class Kind : uint8_t {
    kResize,                ///< size_h/size_w; size_w == 0: shorter side becomes size_h.
    kCenterCrop,            ///< size_h x size_w
    kRandomResizedCrop,     ///< size_h x size_w, scale_min..scale_max, ratio_min..ratio_max
    kRandomHorizontalFlip,  ///< p
    kToTensor,              ///< float output in [0, 1] (level / 255, or see by_reciprocal)
    kNormalize,             ///< (x - mean) / std per channel, after ToTensor
    // The steps below are geometric when fused into the sample geometry (vertical flip,
    // RandomCrop with zero fill), otherwise applied to the 8-bit image.
    kRandomVerticalFlip,    ///< p
    kRandomCrop,            ///< size_h x size_w, pad[4] (l,t,r,b), pad_if_needed, fill, pad_mode
    kPad,                   ///< pad[4] (l,t,r,b), fill, pad_mode
    kColorJitter,           ///< range[kBrightness..kHue] (lo, hi) factors, hue shift; photometric
    kGrayscale,             ///< p (1 for Grayscale): L of the image replicated to 3 channels
    kRandomRotation,        ///< range[kDegrees], interpolation, fill, center
    kRandomAffine,          ///< degrees, translate, scale, shear ranges; interpolation, fill
    kGaussianBlur,          ///< kernel (size_w, size_h), range[kSigma]
    kAugOp,                 ///< aug_op with magnitude, applied with probability p
    kRandAugment,           ///< num_ops, magnitude (bin), num_bins, interpolation, fill
    kTrivialAugmentWide,    ///< num_bins, interpolation, fill
    kAutoAugment,           ///< policy (0 ImageNet, 1 CIFAR10, 2 SVHN), interpolation, fill
    kTimmRandAugment,       ///< timm rand-m*-n*-mstd*-inc*: num_ops, magnitude, mstd, inc
    kRandomErasing,         ///< p, scale, ratio, erase value (fill, or random normal); output
    /// torchvision's RandomApply: one uniform draw per sample; the next `apply_steps` steps
    /// (image steps that keep the size) run, and draw, only when it is below p.
    kRandomApply,
    /// torchvision's AugMix (v1 and v2): mixture_width chains of chain_depth ops of severity,
    /// mixed with Dirichlet(alpha) weights and the original by a Beta(alpha, alpha) weight, with
    /// torchvision's tensor kernels (AugMix converts a PIL image to a tensor first).
    kAugMix,
  };
  Kind kind = Kind::kToTensor;
  int size_h = 0;
  int size_w = 0;
  int max_size = 0;  ///< Resize: torchvision's max_size (0 = none).
  /// Resize: v2's RandomResize when > 0: the shorter side is drawn per sample from
  /// [size_h, size_max) (torch.randint's range), then resized as Resize(drawn) would.
  int size_max = 0;
  /// Resize: v2's RandomShortestSize when not empty: the shorter side is drawn per sample from
  /// these (torch.randint over the list), the scale capped by `max_size` on the longer side,
  /// each side truncated (torchvision's rule: int(side * r)).
  std::vector<int> size_choices;
  /// Resize: v2's ScaleJitter when set: size_h x size_w is the target size, and each sample is
  /// resized by min(size_w / height, size_h / width) * scale (v2's formula, in float32 as torch
  /// computes it), scale drawn uniformly from [scale_min, scale_max); each side truncated.
  bool scale_jitter = false;
  /// Pad: v2's RandomZoomOut when set: with probability p, a canvas of the image's size times
  /// a ratio drawn from [scale_min, scale_max) (side_range), the image at a drawn offset in it,
  /// the rest `fill` (v2's draws, in float32 as torch computes them).
  bool zoom_out = false;
  /// ColorJitter: v2's RandomPhotometricDistort when > 0 (each adjustment with probability p,
  /// the contrast before or after the others, a channel permutation; transform/photometric.h):
  /// 1 on the whole image, 2 on the output pixels showing the source (it came before padding).
  int photometric = 0;
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  double p = 0.5;
  float mean[3] = {0.f, 0.f, 0.f};
  float std[3] = {1.f, 1.f, 1.f};
  /// ToTensor: level * float(1/255) (torchvision v2's ToDtype(scale=True)) rather than level / 255
  /// (ToTensor, v1's ConvertImageDtype); the two differ in the last bit for about half the levels.
  bool by_reciprocal = false;
  // Fields of the other steps (a step's unused ones keep their defaults).
  Interpolation interpolation = Interpolation::kBilinear;  ///< resizes, rotation, affine, policies
  PadMode pad_mode = PadMode::kConstant;
  int pad[4] = {0, 0, 0, 0};         ///< left, top, right, bottom
  bool pad_if_needed = false;        ///< RandomCrop
  float fill[3] = {0.f, 0.f, 0.f};   ///< fill levels 0..255 (RandomErasing: output values)
  /// The slot of `range` that holds each kind's (lo, hi) parameter, so code names the parameter
  /// (range[kHue]) rather than its position; the binding's "ranges" list is in this order.
  enum RangeSlot : int {
    // ColorJitter: factor ranges, then the hue shift.
    kBrightness = 0,
    kContrast = 1,
    kSaturation = 2,
    kHue = 3,
    // RandomRotation (degrees only) and RandomAffine. kTranslate holds the max fractions
    // (x, y) rather than a (lo, hi) pair.
    kDegrees = 0,
    kTranslate = 1,
    kAffineScale = 2,
    kShearX = 3,
    kShearY = 4,
    // GaussianBlur.
    kSigma = 0,
    // RandomErasing: area fraction, aspect ratio.
    kEraseScale = 0,
    kEraseRatio = 1,
    kRangeSlots = 5,  ///< size of range[]
  };
  /// Per-kind (lo, hi) parameter ranges, indexed by RangeSlot.
  double range[kRangeSlots][2] = {{0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}};
  bool has_range[kRangeSlots] = {false, false, false, false, false};  ///< which ranges are set
  bool has_center = false;           ///< rotation/affine: center given (else the image centre)
  double center[2] = {0, 0};
  AugOp aug_op = AugOp::kIdentity;   ///< kAugOp
  double magnitude = 0;              ///< kAugOp: op magnitude; policies: magnitude (bin / level)
  int num_ops = 2;                   ///< RandAugment / timm: ops per image
  int num_bins = 31;                 ///< RandAugment / TrivialAugmentWide magnitude bins
  int policy = 0;                    ///< AutoAugment policy: 0 ImageNet, 1 CIFAR10, 2 SVHN
  /// The torchvision v2 policy classes: their Solarize table is linspace(1, 0) in float32,
  /// scaled by 255.0 in double when applied, not v1's linspace(255, 0) (augment.cc); AugMix:
  /// v2's tensor kernels too (fused multiply-adds where v1 rounds twice).
  bool v2_magnitudes = false;
  /// timm RandAugment: the op set (TimmOp codes, see augment.h), each applied with
  /// probability p; magnitude noise (std; inf: uniform in [0, magnitude]); upper bound.
  int timm_ops[24] = {};
  int timm_op_count = 0;
  double magnitude_std = 0;
  double magnitude_max = 10;
  double translate_pct = 0.45;       ///< timm TranslateXRel/YRel
  double translate_const = 100;      ///< timm TranslateX/Y (absolute pixels at level 10)
  bool random_interpolation = false; ///< timm: bilinear or bicubic drawn per op
  /// RandomErasing: 0 = constant `fill`, 1 = random normal per element (torchvision
  /// value="random", timm mode="pixel"), 2 = random normal per channel (timm mode="rand").
  int erase_mode = 0;
  bool timm_erasing = false;         ///< timm's RandomErasing sampling (count, area / count)
  int erase_count = 1;               ///< timm max_count (min_count 1)
  int apply_steps = 0;               ///< kRandomApply: how many of the following steps it guards
  /// kAugMix: severity (magnitude bins 0..severity-1), chains, ops per chain (<= 0: 1 to 3
  /// drawn per chain), the Dirichlet/Beta alpha, and all_ops (the four enhance ops too).
  int augmix_severity = 3;
  int augmix_width = 3;
  int augmix_depth = -1;
  double augmix_alpha = 1.0;
  bool augmix_all_ops = true;
};

}  // namespace ringloader
