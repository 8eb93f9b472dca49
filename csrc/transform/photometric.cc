#include "transform/photometric.h"

#include <algorithm>
#include <array>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "transform/augment.h"

namespace ringloader {

namespace {
using T = TransformStep;
}  // namespace

void DrawPhotometric(const TransformStep& s, SampleRng& rng, PhotometricDraws* draws) {
  // v2: {key: uniform(lo, hi) if rand < p else None for brightness, contrast, saturation, hue},
  // then contrast_before = rand < 0.5, then randperm(3) if rand < p.
  for (int k = T::kBrightness; k <= T::kHue; ++k) {
    draws->apply[k] = rng.Uniform() < s.p;
    if (draws->apply[k]) draws->factor[k] = rng.Uniform(s.range[k][0], s.range[k][1]);
  }
  draws->contrast_before = rng.Uniform() < 0.5;
  int* perm = draws->permutation;
  perm[0] = 0, perm[1] = 1, perm[2] = 2;
  if (rng.Uniform() < s.p) {
    for (int i = 2; i > 0; --i) std::swap(perm[i], perm[rng.RandInt(0, i + 1)]);
  }
}

void ApplyPhotometric(const PhotometricDraws& d, RgbView img) {
  if (d.apply[T::kBrightness]) AdjustBrightness(img, d.factor[T::kBrightness]);
  if (d.apply[T::kContrast] && d.contrast_before) AdjustContrast(img, d.factor[T::kContrast]);
  if (d.apply[T::kSaturation]) AdjustSaturation(img, d.factor[T::kSaturation]);
  if (d.apply[T::kHue]) AdjustHue(img, d.factor[T::kHue]);
  if (d.apply[T::kContrast] && !d.contrast_before) AdjustContrast(img, d.factor[T::kContrast]);
  const int* perm = d.permutation;
  if (perm[0] == 0 && perm[1] == 1 && perm[2] == 2) return;
  for (int y = 0; y < img.height; ++y) {
    uint8_t* p = img.data + static_cast<size_t>(y) * img.stride;
    for (int x = 0; x < img.width; ++x, p += 3) {
      const uint8_t in[3] = {p[0], p[1], p[2]};
      p[0] = in[perm[0]], p[1] = in[perm[1]], p[2] = in[perm[2]];
    }
  }
}

absl::Status ParseColorJitter(StepParamReader& r, TransformStep* s) {
  std::vector<std::optional<std::array<double, 2>>> ranges;
  if (r.Pairs("ranges", &ranges)) {
    if (ranges.size() > 4) return absl::InvalidArgumentError("at most 4 parameter ranges");
    for (size_t i = 0; i < ranges.size(); ++i) {
      if (!ranges[i]) continue;
      s->range[i][0] = (*ranges[i])[0];
      s->range[i][1] = (*ranges[i])[1];
      s->has_range[i] = true;
    }
  }
  r.Int("photometric", &s->photometric);
  r.Double("p", &s->p);
  if (s->photometric < 0 || s->photometric > 2) {
    return absl::InvalidArgumentError("photometric must be 0, 1 or 2");
  }
  if (s->photometric > 0) {
    if (!(s->p >= 0.0 && s->p <= 1.0)) {
      return absl::InvalidArgumentError("RandomPhotometricDistort: p must be in [0, 1]");
    }
    for (int k = T::kBrightness; k <= T::kHue; ++k) {
      if (!s->has_range[k]) {
        return absl::InvalidArgumentError(
            "RandomPhotometricDistort needs the brightness, contrast, saturation and hue ranges");
      }
    }
  }
  return absl::OkStatus();
}

std::string DescribeColorJitter(const TransformStep& s) {
  if (s.photometric == 0) return "ColorJitter";
  return absl::StrFormat("RandomPhotometricDistort(p=%g%s)", s.p,
                         s.photometric == 2 ? ", before the padding" : "");
}

absl::Status ApplyColorJitterStep(const TransformStep& s, SampleRng& rng, AugmentScratch& scratch,
                                  RgbView* img) {
  if (s.photometric == 0) return ApplyColorJitter(s, rng, scratch, img);
  PhotometricDraws draws;
  DrawPhotometric(s, rng, &draws);
  RgbView part = *img;
  if (s.photometric == 2) {
    // Before the padding in the chain: v2 distorts the image, then pads it with the fill.
    const int x0 = std::clamp(scratch.shown[0], 0, img->width);
    const int y0 = std::clamp(scratch.shown[1], 0, img->height);
    const int x1 = std::clamp(scratch.shown[2], x0, img->width);
    const int y1 = std::clamp(scratch.shown[3], y0, img->height);
    part.data = img->data + static_cast<size_t>(y0) * img->stride + static_cast<size_t>(x0) * 3;
    part.width = x1 - x0;
    part.height = y1 - y0;
  }
  ApplyPhotometric(draws, part);
  return absl::OkStatus();
}

}  // namespace ringloader
