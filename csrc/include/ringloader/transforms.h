#pragma once
/// Builders for LoaderOptions::transform with the names, defaults and meaning of
/// torchvision.transforms (and of ringloader.transforms in Python), so a C++ chain reads like
/// the Python one:
///
///   options.transform = {ringloader::transforms::RandomResizedCrop(224),
///                        ringloader::transforms::RandomHorizontalFlip(),
///                        ringloader::transforms::ToTensor(),
///                        ringloader::transforms::Normalize(ringloader::transforms::kImageNetMean,
///                                                          ringloader::transforms::kImageNetStd)};
///
/// Chains are validated by Loader::Create (TransformPipeline::Create), not here.

#include <algorithm>
#include <array>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "ringloader/ringloader.h"

namespace ringloader::transforms {

namespace detail {
/// Whether a parameter struct has an `interpolation` (the kinds that resample).
template <typename P, typename = void>
struct HasInterpolation : std::false_type {};
template <typename P>
struct HasInterpolation<P, std::void_t<decltype(std::declval<P&>().interpolation)>>
    : std::true_type {};
}  // namespace detail

/// torchvision's ImageNet statistics, as used by its reference training scripts.
inline constexpr std::array<float, 3> kImageNetMean = {0.485f, 0.456f, 0.406f};
inline constexpr std::array<float, 3> kImageNetStd = {0.229f, 0.224f, 0.225f};

/// Resize(size): the shorter side becomes `size` (aspect kept); `max_size` caps the longer side
/// (0 = no cap).
inline TransformStep Resize(int size, int max_size = 0) {
  ResizeParams s;
  s.size_h = size;
  s.size_w = 0;
  s.max_size = max_size;
  return s;
}

/// Resize((height, width)): exactly this size. Call as Resize({height, width}).
inline TransformStep Resize(const std::array<int, 2>& height_width) {
  ResizeParams s;
  s.size_h = height_width[0];
  s.size_w = height_width[1];
  return s;
}

/// CenterCrop(size) or CenterCrop((height, width)); pads with zeros when the image is smaller.
inline TransformStep CenterCrop(int height, int width = 0) {
  CenterCropParams s;
  s.size_h = height;
  s.size_w = width > 0 ? width : height;
  return s;
}

/// RandomResizedCrop(size, scale=(0.08, 1.0), ratio=(3/4, 4/3)).
inline TransformStep RandomResizedCrop(int height, int width = 0, double scale_min = 0.08,
                                       double scale_max = 1.0, double ratio_min = 3.0 / 4.0,
                                       double ratio_max = 4.0 / 3.0) {
  RandomResizedCropParams s;
  s.size_h = height;
  s.size_w = width > 0 ? width : height;
  s.scale_min = scale_min;
  s.scale_max = scale_max;
  s.ratio_min = ratio_min;
  s.ratio_max = ratio_max;
  return s;
}

/// RandomHorizontalFlip(p=0.5).
inline TransformStep RandomHorizontalFlip(double p = 0.5) {
  HorizontalFlipParams s;
  s.p = p;
  return s;
}

/// ToTensor(): float values in [0, 1].
inline TransformStep ToTensor() { return ToTensorParams{}; }

/// Normalize(mean, std) per channel; after ToTensor.
inline TransformStep Normalize(const std::array<float, 3>& mean, const std::array<float, 3>& std) {
  NormalizeParams s;
  for (int c = 0; c < 3; ++c) {
    s.mean[c] = mean[c];
    s.std[c] = std[c];
  }
  return s;
}

/// `step` (Resize, RandomResizedCrop, rotation, affine or a policy) with another filter, e.g.
/// WithInterpolation(Resize(256), Interpolation::kBicubic). A step of a kind without a filter
/// is returned as it is.
inline TransformStep WithInterpolation(TransformStep step, Interpolation interpolation) {
  std::visit(
      [interpolation](auto& params) {
        if constexpr (detail::HasInterpolation<decltype(params)>::value) {
          params.interpolation = interpolation;
        }
      },
      step.params);
  return step;
}

/// RandomVerticalFlip(p=0.5).
inline TransformStep RandomVerticalFlip(double p = 0.5) {
  VerticalFlipParams s;
  s.p = p;
  return s;
}

/// RandomCrop(size, padding) with constant zero fill: padding on every side, as
/// RandomCrop(32, padding=4) in CIFAR recipes.
inline TransformStep RandomCrop(int height, int width = 0, int padding = 0,
                                bool pad_if_needed = false) {
  RandomCropParams s;
  s.size_h = height;
  s.size_w = width > 0 ? width : height;
  for (int& p : s.pad) p = padding;
  s.pad_if_needed = pad_if_needed;
  return s;
}

/// ColorJitter(brightness, contrast, saturation, hue): factors drawn in [1 - v, 1 + v] (hue in
/// [-hue, hue]); 0 leaves that adjustment out, as torchvision.
inline TransformStep ColorJitter(double brightness = 0, double contrast = 0,
                                 double saturation = 0, double hue = 0) {
  ColorJitterParams s;
  const auto factor = [](double v) -> std::optional<Range> {
    if (v <= 0) return std::nullopt;
    return Range{std::max(0.0, 1.0 - v), 1.0 + v};
  };
  s.brightness = factor(brightness);
  s.contrast = factor(contrast);
  s.saturation = factor(saturation);
  if (hue > 0) s.hue = Range{-hue, hue};
  return s;
}

/// RandomGrayscale(p=0.1); p = 1 is Grayscale(num_output_channels=3).
inline TransformStep RandomGrayscale(double p = 0.1) {
  GrayscaleParams s;
  s.p = p;
  return s;
}

/// RandAugment(num_ops=2, magnitude=9, num_magnitude_bins=31), nearest filtering, fill 0.
inline TransformStep RandAugment(int num_ops = 2, int magnitude = 9, int num_bins = 31) {
  RandAugmentParams s;
  s.num_ops = num_ops;
  s.magnitude = magnitude;
  s.num_bins = num_bins;
  s.interpolation = Interpolation::kNearest;
  return s;
}

/// TrivialAugmentWide(num_magnitude_bins=31), nearest filtering, fill 0.
inline TransformStep TrivialAugmentWide(int num_bins = 31) {
  TrivialAugmentWideParams s;
  s.num_bins = num_bins;
  s.interpolation = Interpolation::kNearest;
  return s;
}

/// AutoAugment(policy): 0 ImageNet, 1 CIFAR10, 2 SVHN; nearest filtering, fill 0.
inline TransformStep AutoAugment(int policy = 0) {
  AutoAugmentParams s;
  s.policy = policy;
  s.interpolation = Interpolation::kNearest;
  return s;
}

/// RandomErasing(p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0), after ToTensor;
/// random_value: value="random" (normal draws per element).
inline TransformStep RandomErasing(double p = 0.5, bool random_value = false) {
  RandomErasingParams s;
  s.p = p;
  s.scale = {0.02, 0.33};
  s.ratio = {0.3, 3.3};
  s.erase_mode = random_value ? 1 : 0;
  return s;
}

/// torchvision's reference recipe: RandomResizedCrop(size) + flip + TrivialAugmentWide +
/// ToTensor + Normalize(ImageNet) + RandomErasing(0.1).
inline std::vector<TransformStep> ImageNetTrainTrivialAugment(int size = 176) {
  return {RandomResizedCrop(size), RandomHorizontalFlip(), TrivialAugmentWide(), ToTensor(),
          Normalize(kImageNetMean, kImageNetStd), RandomErasing(0.1)};
}

/// The reference ImageNet training chain: RandomResizedCrop(size) + RandomHorizontalFlip +
/// ToTensor + Normalize(ImageNet).
inline std::vector<TransformStep> ImageNetTrain(int size = 224) {
  return {RandomResizedCrop(size), RandomHorizontalFlip(), ToTensor(),
          Normalize(kImageNetMean, kImageNetStd)};
}

/// The reference ImageNet evaluation chain: Resize(size * 256 / 224) + CenterCrop(size) +
/// ToTensor + Normalize(ImageNet). size 224 gives Resize(256) + CenterCrop(224).
inline std::vector<TransformStep> ImageNetEval(int size = 224) {
  return {Resize(size * 256 / 224), CenterCrop(size), ToTensor(),
          Normalize(kImageNetMean, kImageNetStd)};
}

}  // namespace ringloader::transforms
