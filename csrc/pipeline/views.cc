#include "pipeline/views.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_util.h"
#include "transform/random.h"

namespace ringloader {

absl::StatusOr<ViewSet> ViewSet::Create(const std::vector<LoaderOptions::View>& views,
                                        Layout layout) {
  ViewSet set;
  for (size_t v = 0; v < views.size(); ++v) {
    absl::StatusOr<TransformPipeline> pipeline =
        TransformPipeline::Create(views[v].transform, views[v].dtype, layout, false);
    if (!pipeline.ok()) {
      return absl::Status(pipeline.status().code(),
                          absl::StrCat("view ", v, ": ", pipeline.status().message()));
    }
    if (views[v].share_geometry) {
      std::string why;
      if (v == 0) {
        why = "view 0 draws its own geometry (share_geometry is for the views after it)";
      } else if (pipeline->has_image_steps() || pipeline->has_erasing()) {
        size_t i = pipeline->image_begin();
        if (!pipeline->has_image_steps()) {
          while (pipeline->steps()[i].kind != TransformStep::Kind::kRandomErasing) ++i;
        }
        why = absl::StrCat("its step ", i, " (", KindInfo(pipeline->steps()[i].kind).name,
                           ") draws on its own: a view sharing view 0's geometry applies "
                           "geometric and output steps only");
      } else {
        why = GeometryDrawsDiffer(set.pipelines[0], *pipeline);
      }
      if (!why.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("view ", v, ": cannot share view 0's geometric draws: ", why));
      }
    }
    set.luma.push_back(views[v].luma);
    set.share_geometry.push_back(views[v].share_geometry);
    set.offsets.push_back(set.row_bytes);
    size_t bytes = pipeline->SampleBytes();
    set.geometry_offsets.push_back(-1);
    if (views[v].geometry) {
      const std::string why = UnrecordedGeometry(*pipeline);
      if (!why.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("view ", v, ": its geometry cannot be recorded: ", why));
      }
      bytes = (bytes + sizeof(double) - 1) / sizeof(double) * sizeof(double);
      set.geometry_offsets.back() = static_cast<int64_t>(set.row_bytes + bytes);
      bytes += kGeometryFields * sizeof(double);
    }
    set.row_bytes += (bytes + kViewAlign - 1) / kViewAlign * kViewAlign;
    set.pipelines.push_back(*std::move(pipeline));
  }
  return set;
}

void WriteGeometry(const SampleGeometry& g, int src_w, int src_h, uint8_t* dst) {
  double out[kGeometryFields];
  out[kGeoSrcW] = src_w;
  out[kGeoSrcH] = src_h;
  out[kGeoLeft] = std::min(g.x0, g.x1);
  out[kGeoRight] = std::max(g.x0, g.x1);
  out[kGeoTop] = std::min(g.y0, g.y1);
  out[kGeoBottom] = std::max(g.y0, g.y1);
  out[kGeoOutW] = g.out_w;
  out[kGeoOutH] = g.out_h;
  out[kGeoHFlip] = g.x0 > g.x1 ? 1.0 : 0.0;
  out[kGeoVFlip] = g.y0 > g.y1 ? 1.0 : 0.0;
  out[kGeoKeyDx] = g.key_dx;
  out[kGeoKeyDy] = g.key_dy;
  std::memcpy(dst, out, sizeof(out));
}

std::string UnrecordedGeometry(const TransformPipeline& pipeline) {
  using Kind = TransformStep::Kind;
  for (size_t i = pipeline.image_begin(); i < pipeline.image_end(); ++i) {
    switch (pipeline.steps()[i].kind) {
      case Kind::kColorJitter:
      case Kind::kGrayscale:
      case Kind::kGaussianBlur:
        break;
      case Kind::kAugOp: {
        // The single-op steps (RandomPosterize...) only change values unless they shear,
        // translate or rotate.
        const AugOp op = pipeline.steps()[i].aug_op;
        if (op == AugOp::kShearX || op == AugOp::kShearY || op == AugOp::kTranslateX ||
            op == AugOp::kTranslateY || op == AugOp::kRotate) {
          return absl::StrCat("step ", i, " (", KindInfo(Kind::kAugOp).name,
                              ") moves pixels after the resample");
        }
        break;
      }
      default:
        return absl::StrCat("step ", i, " (", KindInfo(pipeline.steps()[i].kind).name,
                            ") moves pixels after the resample");
    }
  }
  return "";
}

std::string GeometryDrawsDiffer(const TransformPipeline& first, const TransformPipeline& view) {
  const size_t n = first.image_begin(), m = view.image_begin();
  if (n != m) {
    return absl::StrCat("it has ", m, " geometric steps, view 0 has ", n);
  }
  for (size_t i = 0; i < n; ++i) {
    const TransformStep& a = first.steps()[i];
    const TransformStep& b = view.steps()[i];
    const bool same =
        a.kind == b.kind && a.size_h == b.size_h && a.size_w == b.size_w &&
        a.max_size == b.max_size && a.scale_min == b.scale_min && a.scale_max == b.scale_max &&
        a.ratio_min == b.ratio_min && a.ratio_max == b.ratio_max && a.p == b.p &&
        std::equal(a.pad, a.pad + 4, b.pad) && a.pad_if_needed == b.pad_if_needed;
    if (!same) {
      return absl::StrCat("its step ", i, " (", KindInfo(b.kind).name, ") is not view 0's (",
                          KindInfo(a.kind).name, ") with the same parameters");
    }
  }
  return "";
}

uint64_t ViewSeed(uint64_t sample_seed, size_t view) {
  return view == 0 ? sample_seed : Mix64(sample_seed ^ Mix64(0x76696577ull + view));
}

void ReplicateLuma(const RgbImage& rgb, RgbImage* out) {
  out->width = rgb.width;
  out->height = rgb.height;
  out->pixels.resize(rgb.pixels.size());
  const uint8_t* in = rgb.pixels.data();
  uint8_t* o = out->pixels.data();
  for (size_t i = 0; i < rgb.pixels.size(); i += 3) {
    // Pillow's L24 (Convert.c): 16-bit fixed-point 0.299 R + 0.587 G + 0.114 B, rounded.
    const uint32_t l = (in[i] * 19595u + in[i + 1] * 38470u + in[i + 2] * 7471u + 0x8000u) >> 16;
    o[i] = o[i + 1] = o[i + 2] = static_cast<uint8_t>(l);
  }
}

absl::Status DecodeViews(ImageDecoder& decoder, const uint8_t* data, size_t size,
                         const ViewSet& views, uint64_t sample_seed, RenderState& state,
                         uint8_t* dst) {
  if (views.pipelines.size() == 1 && !views.luma[0]) {
    // One view (a Joint's image with its geometry recorded): the decoder's own path, with its
    // region-of-interest and scaled JPEG decodes. Plan is deterministic in the seed and the
    // header's size, so planning again here gives the geometry DecodeInto renders.
    const TransformPipeline& pipeline = views.pipelines[0];
    if (views.geometry_offsets[0] >= 0) {
      RL_ASSIGN_OR_RETURN(const ImageInfo info, decoder.ReadInfo(data, size));
      SampleRng plan_rng(ViewSeed(sample_seed, 0));
      WriteGeometry(pipeline.Plan(info.width, info.height, plan_rng), info.width, info.height,
                    dst + views.geometry_offsets[0]);
    }
    SampleRng rng(ViewSeed(sample_seed, 0));
    return decoder.DecodeInto(data, size, pipeline, rng, dst + views.offsets[0]);
  }
  RL_ASSIGN_OR_RETURN(const RgbImage rgb, decoder.DecodeFull(data, size));
  RgbImage gray;
  for (bool luma : views.luma) {
    if (luma && gray.pixels.empty()) ReplicateLuma(rgb, &gray);
  }
  const size_t stride = static_cast<size_t>(rgb.width) * 3;
  for (size_t v = 0; v < views.pipelines.size(); ++v) {
    const RgbImage& image = views.luma[v] ? gray : rgb;
    const TransformPipeline& pipeline = views.pipelines[v];
    // A view sharing view 0's geometry replays view 0's draws; it has no later draws to make.
    SampleRng rng(ViewSeed(sample_seed, views.share_geometry[v] ? 0 : v));
    const SampleGeometry geometry = pipeline.Plan(image.width, image.height, rng);
    if (views.geometry_offsets[v] >= 0) {
      WriteGeometry(geometry, image.width, image.height, dst + views.geometry_offsets[v]);
    }
    absl::Status status = RenderSample(image.pixels.data(), stride, 3, image.width, image.height,
                                       pipeline, geometry, rng, state, dst + views.offsets[v]);
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("view ", v, ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace ringloader
