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

#include <array>
#include <vector>

#include "ringloader/ringloader.h"

namespace ringloader::transforms {

/// torchvision's ImageNet statistics, as used by its reference training scripts.
inline constexpr std::array<float, 3> kImageNetMean = {0.485f, 0.456f, 0.406f};
inline constexpr std::array<float, 3> kImageNetStd = {0.229f, 0.224f, 0.225f};

/// Resize(size): the shorter side becomes `size` (aspect kept); `max_size` caps the longer side
/// (0 = no cap).
inline TransformStep Resize(int size, int max_size = 0) {
  TransformStep s;
  s.kind = TransformStep::Kind::kResize;
  s.size_h = size;
  s.size_w = 0;
  s.max_size = max_size;
  return s;
}

/// Resize((height, width)): exactly this size. Call as Resize({height, width}).
inline TransformStep Resize(const std::array<int, 2>& height_width) {
  TransformStep s;
  s.kind = TransformStep::Kind::kResize;
  s.size_h = height_width[0];
  s.size_w = height_width[1];
  return s;
}

/// CenterCrop(size) or CenterCrop((height, width)); pads with zeros when the image is smaller.
inline TransformStep CenterCrop(int height, int width = 0) {
  TransformStep s;
  s.kind = TransformStep::Kind::kCenterCrop;
  s.size_h = height;
  s.size_w = width > 0 ? width : height;
  return s;
}

/// RandomResizedCrop(size, scale=(0.08, 1.0), ratio=(3/4, 4/3)).
inline TransformStep RandomResizedCrop(int height, int width = 0, double scale_min = 0.08,
                                       double scale_max = 1.0, double ratio_min = 3.0 / 4.0,
                                       double ratio_max = 4.0 / 3.0) {
  TransformStep s;
  s.kind = TransformStep::Kind::kRandomResizedCrop;
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
  TransformStep s;
  s.kind = TransformStep::Kind::kRandomHorizontalFlip;
  s.p = p;
  return s;
}

/// ToTensor(): float values in [0, 1].
inline TransformStep ToTensor() {
  TransformStep s;
  s.kind = TransformStep::Kind::kToTensor;
  return s;
}

/// Normalize(mean, std) per channel; after ToTensor.
inline TransformStep Normalize(const std::array<float, 3>& mean, const std::array<float, 3>& std) {
  TransformStep s;
  s.kind = TransformStep::Kind::kNormalize;
  for (int c = 0; c < 3; ++c) {
    s.mean[c] = mean[c];
    s.std[c] = std[c];
  }
  return s;
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
