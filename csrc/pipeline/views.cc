#include "pipeline/views.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_util.h"
#include "transform/augment.h"
#include "transform/random.h"

namespace ringloader {

absl::StatusOr<ViewSet> ViewSet::Create(const std::vector<LoaderOptions::View>& views,
                                        Layout layout) {
  ViewSet set;
  for (size_t v = 0; v < views.size(); ++v) {
    std::vector<TransformStep> steps = views[v].transform;
    int fill = 0;
    if (views[v].mask && views[v].share_geometry) {
      // A Joint's mask: its padding fuses into the shared geometry (alone, a label view pads
      // with its fill in the image stage).
      const std::string why = TakeMaskFill(&steps, &fill);
      if (!why.empty()) return absl::InvalidArgumentError(absl::StrCat("view ", v, ": ", why));
    }
    set.mask_fill.push_back(fill);
    absl::StatusOr<TransformPipeline> pipeline =
        TransformPipeline::Create(std::move(steps), views[v].dtype, layout, views[v].variable);
    if (!pipeline.ok()) {
      return absl::Status(pipeline.status().code(),
                          absl::StrCat("view ", v, ": ", pipeline.status().message()));
    }
    if (views[v].file < 0) {
      return absl::InvalidArgumentError(absl::StrCat("view ", v, ": file ", views[v].file,
                                                     " is negative"));
    }
    if (views[v].luma && views[v].mask) {
      return absl::InvalidArgumentError(
          absl::StrCat("view ", v, ": luma and mask exclude each other (a label image keeps its "
                       "values)"));
    }
    if (views[v].share_geometry) {
      std::string why;
      if (v == 0) {
        why = "view 0 draws its own geometry (share_geometry is for the views after it)";
      } else if (pipeline->has_image_steps() || pipeline->has_erasing()) {
        size_t i = pipeline->image_begin();
        if (!pipeline->has_image_steps()) {
          while (pipeline->steps()[i].kind() != TransformStep::Kind::kRandomErasing) ++i;
        }
        why = absl::StrCat("its step ", i, " (", KindInfo(pipeline->steps()[i].kind()).name,
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
    set.mask.push_back(views[v].mask);
    set.file.push_back(views[v].file);
    set.files = std::max(set.files, views[v].file + 1);
    if (views[v].tensor_nearest && !views[v].mask) {
      return absl::InvalidArgumentError(
          absl::StrCat("view ", v, ": tensor_nearest is for label images (mask) only"));
    }
    set.share_geometry.push_back(views[v].share_geometry);
    set.tensor_nearest.push_back(views[v].tensor_nearest);
    set.offsets.push_back(set.row_bytes);
    set.variable.push_back(!pipeline->fixed_size());
    size_t bytes = set.variable.back() ? kOutputRecordFields * sizeof(int64_t) : pipeline->SampleBytes();
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
  for (size_t v = 0; v < views.size(); ++v) {
    const bool plain = !views[v].luma && !views[v].mask;
    const auto renders_file = [&](const LoaderOptions::View& w) { return w.file == views[v].file; };
    set.sole.push_back(plain && std::count_if(views.begin(), views.end(), renders_file) == 1);
  }
  return set;
}

std::string TakeMaskFill(std::vector<TransformStep>* steps, int* fill) {
  using Kind = TransformStep::Kind;
  *fill = 0;
  std::string zero_pads;  // a step that pads with 0: CenterCrop (larger than the image), a Pad
  for (TransformStep& step : *steps) {
    if (step.kind() == Kind::kCenterCrop) {
      if (zero_pads.empty()) zero_pads = KindInfo(step.kind()).name;
      continue;
    }
    PaddingParams* padding = step.get_if<PadParams>();
    if (RandomCropParams* crop = step.get_if<RandomCropParams>();
        crop != nullptr &&
        (crop->pad_if_needed || crop->pad[0] || crop->pad[1] || crop->pad[2] || crop->pad[3])) {
      padding = crop;
    }
    if (padding == nullptr || padding->pad_mode != PadMode::kConstant) continue;
    PaddingParams& s = *padding;
    const float f = s.fill[0];
    if (f == 0.f && s.fill[1] == 0.f && s.fill[2] == 0.f) {
      if (zero_pads.empty()) zero_pads = KindInfo(step.kind()).name;
      continue;
    }
    if (s.fill[1] != f || s.fill[2] != f || !(f >= 0.f && f <= 255.f) || f != std::floor(f)) {
      return absl::StrCat("a label image pads with one integer level in 0..255, not (",
                          s.fill[0], ", ", s.fill[1], ", ", s.fill[2], ")");
    }
    if (*fill > 0 && *fill != static_cast<int>(f)) {
      return absl::StrCat("a label image pads with one fill, not ", *fill, " and ", f);
    }
    *fill = static_cast<int>(f);
    std::fill(s.fill, s.fill + 3, 0.f);  // fused as zero padding, then set (DecodeViews)
  }
  if (*fill > 0 && !zero_pads.empty()) {
    return absl::StrCat("a label image that pads with ", *fill, " cannot also pad with 0 (",
                        zero_pads, ")");
  }
  return "";
}

void FillMaskPadding(uint8_t* view, int height, int width, Layout layout, uint8_t fill) {
  const size_t n = static_cast<size_t>(height) * static_cast<size_t>(width);
  if (layout == Layout::kCHW) {
    uint8_t* c0 = view;
    uint8_t* c1 = view + n;
    uint8_t* c2 = view + 2 * n;
    for (size_t i = 0; i < n; ++i) {
      if (c2[i] == 0) c0[i] = fill;
      c1[i] = c2[i] = c0[i];
    }
  } else {
    for (size_t i = 0; i < 3 * n; i += 3) {
      if (view[i + 2] == 0) view[i] = fill;
      view[i + 1] = view[i + 2] = view[i];
    }
  }
}

absl::Status NameFile(const absl::Status& cause, const std::string& path) {
  absl::Status status(cause.code(), absl::StrCat(path, ": ", cause.message()));
  status.SetPayload(kSampleFilePayload, absl::Cord(path));
  return status;
}

uint64_t RowDrawSeed(uint64_t sample_seed) {
  return Mix64(sample_seed ^ Mix64(0x696f7563726f70ull)) >> 11;  // 53 bits
}

void WriteGeometry(const SampleGeometry& g, int src_w, int src_h, uint64_t sample_seed,
                   const TransformPipeline& pipeline, SampleRng rng, uint8_t* dst) {
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
  out[kGeoDrawSeed] = static_cast<double>(RowDrawSeed(sample_seed));
  // The first image step's draws, made as it makes them on the rendered output (nothing draws
  // between the plan and it; UnrecordedGeometry lets no other step move pixels).
  AffineDraw d;
  if (pipeline.image_begin() < pipeline.image_end()) {
    const TransformStep& first = pipeline.steps()[pipeline.image_begin()];
    if (const auto* rotation = first.get_if<RandomRotationParams>()) {
      d.angle = DrawRandomRotation(*rotation, rng);
    } else if (const auto* affine = first.get_if<RandomAffineParams>()) {
      int out_h = 0, out_w = 0;
      pipeline.OutputSize(g, &out_h, &out_w);
      d = DrawRandomAffine(*affine, rng, out_w, out_h);
    }
  }
  out[kGeoAngle] = d.angle;
  out[kGeoTranslateX] = d.translate_x;
  out[kGeoTranslateY] = d.translate_y;
  out[kGeoScale] = d.scale;
  out[kGeoShearX] = d.shear_x;
  out[kGeoShearY] = d.shear_y;
  std::memcpy(dst, out, sizeof(out));
}

std::string UnrecordedGeometry(const TransformPipeline& pipeline) {
  using Kind = TransformStep::Kind;
  for (size_t i = pipeline.image_begin(); i < pipeline.image_end(); ++i) {
    switch (pipeline.steps()[i].kind()) {
      case Kind::kColorJitter:
      case Kind::kGrayscale:
      case Kind::kGaussianBlur:
        break;
      case Kind::kRandomRotation:
      case Kind::kRandomAffine:
        // The first image step: its draws are recorded (WriteGeometry); a later one draws after
        // other steps.
        if (i == pipeline.image_begin()) break;
        return absl::StrCat("step ", i, " (", KindInfo(pipeline.steps()[i].kind()).name,
                            ") moves pixels after other image steps (a rotation or affine is "
                            "recorded as the first)");
      case Kind::kAugOp: {
        // The single-op steps (RandomPosterize...) only change values unless they shear,
        // translate or rotate.
        const AugOp op = pipeline.steps()[i].get<AugOpParams>().aug_op;
        if (op == AugOp::kShearX || op == AugOp::kShearY || op == AugOp::kTranslateX ||
            op == AugOp::kTranslateY || op == AugOp::kRotate) {
          return absl::StrCat("step ", i, " (", KindInfo(Kind::kAugOp).name,
                              ") moves pixels after the resample");
        }
        break;
      }
      default:
        return absl::StrCat("step ", i, " (", KindInfo(pipeline.steps()[i].kind()).name,
                            ") moves pixels after the resample");
    }
  }
  return "";
}

// The geometric steps of `pipeline`: those before its image stage, less its output steps (a
// chain without image steps has its image stage begin at its first step after ToTensor).
static size_t GeometricSteps(const TransformPipeline& pipeline) {
  size_t n = 0;
  while (n < pipeline.image_begin() &&
         KindInfo(pipeline.steps()[n].kind()).stage != StepStage::kOutput) {
    ++n;
  }
  return n;
}

// Whether geometric steps `a` and `b` draw the same and give the same geometry (their filters
// and fills may differ: a mask view resamples with nearest).
static bool SameDraws(const TransformStep& a, const TransformStep& b) {
  if (a.kind() != b.kind()) return false;
  const auto same_padding = [](const PaddingParams& x, const PaddingParams& y) {
    return std::equal(x.pad, x.pad + 4, y.pad);
  };
  switch (a.kind()) {
    case TransformStep::Kind::kResize: {
      const ResizeParams &x = a.get<ResizeParams>(), &y = b.get<ResizeParams>();
      return x.size_h == y.size_h && x.size_w == y.size_w && x.max_size == y.max_size &&
             x.size_max == y.size_max && x.size_choices == y.size_choices &&
             x.scale_jitter == y.scale_jitter;
    }
    case TransformStep::Kind::kCenterCrop: {
      const CenterCropParams &x = a.get<CenterCropParams>(), &y = b.get<CenterCropParams>();
      return x.size_h == y.size_h && x.size_w == y.size_w;
    }
    case TransformStep::Kind::kRandomResizedCrop: {
      const RandomResizedCropParams &x = a.get<RandomResizedCropParams>(),
                                    &y = b.get<RandomResizedCropParams>();
      return x.size_h == y.size_h && x.size_w == y.size_w && x.scale_min == y.scale_min &&
             x.scale_max == y.scale_max && x.ratio_min == y.ratio_min &&
             x.ratio_max == y.ratio_max;
    }
    case TransformStep::Kind::kRandomHorizontalFlip:
      return a.get<HorizontalFlipParams>().p == b.get<HorizontalFlipParams>().p;
    case TransformStep::Kind::kRandomVerticalFlip:
      return a.get<VerticalFlipParams>().p == b.get<VerticalFlipParams>().p;
    case TransformStep::Kind::kRandomCrop: {
      const RandomCropParams &x = a.get<RandomCropParams>(), &y = b.get<RandomCropParams>();
      return x.size_h == y.size_h && x.size_w == y.size_w && same_padding(x, y) &&
             x.pad_if_needed == y.pad_if_needed;
    }
    case TransformStep::Kind::kPad: {
      const PadParams &x = a.get<PadParams>(), &y = b.get<PadParams>();
      return same_padding(x, y) && x.zoom_out == y.zoom_out && x.p == y.p;
    }
    default:
      return true;  // draws nothing that moves pixels
  }
}

std::string GeometryDrawsDiffer(const TransformPipeline& first, const TransformPipeline& view) {
  const size_t n = GeometricSteps(first), m = GeometricSteps(view);
  if (n != m) {
    return absl::StrCat("it has ", m, " geometric steps, view 0 has ", n);
  }
  for (size_t i = 0; i < n; ++i) {
    const TransformStep& a = first.steps()[i];
    const TransformStep& b = view.steps()[i];
    if (!SameDraws(a, b)) {
      return absl::StrCat("its step ", i, " (", KindInfo(b.kind()).name, ") is not view 0's (",
                          KindInfo(a.kind()).name, ") with the same parameters");
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

// A variable view's buffer for an output of `geometry`'s size, its record written at `record`.
static absl::StatusOr<uint8_t*> OutputOf(const TransformPipeline& pipeline, const SampleGeometry& geometry,
                                         const OutputSink* sink, uint8_t* record) {
  if (sink == nullptr || !*sink) {
    return absl::FailedPreconditionError("a variable-size view needs an output sink");
  }
  int h = 0, w = 0;
  pipeline.OutputSize(geometry, &h, &w);
  const size_t bytes = pipeline.OutputBytes(geometry);
  RL_ASSIGN_OR_RETURN(const OutputBuffer buffer, (*sink)(h, w, pipeline.dtype(), bytes));
  const int64_t fields[kOutputRecordFields] = {static_cast<int64_t>(buffer.id), h, w,
                                               static_cast<int64_t>(bytes)};
  std::memcpy(record, fields, sizeof(fields));
  return buffer.data;
}

absl::Status DecodeViews(ImageDecoder& decoder, absl::Span<const EncodedFile> files,
                         const ViewSet& views, uint64_t sample_seed, RenderState& state,
                         uint8_t* dst, int* decodes, const OutputSink* sink) {
  if (files.size() < static_cast<size_t>(views.files)) {
    return absl::InvalidArgumentError(absl::StrCat("the sample has ", files.size(),
                                                   " file(s); its views render ", views.files));
  }
  // Per file: its image (RGB or, for label views, as stored) and its luma, made on first use.
  const size_t n = static_cast<size_t>(views.files);
  std::vector<RgbImage> rgb(n), labels(n), gray(n);
  // A file some label view pads with a fill other than 0 (ViewSet::mask_fill).
  auto marks_padding = [&](size_t f) {
    for (size_t w = 0; w < views.pipelines.size(); ++w) {
      if (views.mask[w] && static_cast<size_t>(views.file[w]) == f && views.mask_fill[w] > 0) {
        return true;
      }
    }
    return false;
  };
  auto in_file = [&](size_t f, const absl::Status& status) {
    if (f == 0 || files[f].path == nullptr) return status;
    return NameFile(status, *files[f].path);
  };
  for (size_t v = 0; v < views.pipelines.size(); ++v) {
    const size_t f = static_cast<size_t>(views.file[v]);
    if (views.sole[v]) {
      // The file's only rendering: decoded straight into the view, as a single-view loader does
      // (a JPEG decodes only the rows and columns the view's crop needs).
      // Planning is deterministic in the seed and the header's size, so planning here gives
      // the geometry DecodeInto renders (recorded for a Joint's boxes).
      uint8_t* out = dst + views.offsets[v];
      if (views.geometry_offsets[v] >= 0 || views.variable[v]) {
        absl::StatusOr<ImageInfo> info = decoder.ReadInfo(files[f].data, files[f].size);
        if (!info.ok()) return in_file(f, info.status());
        SampleRng plan_rng(ViewSeed(sample_seed, v));
        const SampleGeometry planned = views.pipelines[v].Plan(info->width, info->height, plan_rng);
        if (views.geometry_offsets[v] >= 0) {
          WriteGeometry(planned, info->width, info->height, sample_seed, views.pipelines[v],
                        plan_rng, dst + views.geometry_offsets[v]);
        }
        if (views.variable[v]) {
          if (planned.error != nullptr) return in_file(f, absl::InvalidArgumentError(planned.error));
          absl::StatusOr<uint8_t*> buffer = OutputOf(views.pipelines[v], planned, sink, out);
          if (!buffer.ok()) return in_file(f, buffer.status());
          out = *buffer;
        }
      }
      SampleRng rng(ViewSeed(sample_seed, v));
      absl::Status status = decoder.DecodeInto(files[f].data, files[f].size, views.pipelines[v], rng, out);
      if (!status.ok()) return in_file(f, status);
      if (decodes != nullptr) ++*decodes;
      continue;
    }
    RgbImage& decoded = views.mask[v] ? labels[f] : rgb[f];
    if (decoded.pixels.empty()) {
      absl::StatusOr<RgbImage> image = views.mask[v]
                                           ? decoder.DecodeLabels(files[f].data, files[f].size)
                                           : decoder.DecodeFull(files[f].data, files[f].size);
      if (!image.ok()) return in_file(f, image.status());
      decoded = *std::move(image);
      if (decodes != nullptr) ++*decodes;
      if (views.mask[v] && marks_padding(f)) {
        // Channel 2 marks the label image's own pixels (255): after the render, the pixels
        // where it reads 0 are padding, set to the view's fill (FillMaskPadding).
        for (size_t i = 2; i < decoded.pixels.size(); i += 3) decoded.pixels[i] = 255;
      }
    }
    if (views.luma[v] && gray[f].pixels.empty()) ReplicateLuma(decoded, &gray[f]);
    const RgbImage& image = views.luma[v] ? gray[f] : decoded;
    const TransformPipeline& pipeline = views.pipelines[v];
    // A view sharing view 0's geometry replays view 0's draws; it has no later draws to make.
    SampleRng rng(ViewSeed(sample_seed, views.share_geometry[v] ? 0 : v));
    SampleGeometry geometry = pipeline.Plan(image.width, image.height, rng);
    geometry.tensor_nearest = views.tensor_nearest[v];
    if (views.geometry_offsets[v] >= 0) {
      WriteGeometry(geometry, image.width, image.height, sample_seed, pipeline, rng,
                    dst + views.geometry_offsets[v]);
    }
    uint8_t* out = dst + views.offsets[v];
    if (views.variable[v]) {
      if (geometry.error != nullptr) return in_file(f, absl::InvalidArgumentError(geometry.error));
      absl::StatusOr<uint8_t*> buffer = OutputOf(pipeline, geometry, sink, out);
      if (!buffer.ok()) return in_file(f, buffer.status());
      out = *buffer;
    }
    absl::Status status =
        RenderSample(image.pixels.data(), static_cast<size_t>(image.width) * 3, 3,
                     image.width, image.height, pipeline, geometry, rng, state, out);
    if (!status.ok()) {
      return in_file(f, absl::Status(status.code(), absl::StrCat("view ", v, ": ", status.message())));
    }
    if (views.mask[v] && marks_padding(f)) {
      int out_h = 0, out_w = 0;
      pipeline.OutputSize(geometry, &out_h, &out_w);
      FillMaskPadding(out, out_h, out_w, pipeline.layout(),
                      static_cast<uint8_t>(views.mask_fill[v]));
    }
  }
  return absl::OkStatus();
}

}  // namespace ringloader
