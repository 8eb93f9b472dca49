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
using D = PhotometricDraws;

/// The adjustments' ranges in PhotometricDraws' order.
std::array<const std::optional<Range>*, 4> Adjustments(const ColorJitterParams& s) {
  return {&s.brightness, &s.contrast, &s.saturation, &s.hue};
}
}  // namespace

void DrawPhotometric(const ColorJitterParams& s, SampleRng& rng, PhotometricDraws* draws) {
  // v2: {key: uniform(lo, hi) if rand < p else None for brightness, contrast, saturation, hue},
  // then contrast_before = rand < 0.5, then randperm(3) if rand < p.
  const auto ranges = Adjustments(s);
  for (int k = D::kBrightness; k <= D::kHue; ++k) {
    draws->apply[k] = rng.Uniform() < s.p;
    // Parse made sure every range is set when photometric is.
    if (draws->apply[k]) draws->factor[k] = rng.Uniform((*ranges[k])->lo, (*ranges[k])->hi);
  }
  draws->contrast_before = rng.Uniform() < 0.5;
  int* perm = draws->permutation;
  perm[0] = 0, perm[1] = 1, perm[2] = 2;
  if (rng.Uniform() < s.p) {
    for (int i = 2; i > 0; --i) std::swap(perm[i], perm[rng.RandInt(0, i + 1)]);
  }
}

void ApplyPhotometric(const PhotometricDraws& d, RgbView img) {
  if (d.apply[D::kBrightness]) AdjustBrightness(img, d.factor[D::kBrightness]);
  if (d.apply[D::kContrast] && d.contrast_before) AdjustContrast(img, d.factor[D::kContrast]);
  if (d.apply[D::kSaturation]) AdjustSaturation(img, d.factor[D::kSaturation]);
  if (d.apply[D::kHue]) AdjustHue(img, d.factor[D::kHue]);
  if (d.apply[D::kContrast] && !d.contrast_before) AdjustContrast(img, d.factor[D::kContrast]);
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

absl::Status ParseColorJitter(StepParamReader& r, ColorJitterParams* s) {
  std::optional<Range>* named[] = {&s->brightness, &s->contrast, &s->saturation, &s->hue};
  if (absl::Status status = ReadRanges(r, named); !status.ok()) return status;
  r.Int("photometric", &s->photometric);
  r.Double("p", &s->p);
  if (s->photometric < 0 || s->photometric > 2) {
    return absl::InvalidArgumentError("photometric must be 0, 1 or 2");
  }
  if (s->photometric > 0) {
    if (!(s->p >= 0.0 && s->p <= 1.0)) {
      return absl::InvalidArgumentError("RandomPhotometricDistort: p must be in [0, 1]");
    }
    for (const std::optional<Range>* range : named) {
      if (!*range) {
        return absl::InvalidArgumentError(
            "RandomPhotometricDistort needs the brightness, contrast, saturation and hue ranges");
      }
    }
  }
  return absl::OkStatus();
}

std::string DescribeColorJitter(const ColorJitterParams& s) {
  if (s.photometric == 0) return "ColorJitter";
  return absl::StrFormat("RandomPhotometricDistort(p=%g%s)", s.p,
                         s.photometric == 2 ? ", before the padding" : "");
}

absl::Status ApplyColorJitterStep(const ColorJitterParams& s, SampleRng& rng,
                                  AugmentScratch& scratch, RgbView* img) {
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
