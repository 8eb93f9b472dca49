#include "pipeline/views.h"

#include <algorithm>
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
    if (views[v].file < 0) {
      return absl::InvalidArgumentError(absl::StrCat("view ", v, ": file ", views[v].file,
                                                     " is negative"));
    }
    if (views[v].luma && views[v].mask) {
      return absl::InvalidArgumentError(
          absl::StrCat("view ", v, ": luma and mask exclude each other (a label image keeps its "
                       "values)"));
    }
    set.luma.push_back(views[v].luma);
    set.mask.push_back(views[v].mask);
    set.file.push_back(views[v].file);
    set.files = std::max(set.files, views[v].file + 1);
    set.offsets.push_back(set.row_bytes);
    const size_t bytes = pipeline->SampleBytes();
    set.row_bytes += (bytes + kViewAlign - 1) / kViewAlign * kViewAlign;
    set.pipelines.push_back(*std::move(pipeline));
  }
  for (size_t v = 0; v < views.size(); ++v) {
    const bool plain = !views[v].luma && !views[v].mask;
    const auto renders_file = [&](const LoaderOptions::View& w) { return w.file == views[v].file; };
    set.sole.push_back(plain && views.size() > 1 &&
                       std::count_if(views.begin(), views.end(), renders_file) == 1);
  }
  return set;
}

absl::Status NameFile(const absl::Status& cause, const std::string& path) {
  absl::Status status(cause.code(), absl::StrCat(path, ": ", cause.message()));
  status.SetPayload(kSampleFilePayload, absl::Cord(path));
  return status;
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

absl::Status DecodeViews(ImageDecoder& decoder, absl::Span<const EncodedFile> files,
                         const ViewSet& views, uint64_t sample_seed, RenderState& state,
                         uint8_t* dst, int* decodes) {
  if (files.size() < static_cast<size_t>(views.files)) {
    return absl::InvalidArgumentError(absl::StrCat("the sample has ", files.size(),
                                                   " file(s); its views render ", views.files));
  }
  // Per file: its image (RGB or, for label views, as stored) and its luma, made on first use.
  const size_t n = static_cast<size_t>(views.files);
  std::vector<RgbImage> rgb(n), labels(n), gray(n);
  auto in_file = [&](size_t f, const absl::Status& status) {
    if (f == 0 || files[f].path == nullptr) return status;
    return NameFile(status, *files[f].path);
  };
  for (size_t v = 0; v < views.pipelines.size(); ++v) {
    const size_t f = static_cast<size_t>(views.file[v]);
    if (views.sole[v]) {
      // The file's only rendering: decoded straight into the view, as a single-view loader does
      // (a JPEG decodes only the rows and columns the view's crop needs).
      SampleRng rng(ViewSeed(sample_seed, v));
      absl::Status status = decoder.DecodeInto(files[f].data, files[f].size, views.pipelines[v], rng,
                                               dst + views.offsets[v]);
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
    }
    if (views.luma[v] && gray[f].pixels.empty()) ReplicateLuma(decoded, &gray[f]);
    const RgbImage& image = views.luma[v] ? gray[f] : decoded;
    const TransformPipeline& pipeline = views.pipelines[v];
    SampleRng rng(ViewSeed(sample_seed, v));
    const SampleGeometry geometry = pipeline.Plan(image.width, image.height, rng);
    absl::Status status =
        RenderSample(image.pixels.data(), static_cast<size_t>(image.width) * 3, 3,
                     image.width, image.height, pipeline, geometry, rng, state,
                     dst + views.offsets[v]);
    if (!status.ok()) {
      return in_file(f, absl::Status(status.code(), absl::StrCat("view ", v, ": ", status.message())));
    }
  }
  return absl::OkStatus();
}

}  // namespace ringloader
