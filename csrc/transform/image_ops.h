#pragma once
/// Pixel operations on 8-bit RGB images with the arithmetic of torchvision's PIL path
/// (torchvision.transforms.functional on a PIL image, i.e. Pillow's C code), so a native chain
/// gives the pixels torchvision + Pillow give. Each function works in place on a packed RGB
/// view (3 bytes per pixel, rows `stride` bytes apart) unless it says otherwise; scratch
/// buffers are grow-only and owned by the caller (one per decode thread), so steady-state calls
/// do not allocate.
///
/// Geometry functions take Pillow's transform filters only: Interpolation::kNearest, kBilinear
/// or kBicubic (Pillow's Image.transform rejects the others; ApplyImageOpForTesting checks).

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "transform/image_transform.h"

namespace ringloader {

/// A packed 8-bit RGB image: pixel (x, y) channel c is data[y * stride + 3 * x + c].
struct RgbView {
  uint8_t* data = nullptr;
  int width = 0;
  int height = 0;
  size_t stride = 0;
};

/// Grow-only buffers for the operations that need a copy of the source or intermediate rows.
struct ImageOpScratch {
  std::vector<uint8_t> image;  ///< packed copy of the source (sharpness, geometry)
  std::vector<float> floats;   ///< Gaussian kernels and horizontally blurred rows
  std::vector<int32_t> ints;   ///< source columns of Pillow's scale-only nearest transform
};

// ---- colour (torchvision F.adjust_* on PIL: PIL.ImageEnhance / Image.blend) -----------------

/// ImageEnhance.Brightness(img).enhance(factor): blend with black.
void AdjustBrightness(RgbView img, double factor);
/// ImageEnhance.Contrast: blend with the mean of the image's L conversion (rounded as Pillow).
void AdjustContrast(RgbView img, double factor);
/// ImageEnhance.Color: blend with the image's L conversion.
void AdjustSaturation(RgbView img, double factor);
/// torchvision's PIL adjust_hue: to HSV (Pillow's conversion), shift H by hue_factor * 255 with
/// uint8 wrap-around, back to RGB. hue_factor in [-0.5, 0.5].
void AdjustHue(RgbView img, double hue_factor);
/// ImageEnhance.Sharpness: blend with ImageFilter.SMOOTH of the image (border pixels kept).
void AdjustSharpness(RgbView img, double factor, ImageOpScratch& scratch);
/// img.convert("L") replicated to three channels (Pillow's L weights and rounding).
void ToGrayscale(RgbView img);

// ---- AutoAugment-family point operations (PIL.ImageOps) ------------------------------------

/// ImageOps.posterize: keep the top `bits` bits (0..8). Pillow 13 rejects 0; 0 gives the black
/// image that older Pillow and torchvision's tensor path give.
void Posterize(RgbView img, int bits);
/// ImageOps.solarize: invert levels >= threshold (threshold may be fractional, as torchvision
/// passes it).
void Solarize(RgbView img, double threshold);
/// ImageOps.invert.
void Invert(RgbView img);
/// ImageOps.autocontrast (cutoff 0, per channel).
void AutoContrast(RgbView img);
/// ImageOps.equalize (per channel histogram equalisation).
void Equalize(RgbView img);
/// timm's solarize_add: levels below `threshold` get `add` added, clipped to 0..255.
void SolarizeAdd(RgbView img, int add, int threshold);

// ---- filtering -------------------------------------------------------------------------------

/// torchvision F.gaussian_blur on a PIL image (it runs the tensor kernel: Gaussian of
/// kernel_w x kernel_h odd sizes, reflect padding, float arithmetic, rounded half to even back
/// to uint8). Computed separably; equal to torchvision up to float rounding (<= 1 level).
/// Kernels wider than the image reflect periodically (torch rejects them).
void GaussianBlur(RgbView img, int kernel_w, int kernel_h, double sigma_x, double sigma_y,
                  ImageOpScratch& scratch);

// ---- geometry (PIL Image.transform / Image.rotate, as torchvision's PIL affine/rotate) -------

/// PIL Image.transform(img.size, Image.AFFINE, matrix, resample, fillcolor=fill): output pixel
/// (x, y) samples the input at matrix * (x + 0.5, y + 0.5) with Pillow's nearest (including its
/// scale-only and 16.16 fixed-point paths), bilinear or bicubic filter; pixels that map outside
/// the input get `fill`.
void TransformAffine(RgbView img, const double matrix[6], Interpolation interpolation,
                     const uint8_t fill[3], ImageOpScratch& scratch);
/// torchvision F.affine(img, angle, translate, scale, shear, interpolation, fill, center) on a
/// PIL image: the inverse matrix torchvision computes (_get_inverse_affine_matrix, centre of
/// the image by default or `center` when has_center) applied with TransformAffine.
void Affine(RgbView img, double angle, double translate_x, double translate_y, double scale,
            double shear_x, double shear_y, Interpolation interpolation, const uint8_t fill[3],
            bool has_center, double center_x, double center_y, ImageOpScratch& scratch);
/// torchvision F.rotate(img, angle, interpolation, expand=False, center, fill) on a PIL image,
/// i.e. PIL's Image.rotate: counter-clockwise degrees about the centre, with Pillow's exact
/// shortcuts (0 and 180 degrees, 90/270 on a square image without a centre) and its matrix
/// rounded to 15 decimals.
void Rotate(RgbView img, double angle, Interpolation interpolation, const uint8_t fill[3],
            bool has_center, double center_x, double center_y, ImageOpScratch& scratch);

/// torchvision F.pad on a PIL image: writes `src` padded by (left, top, right, bottom) into
/// `dst`, which must be (src.width + left + right) x (src.height + top + bottom) and not
/// overlap src. Negative padding crops, as torchvision allows; edge, reflect and symmetric
/// need at least one pixel left after cropping (numpy.pad cannot extend an empty axis).
/// Reflect and symmetric follow numpy.pad, including pads wider than the image.
void Pad(const RgbView& src, int left, int top, int right, int bottom, PadMode mode,
         const uint8_t fill[3], RgbView dst);

// ---- policy operations ---------------------------------------------------------------------

/// torchvision.transforms.autoaugment._apply_op (v1) on a PIL image: `magnitude` is the value
/// torchvision passes (sign applied). Shears are F.affine about (0, 0) with
/// shear = degrees(atan(magnitude)); translations F.affine by int(magnitude) pixels; enhance
/// ops use factor 1 + magnitude; Posterize int(magnitude) bits. kSolarizeAdd (not a
/// torchvision op) is SolarizeAdd(magnitude, 128).
void ApplyAugOp(AugOp op, double magnitude, Interpolation interpolation, const uint8_t fill[3],
                RgbView img, ImageOpScratch& scratch);
/// timm 1.0 data/auto_augment.py op functions with `arg` the value timm's level function
/// produced: shears transform with (1, arg, 0, 0, 1, 0) / (1, 0, 0, arg, 1, 0); translations
/// by `arg` pixels (the caller converts timm's relative translations: pct * width or height);
/// Rotate is img.rotate(arg); enhance ops use factor arg; Posterize keeps int(arg) bits (8 or
/// more: unchanged); Solarize thresh arg; SolarizeAdd adds arg below 128. `interpolation` is
/// the one timm's _interpolation picked and `fill` its fillcolor (hparams img_mean).
void ApplyTimmOp(AugOp op, double arg, Interpolation interpolation, const uint8_t fill[3],
                 RgbView img, ImageOpScratch& scratch);

/// The op of torchvision's name ("ShearX", "Posterize"...; "SolarizeAdd" as timm names it);
/// false for an unknown name.
bool AugOpFromName(std::string_view name, AugOp* op);
/// torchvision's name of `op` (the inverse of AugOpFromName).
const char* AugOpName(AugOp op);

// ---- tests -------------------------------------------------------------------------------

/// Runs the operation `name` with named arguments on `image` (packed RGB, width x height), for
/// parity tests against torchvision/Pillow from Python. Names and arguments:
///   AdjustBrightness/AdjustContrast/AdjustSaturation/AdjustSharpness {factor},
///   AdjustHue {hue_factor}, ToGrayscale, Posterize {bits}, Solarize {threshold}, Invert,
///   AutoContrast, Equalize, SolarizeAdd {add, threshold}, GaussianBlur {kernel: [w, h],
///   sigma: [x, y]}, TransformAffine {matrix: [6], interpolation, fill: [3]},
///   Affine {angle, translate: [x, y], scale, shear: [x, y], interpolation, fill, center?},
///   Rotate {angle, interpolation, fill, center?}, Pad {padding: [l, t, r, b], mode, fill},
///   ApplyAugOp:<Op> / ApplyTimmOp:<Op> {magnitude | arg, interpolation, fill} with <Op> the
///   AugOp name as torchvision spells it ("ShearX", ..., "SolarizeAdd").
/// Interpolation is Pillow's number (0 nearest, 2 bilinear, 3 bicubic), PadMode the enum's.
/// Pad replaces image/width/height with the padded image.
/// InvalidArgument names an unknown operation or a missing/invalid argument.
absl::Status ApplyImageOpForTesting(const std::string& name,
                                    const std::map<std::string, std::vector<double>>& args,
                                    std::vector<uint8_t>* image, int* width, int* height);

}  // namespace ringloader
