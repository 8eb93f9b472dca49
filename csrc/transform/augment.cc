#include "transform/augment.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "transform/resample.h"

namespace ringloader {
namespace {


// ---- torchvision's AutoAugment family (torchvision/transforms/autoaugment.py, v1) -------------

/// The op list RandAugment and TrivialAugmentWide draw from, in torchvision's order.
constexpr AugOp kWideOps[] = {AugOp::kIdentity,   AugOp::kShearX,     AugOp::kShearY,
                              AugOp::kTranslateX, AugOp::kTranslateY, AugOp::kRotate,
                              AugOp::kBrightness, AugOp::kColor,      AugOp::kContrast,
                              AugOp::kSharpness,  AugOp::kPosterize,  AugOp::kSolarize,
                              AugOp::kAutoContrast, AugOp::kEqualize};

enum class Space { kRandAugment, kTrivialWide, kAutoAugment };

/// magnitudes[bin] of torchvision's _augmentation_space for `op` (as float(tensor[bin])), and
/// whether the op is signed; `v2`: the v2 class's table. Ops without magnitudes give 0.
double Magnitude(Space space, bool v2, AugOp op, int num_bins, int bin, int height, int width,
                 bool* signed_op) {
  const bool wide = space == Space::kTrivialWide;
  *signed_op = true;
  switch (op) {
    case AugOp::kShearX:
    case AugOp::kShearY:
      return LinspaceF32(0.0, wide ? 0.99 : 0.3, num_bins, bin);
    case AugOp::kTranslateX:
      return LinspaceF32(0.0, wide ? 32.0 : 150.0 / 331.0 * width, num_bins, bin);
    case AugOp::kTranslateY:
      return LinspaceF32(0.0, wide ? 32.0 : 150.0 / 331.0 * height, num_bins, bin);
    case AugOp::kRotate:
      return LinspaceF32(0.0, wide ? 135.0 : 30.0, num_bins, bin);
    case AugOp::kBrightness:
    case AugOp::kColor:
    case AugOp::kContrast:
    case AugOp::kSharpness:
      return LinspaceF32(0.0, wide ? 0.99 : 0.9, num_bins, bin);
    case AugOp::kPosterize: {
      *signed_op = false;
      // 8 - (arange(num_bins) / ((num_bins - 1) / k)).round(): float32 division, half to even.
      const float divisor = static_cast<float>((num_bins - 1) / (wide ? 6.0 : 4.0));
      const float q = static_cast<float>(bin) / divisor;
      return 8.0 - static_cast<double>(std::nearbyint(q));
    }
    case AugOp::kSolarize:
      *signed_op = false;
      // v2 scales its float32 linspace(1, 0) by 255.0 in double: thresholds a few 1e-6 above
      // v1's, which keeps a level equal to v1's integer threshold (170 of 10 bins) unchanged.
      return v2 ? 255.0 * LinspaceF32(1.0, 0.0, num_bins, bin)
                : LinspaceF32(255.0, 0.0, num_bins, bin);
    default:
      *signed_op = false;
      return 0.0;
  }
}

/// One (op, probability, magnitude bin or -1) half of an AutoAugment sub-policy.
struct PolicyOp {
  AugOp op;
  float p;
  int bin;
};
using SubPolicy = std::array<PolicyOp, 2>;

// torchvision AutoAugment._get_policies (the AutoAugment paper's learned policies).
constexpr AugOp P = AugOp::kPosterize, R = AugOp::kRotate, S = AugOp::kSolarize,
                AC = AugOp::kAutoContrast, EQ = AugOp::kEqualize, C = AugOp::kColor,
                IN = AugOp::kInvert, CO = AugOp::kContrast, SH = AugOp::kSharpness,
                SX = AugOp::kShearX, SY = AugOp::kShearY, TX = AugOp::kTranslateX,
                TY = AugOp::kTranslateY, B = AugOp::kBrightness;
constexpr SubPolicy kImageNetPolicy[] = {
    {{{P, .4f, 8}, {R, .6f, 9}}},   {{{S, .6f, 5}, {AC, .6f, -1}}}, {{{EQ, .8f, -1}, {EQ, .6f, -1}}},
    {{{P, .6f, 7}, {P, .6f, 6}}},   {{{EQ, .4f, -1}, {S, .2f, 4}}}, {{{EQ, .4f, -1}, {R, .8f, 8}}},
    {{{S, .6f, 3}, {EQ, .6f, -1}}}, {{{P, .8f, 5}, {EQ, 1.f, -1}}}, {{{R, .2f, 3}, {S, .6f, 8}}},
    {{{EQ, .6f, -1}, {P, .4f, 6}}}, {{{R, .8f, 8}, {C, .4f, 0}}},   {{{R, .4f, 9}, {EQ, .6f, -1}}},
    {{{EQ, 0.f, -1}, {EQ, .8f, -1}}}, {{{IN, .6f, -1}, {EQ, 1.f, -1}}}, {{{C, .6f, 4}, {CO, 1.f, 8}}},
    {{{R, .8f, 8}, {C, 1.f, 2}}},   {{{C, .8f, 8}, {S, .8f, 7}}},   {{{SH, .4f, 7}, {IN, .6f, -1}}},
    {{{SX, .6f, 5}, {EQ, 1.f, -1}}}, {{{C, .4f, 0}, {EQ, .6f, -1}}}, {{{EQ, .4f, -1}, {S, .2f, 4}}},
    {{{S, .6f, 5}, {AC, .6f, -1}}}, {{{IN, .6f, -1}, {EQ, 1.f, -1}}}, {{{C, .6f, 4}, {CO, 1.f, 8}}},
    {{{EQ, .8f, -1}, {EQ, .6f, -1}}},
};
constexpr SubPolicy kCifar10Policy[] = {
    {{{IN, .1f, -1}, {CO, .2f, 6}}}, {{{R, .7f, 2}, {TX, .3f, 9}}},   {{{SH, .8f, 1}, {SH, .9f, 3}}},
    {{{SY, .5f, 8}, {TY, .7f, 9}}}, {{{AC, .5f, -1}, {EQ, .9f, -1}}}, {{{SY, .2f, 7}, {P, .3f, 7}}},
    {{{C, .4f, 3}, {B, .6f, 7}}},   {{{SH, .3f, 9}, {B, .7f, 9}}},   {{{EQ, .6f, -1}, {EQ, .5f, -1}}},
    {{{CO, .6f, 7}, {SH, .6f, 5}}}, {{{C, .7f, 7}, {TX, .5f, 8}}},   {{{EQ, .3f, -1}, {AC, .4f, -1}}},
    {{{TY, .4f, 3}, {SH, .2f, 6}}}, {{{B, .9f, 6}, {C, .2f, 8}}},    {{{S, .5f, 2}, {IN, 0.f, -1}}},
    {{{EQ, .2f, -1}, {AC, .6f, -1}}}, {{{EQ, .2f, -1}, {EQ, .6f, -1}}}, {{{C, .9f, 9}, {EQ, .6f, -1}}},
    {{{AC, .8f, -1}, {S, .2f, 8}}}, {{{B, .1f, 3}, {C, .7f, 0}}},    {{{S, .4f, 5}, {AC, .9f, -1}}},
    {{{TY, .9f, 9}, {TY, .7f, 9}}}, {{{AC, .9f, -1}, {S, .8f, 3}}}, {{{EQ, .8f, -1}, {IN, .1f, -1}}},
    {{{TY, .7f, 9}, {AC, .9f, -1}}},
};
constexpr SubPolicy kSvhnPolicy[] = {
    {{{SX, .9f, 4}, {IN, .2f, -1}}}, {{{SY, .9f, 8}, {IN, .7f, -1}}}, {{{EQ, .6f, -1}, {S, .6f, 6}}},
    {{{IN, .9f, -1}, {EQ, .6f, -1}}}, {{{EQ, .6f, -1}, {R, .9f, 3}}}, {{{SX, .9f, 4}, {AC, .8f, -1}}},
    {{{SY, .9f, 8}, {IN, .4f, -1}}}, {{{SY, .9f, 5}, {S, .2f, 6}}},   {{{IN, .9f, -1}, {AC, .8f, -1}}},
    {{{EQ, .6f, -1}, {R, .9f, 3}}},  {{{SX, .9f, 4}, {S, .3f, 3}}},   {{{SY, .8f, 8}, {IN, .7f, -1}}},
    {{{EQ, .9f, -1}, {TY, .6f, 6}}}, {{{IN, .9f, -1}, {EQ, .6f, -1}}}, {{{CO, .3f, 3}, {R, .8f, 4}}},
    {{{IN, .8f, -1}, {TY, 0.f, 2}}}, {{{SY, .7f, 6}, {S, .4f, 8}}},   {{{IN, .6f, -1}, {R, .8f, 4}}},
    {{{SY, .3f, 7}, {TX, .9f, 3}}},  {{{SX, .1f, 6}, {IN, .6f, -1}}}, {{{S, .7f, 2}, {TY, .6f, 7}}},
    {{{SY, .8f, 4}, {IN, .8f, -1}}}, {{{SX, .7f, 9}, {TY, .8f, 3}}},  {{{SY, .8f, 5}, {AC, .7f, -1}}},
    {{{SX, .7f, 2}, {IN, .1f, -1}}},
};

uint8_t ToLevel(float v) { return static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L)); }

/// A step's fill (Pad, RandomCrop, rotation, affine, the policies' ops) as torchvision hands it
/// to Pillow: made an int (_parse_fill's int(x); a uint8 tensor's cast truncates too), so 123.675
/// fills with 123; clamped to 0..255.
void FillLevels(const float fill[3], uint8_t out[3]) {
  for (int c = 0; c < 3; ++c) {
    const double t = std::trunc(static_cast<double>(fill[c]));
    out[c] = static_cast<uint8_t>(!(t >= 0.0) ? 0.0 : t > 255.0 ? 255.0 : t);
  }
}

/// RandAugment.forward: num_ops uniform choices among the 14 ops, fixed magnitude bin.
void RandAugment(const RandAugmentParams& s, SampleRng& rng, AugmentScratch& scratch, RgbView img) {
  uint8_t fill[3];
  FillLevels(s.fill, fill);
  const int bin = static_cast<int>(s.magnitude);
  for (int k = 0; k < s.num_ops; ++k) {
    const AugOp op = kWideOps[rng.RandInt(0, std::size(kWideOps))];
    bool signed_op = false;
    double m = Magnitude(Space::kRandAugment, s.v2_magnitudes, op, s.num_bins, bin, img.height,
                         img.width, &signed_op);
    if (signed_op && rng.RandInt(0, 2) == 1) m = -m;
    ApplyAugOp(op, m, s.interpolation, fill, img, scratch.ops);
  }
}

/// TrivialAugmentWide.forward: one op, a uniform magnitude bin, a random sign.
void TrivialAugmentWide(const TrivialAugmentWideParams& s, SampleRng& rng, AugmentScratch& scratch,
                        RgbView img) {
  uint8_t fill[3];
  FillLevels(s.fill, fill);
  const AugOp op = kWideOps[rng.RandInt(0, std::size(kWideOps))];
  bool signed_op = false;
  const int bin = static_cast<int>(rng.RandInt(0, s.num_bins));
  double m = Magnitude(Space::kTrivialWide, s.v2_magnitudes, op, s.num_bins, bin, img.height,
                       img.width, &signed_op);
  if (signed_op && rng.RandInt(0, 2) == 1) m = -m;
  ApplyAugOp(op, m, s.interpolation, fill, img, scratch.ops);
}

/// AutoAugment.forward: a uniform sub-policy; each half applied when its draw <= p, negated
/// when its sign draw is 0.
void AutoAugment(const AutoAugmentParams& s, SampleRng& rng, AugmentScratch& scratch, RgbView img) {
  uint8_t fill[3];
  FillLevels(s.fill, fill);
  const SubPolicy* table = s.policy == 1 ? kCifar10Policy
                           : s.policy == 2 ? kSvhnPolicy
                                           : kImageNetPolicy;
  const size_t n = s.policy == 1 ? std::size(kCifar10Policy)
                   : s.policy == 2 ? std::size(kSvhnPolicy)
                                   : std::size(kImageNetPolicy);
  const SubPolicy& sub = table[rng.RandInt(0, static_cast<int64_t>(n))];
  const double probs[2] = {rng.Uniform(), rng.Uniform()};
  const int64_t signs[2] = {rng.RandInt(0, 2), rng.RandInt(0, 2)};
  for (int i = 0; i < 2; ++i) {
    if (!(probs[i] <= sub[i].p)) continue;
    bool signed_op = false;
    double m = 0;
    if (sub[i].bin >= 0) {
      m = Magnitude(Space::kAutoAugment, s.v2_magnitudes, sub[i].op, 10, sub[i].bin, img.height,
                    img.width, &signed_op);
    }
    if (signed_op && signs[i] == 0) m = -m;
    ApplyAugOp(sub[i].op, m, s.interpolation, fill, img, scratch.ops);
  }
}

// ---- timm's RandAugment (timm/data/auto_augment.py: AugmentOp and the *_level_to_arg) --------

double RandomlyNegate(SampleRng& rng, double v) { return rng.Uniform() > 0.5 ? -v : v; }

/// One AugmentOp.__call__: probability, magnitude noise, level -> argument, then the op.
void TimmOp1(const TimmRandAugmentParams& s, TimmOp op, SampleRng& rng, AugmentScratch& scratch,
             RgbView img) {
  if (s.p < 1.0 && rng.Uniform() > s.p) return;
  double m = s.magnitude;
  if (s.magnitude_std > 0) {
    m = std::isinf(s.magnitude_std) ? rng.Uniform(0.0, m) : m + s.magnitude_std * rng.Normal();
  }
  m = std::max(0.0, std::min(m, s.magnitude_max > 0 ? s.magnitude_max : 10.0));
  const double level = m / 10.0;
  uint8_t fill[3];
  FillLevels(s.fill, fill);
  Interpolation interp = s.interpolation;
  if (s.random_interpolation) {
    interp = rng.RandInt(0, 2) == 0 ? Interpolation::kBilinear : Interpolation::kBicubic;
  }
  const auto enhance = [&](AugOp a, bool increasing) {
    const double f = increasing ? std::max(0.1, 1.0 + RandomlyNegate(rng, level * 0.9))
                                : level * 1.8 + 0.1;
    ApplyTimmOp(a, f, interp, fill, img, scratch.ops);
  };
  switch (op) {
    case TimmOp::kAutoContrast: ApplyTimmOp(AugOp::kAutoContrast, 0, interp, fill, img, scratch.ops); break;
    case TimmOp::kEqualize: ApplyTimmOp(AugOp::kEqualize, 0, interp, fill, img, scratch.ops); break;
    case TimmOp::kInvert: ApplyTimmOp(AugOp::kInvert, 0, interp, fill, img, scratch.ops); break;
    case TimmOp::kRotate:
      ApplyTimmOp(AugOp::kRotate, RandomlyNegate(rng, level * 30.0), interp, fill, img,
                  scratch.ops);
      break;
    case TimmOp::kPosterize:
    case TimmOp::kPosterizeIncreasing:
    case TimmOp::kPosterizeOriginal: {
      const int bits = static_cast<int>(level * 4);
      const int arg = op == TimmOp::kPosterize ? bits
                      : op == TimmOp::kPosterizeIncreasing ? 4 - bits
                                                           : bits + 4;
      ApplyTimmOp(AugOp::kPosterize, arg, interp, fill, img, scratch.ops);
      break;
    }
    case TimmOp::kSolarize:
    case TimmOp::kSolarizeIncreasing: {
      const int t = std::min(256, static_cast<int>(level * 256));
      ApplyTimmOp(AugOp::kSolarize, op == TimmOp::kSolarize ? t : 256 - t, interp, fill, img,
                  scratch.ops);
      break;
    }
    case TimmOp::kSolarizeAdd:
      ApplyTimmOp(AugOp::kSolarizeAdd, std::min(128, static_cast<int>(level * 110)), interp,
                  fill, img, scratch.ops);
      break;
    case TimmOp::kColor: enhance(AugOp::kColor, false); break;
    case TimmOp::kColorIncreasing: enhance(AugOp::kColor, true); break;
    case TimmOp::kContrast: enhance(AugOp::kContrast, false); break;
    case TimmOp::kContrastIncreasing: enhance(AugOp::kContrast, true); break;
    case TimmOp::kBrightness: enhance(AugOp::kBrightness, false); break;
    case TimmOp::kBrightnessIncreasing: enhance(AugOp::kBrightness, true); break;
    case TimmOp::kSharpness: enhance(AugOp::kSharpness, false); break;
    case TimmOp::kSharpnessIncreasing: enhance(AugOp::kSharpness, true); break;
    case TimmOp::kShearX:
    case TimmOp::kShearY:
      ApplyTimmOp(op == TimmOp::kShearX ? AugOp::kShearX : AugOp::kShearY,
                  RandomlyNegate(rng, level * 0.3), interp, fill, img, scratch.ops);
      break;
    case TimmOp::kTranslateX:
    case TimmOp::kTranslateY:
      ApplyTimmOp(op == TimmOp::kTranslateX ? AugOp::kTranslateX : AugOp::kTranslateY,
                  RandomlyNegate(rng, level * s.translate_const), interp, fill, img,
                  scratch.ops);
      break;
    case TimmOp::kTranslateXRel:
    case TimmOp::kTranslateYRel: {
      // translate_*_rel: pixels = pct * img.size[0] (x) or img.size[1] (y).
      const double pct = RandomlyNegate(rng, level * s.translate_pct);
      const bool x = op == TimmOp::kTranslateXRel;
      ApplyTimmOp(x ? AugOp::kTranslateX : AugOp::kTranslateY,
                  pct * (x ? img.width : img.height), interp, fill, img, scratch.ops);
      break;
    }
    case TimmOp::kCount:
      break;
  }
}

/// timm RandAugment.__call__: num_layers uniform choices with replacement.
void TimmRandAugment(const TimmRandAugmentParams& s, SampleRng& rng, AugmentScratch& scratch,
                     RgbView img) {
  if (s.timm_op_count <= 0) return;
  for (int k = 0; k < s.num_ops; ++k) {
    const int which = static_cast<int>(rng.RandInt(0, s.timm_op_count));
    TimmOp1(s, static_cast<TimmOp>(s.timm_ops[which]), rng, scratch, img);
  }
}

// ---- the other image steps (torchvision v1 get_params + F.*) ------------------------------

/// ColorJitter.forward: a random order of the four adjustments, each factor uniform in range.
void ColorJitter(const ColorJitterParams& s, SampleRng& rng, AugmentScratch& scratch,
                 RgbView img) {
  int order[4] = {0, 1, 2, 3};
  for (int i = 3; i > 0; --i) std::swap(order[i], order[rng.RandInt(0, i + 1)]);
  // order[] and factor[] are indexed as torchvision's fn_idx: brightness, contrast, saturation,
  // hue.
  const std::optional<Range>* ranges[4] = {&s.brightness, &s.contrast, &s.saturation, &s.hue};
  double factor[4] = {0, 0, 0, 0};
  for (int k = 0; k < 4; ++k) {
    if (*ranges[k]) factor[k] = rng.Uniform((*ranges[k])->lo, (*ranges[k])->hi);
  }
  for (int k : order) {
    if (!*ranges[k]) continue;
    switch (k) {
      case 0: AdjustBrightness(img, factor[k]); break;
      case 1: AdjustContrast(img, factor[k]); break;
      case 2: AdjustSaturation(img, factor[k]); break;
      case 3: AdjustHue(img, factor[k]); break;
    }
  }
}

/// RandomAffine.get_params + F.affine.
void RandomAffine(const RandomAffineParams& s, SampleRng& rng, AugmentScratch& scratch,
                  RgbView img) {
  const AffineDraw d = DrawRandomAffine(s, rng, img.width, img.height);
  uint8_t fill[3];
  FillLevels(s.fill, fill);
  Affine(img, d.angle, d.translate_x, d.translate_y, d.scale, d.shear_x, d.shear_y,
         s.interpolation, fill, s.center.has_value(), s.center ? (*s.center)[0] : 0,
         s.center ? (*s.center)[1] : 0, scratch.ops);
}

/// Pads `*img` into scratch.padded (F.pad) and points `*img` there. Negative padding crops, as
/// torchvision's; cropping the whole image away is an error (Pillow refuses the empty crop).
absl::Status PadInto(RgbView* img, int left, int top, int right, int bottom,
                     const PaddingParams& s, AugmentScratch& scratch) {
  uint8_t fill[3];
  FillLevels(s.fill, fill);
  RgbView dst;
  dst.width = img->width + left + right;
  dst.height = img->height + top + bottom;
  if (dst.width <= 0 || dst.height <= 0) {
    return absl::InvalidArgumentError("Pad: negative padding removes the whole image");
  }
  dst.stride = static_cast<size_t>(dst.width) * 3;
  const size_t bytes = dst.stride * dst.height;
  // The source may live in `padded` from an earlier step: pad into the other buffer.
  const bool in_padded = !scratch.padded.empty() && img->data >= scratch.padded.data() &&
                         img->data < scratch.padded.data() + scratch.padded.size();
  std::vector<uint8_t>& target = in_padded ? scratch.padded2 : scratch.padded;
  if (target.size() < bytes) target.resize(bytes);
  dst.data = target.data();
  Pad(*img, left, top, right, bottom, s.pad_mode, fill, dst);
  *img = dst;
  return absl::OkStatus();
}

/// RandomCrop.forward on the 8-bit image (non-zero fill or another padding mode).
absl::Status RandomCropImage(const RandomCropParams& s, SampleRng& rng, AugmentScratch& scratch,
                             RgbView* img) {
  if (s.pad[0] || s.pad[1] || s.pad[2] || s.pad[3]) {
    absl::Status status = PadInto(img, s.pad[0], s.pad[1], s.pad[2], s.pad[3], s, scratch);
    if (!status.ok()) return status;
  }
  const int th = s.size_h, tw = s.size_w;
  if (s.pad_if_needed && img->width < tw) {
    const int d = tw - img->width;
    absl::Status status = PadInto(img, d, 0, d, 0, s, scratch);
    if (!status.ok()) return status;
  }
  if (s.pad_if_needed && img->height < th) {
    const int d = th - img->height;
    absl::Status status = PadInto(img, 0, d, 0, d, s, scratch);
    if (!status.ok()) return status;
  }
  if (img->height < th || img->width < tw) {
    return absl::InvalidArgumentError(
        "RandomCrop: required crop size is larger than the (padded) input image");
  }
  if (img->height == th && img->width == tw) return absl::OkStatus();
  const int64_t top = rng.RandInt(0, img->height - th + 1);
  const int64_t left = rng.RandInt(0, img->width - tw + 1);
  img->data += static_cast<size_t>(top) * img->stride + static_cast<size_t>(left) * 3;
  img->width = tw;
  img->height = th;
  return absl::OkStatus();
}

/// torchvision's center_crop on the 8-bit image: zero padding first where the crop is larger
/// ((crop - size) // 2 leading), then the crop at round((size - crop) / 2), halves to even.
absl::Status CenterCropImage(const CenterCropParams& s, AugmentScratch& scratch, RgbView* img) {
  const int ch = s.size_h, cw = s.size_w;
  if (cw > img->width || ch > img->height) {
    const int dw = std::max(cw - img->width, 0), dh = std::max(ch - img->height, 0);
    const PaddingParams zero;  // constant mode, fill 0
    absl::Status status = PadInto(img, dw / 2, dh / 2, (dw + 1) / 2, (dh + 1) / 2, zero, scratch);
    if (!status.ok()) return status;
  }
  const auto half_even = [](int d) { return d % 2 == 0 ? d / 2 : (d / 2) + ((d / 2) % 2); };
  const int top = half_even(img->height - ch), left = half_even(img->width - cw);
  img->data += static_cast<size_t>(top) * img->stride + static_cast<size_t>(left) * 3;
  img->width = cw;
  img->height = ch;
  return absl::OkStatus();
}

void FlipImage(bool horizontal, RgbView& img) {
  if (horizontal) {
    for (int y = 0; y < img.height; ++y) {
      uint8_t* row = img.data + static_cast<size_t>(y) * img.stride;
      for (int a = 0, b = img.width - 1; a < b; ++a, --b) {
        std::swap_ranges(row + 3 * a, row + 3 * a + 3, row + 3 * b);
      }
    }
    return;
  }
  const size_t bytes = static_cast<size_t>(img.width) * 3;
  for (int a = 0, b = img.height - 1; a < b; ++a, --b) {
    std::swap_ranges(img.data + static_cast<size_t>(a) * img.stride,
                     img.data + static_cast<size_t>(a) * img.stride + bytes,
                     img.data + static_cast<size_t>(b) * img.stride);
  }
}

// ---- RandomErasing on the written output ---------------------------------------------------

/// Writes `v` at (c, y, x) of an output of `dtype`/`layout`.
void Store(void* dst, DType dtype, Layout layout, int height, int width, int c, int y, int x,
           float v) {
  const size_t i = layout == Layout::kHWC
                       ? (static_cast<size_t>(y) * width + x) * 3 + c
                       : (static_cast<size_t>(c) * height + y) * width + x;
  switch (dtype) {
    case DType::kFloat32: static_cast<float*>(dst)[i] = v; break;
    case DType::kFloat16: static_cast<uint16_t*>(dst)[i] = FloatToHalf(v); break;
    case DType::kBFloat16: static_cast<uint16_t*>(dst)[i] = FloatToBFloat16(v); break;
    case DType::kUint8: static_cast<uint8_t*>(dst)[i] = ToLevel(v); break;
  }
}

void EraseBox(const RandomErasingParams& s, SampleRng& rng, DType dtype, Layout layout, int height,
              int width, int top, int left, int h, int w, void* dst) {
  float channel_value[3];
  for (int c = 0; c < 3; ++c) {
    channel_value[c] = s.erase_mode == 2 ? static_cast<float>(rng.Normal()) : s.fill[c];
  }
  for (int c = 0; c < 3; ++c) {
    for (int y = top; y < top + h; ++y) {
      for (int x = left; x < left + w; ++x) {
        const float v = s.erase_mode == 1 ? static_cast<float>(rng.Normal()) : channel_value[c];
        Store(dst, dtype, layout, height, width, c, y, x, v);
      }
    }
  }
}

/// torchvision RandomErasing.forward / get_params (v1).
void TorchvisionErasing(const RandomErasingParams& s, SampleRng& rng, DType dtype, Layout layout,
                        int height, int width, void* dst) {
  if (!(rng.Uniform() < s.p)) return;
  const double area = static_cast<double>(height) * width;
  const double log_lo = std::log(s.ratio.lo), log_hi = std::log(s.ratio.hi);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double erase_area = area * rng.Uniform(s.scale.lo, s.scale.hi);
    const double aspect = std::exp(rng.Uniform(log_lo, log_hi));
    const int h = static_cast<int>(std::nearbyint(std::sqrt(erase_area * aspect)));
    const int w = static_cast<int>(std::nearbyint(std::sqrt(erase_area / aspect)));
    if (!(h < height && w < width)) continue;
    const int top = static_cast<int>(rng.RandInt(0, height - h + 1));
    const int left = static_cast<int>(rng.RandInt(0, width - w + 1));
    EraseBox(s, rng, dtype, layout, height, width, top, left, h, w, dst);
    return;
  }
}

/// timm RandomErasing._erase: count boxes (1..max_count), each area / count, 10 attempts.
void TimmErasing(const RandomErasingParams& s, SampleRng& rng, DType dtype, Layout layout, int height,
                 int width, void* dst) {
  if (rng.Uniform() > s.p) return;
  const double area = static_cast<double>(height) * width;
  const int count = s.erase_count <= 1 ? 1 : static_cast<int>(rng.RandInt(1, s.erase_count + 1));
  const double log_lo = std::log(s.ratio.lo), log_hi = std::log(s.ratio.hi);
  for (int k = 0; k < count; ++k) {
    for (int attempt = 0; attempt < 10; ++attempt) {
      const double target = rng.Uniform(s.scale.lo, s.scale.hi) * area / count;
      const double aspect = std::exp(rng.Uniform(log_lo, log_hi));
      const int h = static_cast<int>(std::nearbyint(std::sqrt(target * aspect)));
      const int w = static_cast<int>(std::nearbyint(std::sqrt(target / aspect)));
      if (w < width && h < height) {
        const int top = static_cast<int>(rng.RandInt(0, height - h + 1));
        const int left = static_cast<int>(rng.RandInt(0, width - w + 1));
        EraseBox(s, rng, dtype, layout, height, width, top, left, h, w, dst);
        break;
      }
    }
  }
}

constexpr const char* kTimmNames[] = {
    "AutoContrast",  "Equalize",           "Invert",          "Rotate",
    "Posterize",     "PosterizeIncreasing", "PosterizeOriginal", "Solarize",
    "SolarizeIncreasing", "SolarizeAdd",   "Color",           "ColorIncreasing",
    "Contrast",      "ContrastIncreasing", "Brightness",      "BrightnessIncreasing",
    "Sharpness",     "SharpnessIncreasing", "ShearX",         "ShearY",
    "TranslateX",    "TranslateY",         "TranslateXRel",   "TranslateYRel"};
static_assert(std::size(kTimmNames) == static_cast<size_t>(TimmOp::kCount));

}  // namespace

int TimmOpFromName(const char* name) {
  for (size_t i = 0; i < std::size(kTimmNames); ++i) {
    if (std::strcmp(kTimmNames[i], name) == 0) return static_cast<int>(i);
  }
  return -1;
}

double LinspaceF32(double start, double end, int steps, int index) {
  const float a = static_cast<float>(start), b = static_cast<float>(end);
  if (steps <= 1) return a;
  const float step = (b - a) / static_cast<float>(steps - 1);
  // torch's CPU kernel (the AVX2/AVX512 build current x86 CPUs run) fuses each multiply and
  // add into one rounding; separate float operations differ by an ulp at some bins, which
  // matters through int(): bin 15 of TrivialAugmentWide's translations is 15.999999 in torch
  // (a 15-pixel shift), 16.0 unfused.
  const float v = index < steps / 2
                      ? std::fma(step, static_cast<float>(index), a)
                      : std::fma(-step, static_cast<float>(steps - index - 1), b);
  return static_cast<double>(v);
}

// torchvision draws each with torch.empty(1).uniform_(lo, hi): a float32 value (a range pinned
// to 0.8 gives float32(0.8), which turns some pixels differently from 0.8).
static double UniformFloat32(SampleRng& rng, double lo, double hi) {
  return static_cast<double>(static_cast<float>(rng.Uniform(lo, hi)));
}

double DrawRandomRotation(const RandomRotationParams& s, SampleRng& rng) {
  return UniformFloat32(rng, s.degrees.lo, s.degrees.hi);
}

AffineDraw DrawRandomAffine(const RandomAffineParams& s, SampleRng& rng, int width, int height) {
  AffineDraw d;
  d.angle = UniformFloat32(rng, s.degrees.lo, s.degrees.hi);
  if (s.translate) {
    const double max_dx = s.translate->lo * width;
    const double max_dy = s.translate->hi * height;
    d.translate_x = std::nearbyint(UniformFloat32(rng, -max_dx, max_dx));
    d.translate_y = std::nearbyint(UniformFloat32(rng, -max_dy, max_dy));
  }
  d.scale = s.scale ? UniformFloat32(rng, s.scale->lo, s.scale->hi) : 1.0;
  if (s.shear_x) d.shear_x = UniformFloat32(rng, s.shear_x->lo, s.shear_x->hi);
  if (s.shear_y) d.shear_y = UniformFloat32(rng, s.shear_y->lo, s.shear_y->hi);
  return d;
}

// ---- the image-stage functions of the StepKinds rows ------------------------------------------

absl::Status ApplyColorJitter(const ColorJitterParams& s, SampleRng& rng, AugmentScratch& scratch,
                              RgbView* img) {
  ColorJitter(s, rng, scratch, *img);
  return absl::OkStatus();
}

absl::Status ApplyGrayscale(const GrayscaleParams& s, SampleRng& rng, AugmentScratch&,
                            RgbView* img) {
  if (s.p >= 1.0 || rng.Uniform() < s.p) ToGrayscale(*img);
  return absl::OkStatus();
}

absl::Status ApplyRandomRotation(const RandomRotationParams& s, SampleRng& rng, AugmentScratch& scratch,
                                 RgbView* img) {
  uint8_t fill[3];
  FillLevels(s.fill, fill);
  Rotate(*img, DrawRandomRotation(s, rng), s.interpolation, fill,
         s.center.has_value(), s.center ? (*s.center)[0] : 0, s.center ? (*s.center)[1] : 0,
         scratch.ops);
  return absl::OkStatus();
}

absl::Status ApplyRandomAffine(const RandomAffineParams& s, SampleRng& rng, AugmentScratch& scratch,
                               RgbView* img) {
  RandomAffine(s, rng, scratch, *img);
  return absl::OkStatus();
}

absl::Status ApplyGaussianBlur(const GaussianBlurParams& s, SampleRng& rng, AugmentScratch& scratch,
                               RgbView* img) {
  const double sigma = rng.Uniform(s.sigma.lo, s.sigma.hi);
  GaussianBlur(*img, s.size_w, s.size_h, sigma, sigma, scratch.ops);
  return absl::OkStatus();
}

absl::Status ApplyAugOpStep(const AugOpParams& s, SampleRng& rng, AugmentScratch& scratch,
                            RgbView* img) {
  if (s.p >= 1.0 || rng.Uniform() < s.p) {
    uint8_t fill[3];
    FillLevels(s.fill, fill);
    ApplyAugOp(s.aug_op, s.magnitude, s.interpolation, fill, *img, scratch.ops);
  }
  return absl::OkStatus();
}

absl::Status ApplyRandAugment(const RandAugmentParams& s, SampleRng& rng, AugmentScratch& scratch,
                              RgbView* img) {
  RandAugment(s, rng, scratch, *img);
  return absl::OkStatus();
}

absl::Status ApplyTrivialAugmentWide(const TrivialAugmentWideParams& s, SampleRng& rng,
                                     AugmentScratch& scratch, RgbView* img) {
  TrivialAugmentWide(s, rng, scratch, *img);
  return absl::OkStatus();
}

absl::Status ApplyAutoAugment(const AutoAugmentParams& s, SampleRng& rng, AugmentScratch& scratch,
                              RgbView* img) {
  AutoAugment(s, rng, scratch, *img);
  return absl::OkStatus();
}

absl::Status ApplyTimmRandAugment(const TimmRandAugmentParams& s, SampleRng& rng, AugmentScratch& scratch,
                                  RgbView* img) {
  TimmRandAugment(s, rng, scratch, *img);
  return absl::OkStatus();
}

absl::Status ApplyPad(const PadParams& s, SampleRng&, AugmentScratch& scratch, RgbView* img) {
  return PadInto(img, s.pad[0], s.pad[1], s.pad[2], s.pad[3], s, scratch);
}

absl::Status ApplyRandomCrop(const RandomCropParams& s, SampleRng& rng, AugmentScratch& scratch,
                             RgbView* img) {
  return RandomCropImage(s, rng, scratch, img);
}

absl::Status ApplyHorizontalFlip(const HorizontalFlipParams& s, SampleRng& rng, AugmentScratch&,
                                 RgbView* img) {
  if (rng.Uniform() < s.p) FlipImage(/*horizontal=*/true, *img);
  return absl::OkStatus();
}

absl::Status ApplyVerticalFlip(const VerticalFlipParams& s, SampleRng& rng, AugmentScratch&,
                               RgbView* img) {
  if (rng.Uniform() < s.p) FlipImage(/*horizontal=*/false, *img);
  return absl::OkStatus();
}

absl::Status ApplyCenterCrop(const CenterCropParams& s, SampleRng&, AugmentScratch& scratch,
                             RgbView* img) {
  return CenterCropImage(s, scratch, img);
}

absl::Status ApplyImageSteps(const TransformPipeline& pipeline, SampleRng& rng,
                             AugmentScratch& scratch, RgbView* img) {
  const std::vector<TransformStep>& steps = pipeline.steps();
  for (size_t i = pipeline.image_begin(); i < pipeline.image_end(); ++i) {
    const TransformStep& s = steps[i];
    if (const RandomApplyParams* guard = s.get_if<RandomApplyParams>()) {
      // torchvision's RandomApply: one uniform draw, always; the guarded steps run (and make
      // their own draws) only when it is below p. v1 applies when the draw is <= p and v2 when
      // it is < p: the two differ only when the draw equals p exactly.
      const double u = rng.Uniform();
      if (!(guard->p >= 1.0 || u < guard->p)) i += static_cast<size_t>(guard->apply_steps);
      continue;
    }
    const auto apply = KindInfo(s.kind()).apply_image;
    if (apply == nullptr) {
      return absl::InternalError("a resize or output step reached the image stage");
    }
    if (absl::Status status = apply(s, rng, scratch, img); !status.ok()) return status;
  }
  return absl::OkStatus();
}

void ApplyErasing(const TransformPipeline& pipeline, SampleRng& rng, int height, int width,
                  void* dst) {
  for (const TransformStep& step : pipeline.steps()) {
    const RandomErasingParams* erasing = step.get_if<RandomErasingParams>();
    if (erasing == nullptr) continue;
    const RandomErasingParams& s = *erasing;
    if (s.timm_erasing) {
      TimmErasing(s, rng, pipeline.dtype(), pipeline.layout(), height, width, dst);
    } else {
      TorchvisionErasing(s, rng, pipeline.dtype(), pipeline.layout(), height, width, dst);
    }
  }
}

}  // namespace ringloader
