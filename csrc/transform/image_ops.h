#pragma once
/// Pixel operations on 8-bit RGB images with the arithmetic of torchvision's PIL path
/// (torchvision.transforms.functional on a PIL image, i.e. Pillow's C code), so a native chain
/// gives the pixels torchvision + Pillow give. Each function works in place on a packed RGB
/// view (3 bytes per pixel, rows `stride` bytes apart) unless it says otherwise; scratch
/// buffers are grow-only and owned by the caller (one per decode thread), so steady-state calls
/// do not allocate.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
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

/// Grow-only buffers for the operations that need a second image or a row of sums.
struct ImageOpScratch {
  std::vector<uint8_t> image;
  std::vector<uint8_t> image2;
  std::vector<float> floats;
  std::vector<int32_t> ints;
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

/// ImageOps.posterize: keep the top `bits` bits (0..8).
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

/// torchvision F.gaussian_blur on a PIL image (it runs the tensor kernel: separable Gaussian of
/// kernel_w x kernel_h odd sizes, reflect padding, float accumulation, rounded back to uint8).
void GaussianBlur(RgbView img, int kernel_w, int kernel_h, double sigma_x, double sigma_y,
                  ImageOpScratch& scratch);

// ---- geometry (PIL Image.transform / Image.rotate, as torchvision's PIL affine/rotate) -------

/// torchvision F.affine(img, angle, translate, scale, shear, interpolation, fill, center) on a
/// PIL image: the inverse matrix torchvision computes (_get_inverse_affine_matrix, centre of
/// the image by default or `center` when has_center) applied with PIL's AFFINE transform and
/// NEAREST or BILINEAR filtering; pixels from outside get `fill`. Output size = input size.
void Affine(RgbView img, double angle, double translate_x, double translate_y, double scale,
            double shear_x, double shear_y, Interpolation interpolation, const uint8_t fill[3],
            bool has_center, double center_x, double center_y, ImageOpScratch& scratch);
/// torchvision F.rotate(img, angle, interpolation, expand=False, center, fill) on a PIL image
/// (PIL's Image.rotate: counter-clockwise degrees about the centre).
void Rotate(RgbView img, double angle, Interpolation interpolation, const uint8_t fill[3],
            bool has_center, double center_x, double center_y, ImageOpScratch& scratch);

/// torchvision F.pad on a PIL image: writes `src` padded by (left, top, right, bottom) into
/// `dst`, which must be (src.width + left + right) x (src.height + top + bottom) and not
/// overlap src. Negative padding crops, as torchvision allows.
void Pad(const RgbView& src, int left, int top, int right, int bottom, PadMode mode,
         const uint8_t fill[3], RgbView dst);

// ---- AutoAugment-family ops --------------------------------------------------------------

/// torchvision autoaugment._apply_op on a PIL image: `magnitude` as torchvision passes it
/// (sign applied).
void ApplyAugOp(AugOp op, double magnitude, Interpolation interpolation, const uint8_t fill[3],
                RgbView img, ImageOpScratch& scratch);
/// timm auto_augment's op functions with the argument its level function produced
/// (translations in pixels).
void ApplyTimmOp(AugOp op, double arg, Interpolation interpolation, const uint8_t fill[3],
                 RgbView img, ImageOpScratch& scratch);

// ---- tests -------------------------------------------------------------------------------

/// Runs the operation `name` (the function names above: "AdjustBrightness", "Affine", ...)
/// with named arguments on `image` (packed RGB, width x height), for parity tests against
/// torchvision/Pillow from Python. Pad replaces image/width/height with the padded image.
/// InvalidArgument names an unknown operation or a missing argument.
absl::Status ApplyImageOpForTesting(const std::string& name,
                                    const std::map<std::string, std::vector<double>>& args,
                                    std::vector<uint8_t>* image, int* width, int* height);

}  // namespace ringloader
