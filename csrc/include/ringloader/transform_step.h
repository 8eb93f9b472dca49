#pragma once
/// A transform chain's steps, as LoaderOptions::transform holds them: torchvision's
/// transforms with their parameters and meaning (ringloader/transforms.h builds them by name),
/// and the output's element type and layout. Loader::Create validates a chain.
///
/// Each kind of step has its own parameter struct (ResizeParams, ColorJitterParams, ...), with
/// torchvision's names and defaults; a TransformStep holds one of them in a std::variant, and
/// its kind is the variant's alternative. A step converts from its struct:
///
///   ringloader::RandomRotationParams rotation;
///   rotation.degrees = {-15, 15};
///   options.transform = {rotation, ringloader::transforms::ToTensor()};

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <variant>
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

/// The kinds of transform step, one per parameter struct below (TransformStep::Kind).
enum class StepKind : uint8_t {
  kResize,                ///< ResizeParams
  kCenterCrop,            ///< CenterCropParams
  kRandomResizedCrop,     ///< RandomResizedCropParams
  kRandomHorizontalFlip,  ///< HorizontalFlipParams
  kToTensor,              ///< ToTensorParams: float output in [0, 1]
  kNormalize,             ///< NormalizeParams: (x - mean) / std per channel, after ToTensor
  // The steps below are geometric when fused into the sample geometry (vertical flip,
  // RandomCrop with zero fill), otherwise applied to the 8-bit image.
  kRandomVerticalFlip,    ///< VerticalFlipParams
  kRandomCrop,            ///< RandomCropParams
  kPad,                   ///< PadParams
  kColorJitter,           ///< ColorJitterParams (photometric)
  kGrayscale,             ///< GrayscaleParams: L of the image replicated to 3 channels
  kRandomRotation,        ///< RandomRotationParams
  kRandomAffine,          ///< RandomAffineParams
  kGaussianBlur,          ///< GaussianBlurParams
  kAugOp,                 ///< AugOpParams: one AugOp applied with probability p
  kRandAugment,           ///< RandAugmentParams
  kTrivialAugmentWide,    ///< TrivialAugmentWideParams
  kAutoAugment,           ///< AutoAugmentParams
  kTimmRandAugment,       ///< TimmRandAugmentParams: timm rand-m*-n*-mstd*-inc*
  kRandomErasing,         ///< RandomErasingParams (on the output)
  kRandomApply,           ///< RandomApplyParams
  kAugMix,                ///< AugMixParams
};

/// A (lo, hi) parameter range of torchvision ("degrees", "scale", "sigma", a jitter factor).
struct Range {
  double lo = 0;
  double hi = 0;
  friend bool operator==(const Range& a, const Range& b) { return a.lo == b.lo && a.hi == b.hi; }
  friend bool operator!=(const Range& a, const Range& b) { return !(a == b); }
};

// The parameters of each kind, with torchvision's meaning and defaults. Each struct names its
// kind (kKind); TransformStep holds exactly one of them.

/// Resize: size_h x size_w; size_w == 0: the shorter side becomes size_h.
struct ResizeParams {
  static constexpr StepKind kKind = StepKind::kResize;
  int size_h = 0;
  int size_w = 0;
  int max_size = 0;  ///< torchvision's max_size (0 = none).
  /// v2's RandomResize when > 0: the shorter side is drawn per sample from [size_h, size_max)
  /// (torch.randint's range), then resized as Resize(drawn) would.
  int size_max = 0;
  /// v2's RandomShortestSize when not empty: the shorter side is drawn per sample from these
  /// (torch.randint over the list), the scale capped by `max_size` on the longer side, each
  /// side truncated (torchvision's rule: int(side * r)).
  std::vector<int> size_choices;
  /// v2's ScaleJitter when set: size_h x size_w is the target size, and each sample is resized
  /// by min(size_w / height, size_h / width) * scale (v2's formula, in float32 as torch
  /// computes it), scale drawn uniformly from [lo, hi); each side truncated.
  std::optional<Range> scale_jitter;
  Interpolation interpolation = Interpolation::kBilinear;
  /// The step runs on a uint8 tensor (it follows v2's ToImage/PILToTensor): torch's kernels,
  /// as v2 runs them there (bilinear: interpolate's antialiased uint8 kernel; nearest: torch's
  /// nearest index), not Pillow's. Other filters are refused with it.
  bool tensor = false;
};

/// CenterCrop: size_h x size_w (an int size: size_w 0, made square by validation); pads with
/// zeros when the image is smaller.
struct CenterCropParams {
  static constexpr StepKind kKind = StepKind::kCenterCrop;
  int size_h = 0;
  int size_w = 0;
};

/// RandomResizedCrop: size_h x size_w, area fraction scale_min..scale_max, aspect ratio
/// ratio_min..ratio_max.
struct RandomResizedCropParams {
  static constexpr StepKind kKind = StepKind::kRandomResizedCrop;
  int size_h = 0;
  int size_w = 0;
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  Interpolation interpolation = Interpolation::kBilinear;
  bool tensor = false;  ///< torch's kernels on a uint8 tensor (ResizeParams::tensor)
};

/// RandomHorizontalFlip(p).
struct HorizontalFlipParams {
  static constexpr StepKind kKind = StepKind::kRandomHorizontalFlip;
  double p = 0.5;
};

/// ToTensor: float output in [0, 1].
struct ToTensorParams {
  static constexpr StepKind kKind = StepKind::kToTensor;
  /// level * float(1/255) (torchvision v2's ToDtype(scale=True)) rather than level / 255
  /// (ToTensor, v1's ConvertImageDtype); the two differ in the last bit for about half the
  /// levels.
  bool by_reciprocal = false;
};

/// Normalize(mean, std) per channel.
struct NormalizeParams {
  static constexpr StepKind kKind = StepKind::kNormalize;
  float mean[3] = {0.f, 0.f, 0.f};
  float std[3] = {1.f, 1.f, 1.f};
};

/// RandomVerticalFlip(p).
struct VerticalFlipParams {
  static constexpr StepKind kKind = StepKind::kRandomVerticalFlip;
  double p = 0.5;
};

/// The padding of RandomCrop and Pad: pad (left, top, right, bottom), mode, fill levels.
struct PaddingParams {
  int pad[4] = {0, 0, 0, 0};
  PadMode pad_mode = PadMode::kConstant;
  float fill[3] = {0.f, 0.f, 0.f};  ///< fill levels 0..255
};

/// RandomCrop: size_h x size_w after the padding; pad_if_needed as torchvision.
struct RandomCropParams : PaddingParams {
  static constexpr StepKind kKind = StepKind::kRandomCrop;
  int size_h = 0;
  int size_w = 0;
  bool pad_if_needed = false;
};

/// Pad, or v2's RandomZoomOut.
struct PadParams : PaddingParams {
  static constexpr StepKind kKind = StepKind::kPad;
  /// v2's RandomZoomOut when set: with probability p, a canvas of the image's size times a
  /// ratio drawn from [lo, hi) (side_range), the image at a drawn offset in it, the rest
  /// `fill` (v2's draws, in float32 as torch computes them).
  std::optional<Range> zoom_out;
  double p = 0.5;
};

/// ColorJitter: factor ranges of brightness, contrast and saturation, and the hue shift range;
/// an unset one is left out.
struct ColorJitterParams {
  static constexpr StepKind kKind = StepKind::kColorJitter;
  std::optional<Range> brightness, contrast, saturation, hue;
  /// v2's RandomPhotometricDistort when > 0 (each adjustment with probability p, the contrast
  /// before or after the others, a channel permutation; transform/photometric.h): 1 on the
  /// whole image, 2 on the output pixels showing the source (it came before padding).
  int photometric = 0;
  double p = 0.5;
};

/// RandomGrayscale(p); p = 1 is Grayscale(num_output_channels=3).
struct GrayscaleParams {
  static constexpr StepKind kKind = StepKind::kGrayscale;
  double p = 0.5;
};

/// What rotation and affine share: the angle range, filter, fill and centre.
struct RotationParams {
  Range degrees;
  Interpolation interpolation = Interpolation::kBilinear;
  float fill[3] = {0.f, 0.f, 0.f};  ///< fill levels 0..255
  std::optional<std::array<double, 2>> center;  ///< (x, y); unset: the image centre
};

/// RandomRotation(degrees, interpolation, fill, center).
struct RandomRotationParams : RotationParams {
  static constexpr StepKind kKind = StepKind::kRandomRotation;
};

/// RandomAffine(degrees, translate, scale, shear, interpolation, fill, center).
struct RandomAffineParams : RotationParams {
  static constexpr StepKind kKind = StepKind::kRandomAffine;
  /// The max fractions (x, y) of the translation (lo holds x, hi holds y).
  std::optional<Range> translate;
  std::optional<Range> scale;
  std::optional<Range> shear_x, shear_y;
};

/// GaussianBlur: kernel size_w x size_h, sigma drawn from [lo, hi].
struct GaussianBlurParams {
  static constexpr StepKind kKind = StepKind::kGaussianBlur;
  int size_h = 0;
  int size_w = 0;
  Range sigma;
};

/// One op of the AutoAugment family with `magnitude`, applied with probability p.
struct AugOpParams {
  static constexpr StepKind kKind = StepKind::kAugOp;
  AugOp aug_op = AugOp::kIdentity;
  double magnitude = 0;
  double p = 0.5;
  Interpolation interpolation = Interpolation::kBilinear;
  float fill[3] = {0.f, 0.f, 0.f};
};

/// What the torchvision policies share: filter, fill, and v2_magnitudes (the torchvision v2
/// policy classes: their Solarize table is linspace(1, 0) in float32, scaled by 255.0 in double
/// when applied, not v1's linspace(255, 0); augment.cc).
struct PolicyParams {
  Interpolation interpolation = Interpolation::kBilinear;
  float fill[3] = {0.f, 0.f, 0.f};
  bool v2_magnitudes = false;
};

/// RandAugment(num_ops, magnitude (a bin), num_magnitude_bins).
struct RandAugmentParams : PolicyParams {
  static constexpr StepKind kKind = StepKind::kRandAugment;
  int num_ops = 2;
  double magnitude = 0;
  int num_bins = 31;
};

/// TrivialAugmentWide(num_magnitude_bins).
struct TrivialAugmentWideParams : PolicyParams {
  static constexpr StepKind kKind = StepKind::kTrivialAugmentWide;
  int num_bins = 31;
};

/// AutoAugment(policy): 0 ImageNet, 1 CIFAR10, 2 SVHN.
struct AutoAugmentParams : PolicyParams {
  static constexpr StepKind kKind = StepKind::kAutoAugment;
  int policy = 0;
};

/// timm's RandAugment: the op set (TimmOp codes, see augment.h), each applied with probability
/// p; num_ops per image, magnitude with noise (std; inf: uniform in [0, magnitude]) up to
/// magnitude_max.
struct TimmRandAugmentParams {
  static constexpr StepKind kKind = StepKind::kTimmRandAugment;
  int timm_ops[24] = {};
  int timm_op_count = 0;
  int num_ops = 2;
  double p = 0.5;
  double magnitude = 0;
  double magnitude_std = 0;
  double magnitude_max = 10;
  double translate_pct = 0.45;        ///< TranslateXRel/YRel
  double translate_const = 100;       ///< TranslateX/Y (absolute pixels at level 10)
  bool random_interpolation = false;  ///< bilinear or bicubic drawn per op
  Interpolation interpolation = Interpolation::kBilinear;
  float fill[3] = {0.f, 0.f, 0.f};
};

/// RandomErasing(p, scale, ratio, value) on the output, after ToTensor.
struct RandomErasingParams {
  static constexpr StepKind kKind = StepKind::kRandomErasing;
  double p = 0.5;
  Range scale;  ///< area fraction
  Range ratio;  ///< aspect ratio
  float fill[3] = {0.f, 0.f, 0.f};  ///< the erase value (output values) when erase_mode is 0
  /// 0 = constant `fill`, 1 = random normal per element (torchvision value="random", timm
  /// mode="pixel"), 2 = random normal per channel (timm mode="rand").
  int erase_mode = 0;
  bool timm_erasing = false;  ///< timm's RandomErasing sampling (count, area / count)
  int erase_count = 1;        ///< timm max_count (min_count 1)
};

/// torchvision's RandomApply: one uniform draw per sample; the next `apply_steps` steps (image
/// steps that keep the size) run, and draw, only when it is below p.
struct RandomApplyParams {
  static constexpr StepKind kKind = StepKind::kRandomApply;
  double p = 0.5;
  int apply_steps = 0;
};

/// torchvision's AugMix (v1 and v2): `width` chains of `depth` ops of `severity` (magnitude
/// bins 0..severity-1; depth <= 0: 1 to 3 drawn per chain), mixed with Dirichlet(alpha)
/// weights and the original by a Beta(alpha, alpha) weight, with torchvision's tensor kernels
/// (AugMix converts a PIL image to a tensor first); all_ops: the four enhance ops too;
/// v2_magnitudes: v2's kernels (fused multiply-adds where v1 rounds twice).
struct AugMixParams {
  static constexpr StepKind kKind = StepKind::kAugMix;
  int severity = 3;
  int width = 3;
  int depth = -1;
  double alpha = 1.0;
  bool all_ops = true;
  bool v2_magnitudes = false;
  Interpolation interpolation = Interpolation::kBilinear;
  /// Whether torch's bmm of the affine ops' grid fuses each multiply and add, as MKL's kernels
  /// do on Intel CPUs (true), or rounds each, as they do on others (false): Python asks torch.
  bool fused_grid = true;
};

/// One step of a transform chain: the parameters of its kind, with torchvision's meaning.
struct TransformStep {
  using Kind = StepKind;
  /// Alternative i holds the parameters of Kind i.
  using Params = std::variant<
      ResizeParams, CenterCropParams, RandomResizedCropParams, HorizontalFlipParams,
      ToTensorParams, NormalizeParams, VerticalFlipParams, RandomCropParams, PadParams,
      ColorJitterParams, GrayscaleParams, RandomRotationParams, RandomAffineParams,
      GaussianBlurParams, AugOpParams, RandAugmentParams, TrivialAugmentWideParams,
      AutoAugmentParams, TimmRandAugmentParams, RandomErasingParams, RandomApplyParams,
      AugMixParams>;

  /// A ToTensor step.
  TransformStep() : params(std::in_place_type<ToTensorParams>) {}
  /// The step of `P`'s kind with these parameters.
  template <typename P, typename = decltype(P::kKind)>
  TransformStep(P p) : params(std::move(p)) {}  // NOLINT(runtime/explicit): a step is its params
  /// The step of `kind` with its default parameters.
  explicit TransformStep(Kind kind) : params(Defaults(kind, std::make_index_sequence<kKinds>())) {}

  Kind kind() const { return static_cast<Kind>(params.index()); }
  /// The parameters, which must be of this step's kind (std::bad_variant_access otherwise).
  template <typename P>
  const P& get() const { return std::get<P>(params); }
  template <typename P>
  P& get() { return std::get<P>(params); }
  /// The parameters when the step is of P's kind, else nullptr.
  template <typename P>
  const P* get_if() const { return std::get_if<P>(&params); }
  template <typename P>
  P* get_if() { return std::get_if<P>(&params); }

  Params params;

 private:
  static constexpr size_t kKinds = std::variant_size_v<Params>;
  template <size_t... I>
  static Params Defaults(Kind kind, std::index_sequence<I...>) {
    Params out;
    ((static_cast<size_t>(kind) == I ? (void)out.template emplace<I>() : void()), ...);
    return out;
  }
};

namespace detail {
template <size_t... I>
constexpr bool KindsInOrder(std::index_sequence<I...>) {
  return ((static_cast<size_t>(
               std::variant_alternative_t<I, TransformStep::Params>::kKind) == I) && ...);
}
}  // namespace detail
static_assert(detail::KindsInOrder(
                  std::make_index_sequence<std::variant_size_v<TransformStep::Params>>()),
              "TransformStep::Params lists the parameter structs in StepKind order");
static_assert(std::variant_size_v<TransformStep::Params> ==
              static_cast<size_t>(StepKind::kAugMix) + 1);

}  // namespace ringloader
