#include "transform/render.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace ringloader {

namespace {

/// Which output indices along one axis lie outside the shown window [show_lo, show_hi) of
/// source coordinates (padding), the output spanning [c0, c1) (c0 > c1: mirrored).
void PaddedIndices(double c0, double c1, int out, double show_lo, double show_hi,
                   std::vector<uint8_t>* padded) {
  padded->assign(static_cast<size_t>(std::max(out, 0)), 0);
  for (int i = 0; i < out; ++i) {
    const double centre = c0 + (i + 0.5) * (c1 - c0) / out;
    (*padded)[i] = !(centre >= show_lo && centre < show_hi);
  }
}

/// Sets the padding of a fused Pad/RandomCrop with a non-zero fill (SampleGeometry::has_fill)
/// to that fill, in the 8-bit HWC image the geometric stage wrote.
void PaintFill(const SampleGeometry& g, RgbView* img) {
  std::vector<uint8_t> pad_x, pad_y;
  PaddedIndices(g.x0, g.x1, img->width, g.show_x0, g.show_x1, &pad_x);
  PaddedIndices(g.y0, g.y1, img->height, g.show_y0, g.show_y1, &pad_y);
  // A row of fill pixels, copied over each padded row and each padded run of the other rows.
  const size_t row_bytes = static_cast<size_t>(img->width) * 3;
  std::vector<uint8_t> fill(row_bytes);
  for (size_t i = 0; i < row_bytes; i += 3) std::copy(g.fill, g.fill + 3, fill.data() + i);
  for (int y = 0; y < img->height; ++y) {
    uint8_t* row = img->data + static_cast<size_t>(y) * img->stride;
    if (pad_y[y]) {
      std::memcpy(row, fill.data(), row_bytes);
      continue;
    }
    for (int x = 0; x < img->width;) {
      int end = x;
      while (end < img->width && pad_x[end] == pad_x[x]) ++end;
      if (pad_x[x]) std::memcpy(row + static_cast<size_t>(x) * 3, fill.data(), static_cast<size_t>(end - x) * 3);
      x = end;
    }
  }
}

/// The output pixels showing the source, [x0, x1) x [y0, y1) into shown[4] (AugmentScratch):
/// the padding lies outside (the shown window is one interval per axis).
void ShownRect(const SampleGeometry& g, int width, int height, int shown[4]) {
  std::vector<uint8_t> pad_x, pad_y;
  PaddedIndices(g.x0, g.x1, width, g.show_x0, g.show_x1, &pad_x);
  PaddedIndices(g.y0, g.y1, height, g.show_y0, g.show_y1, &pad_y);
  const auto span = [](const std::vector<uint8_t>& padded, int* lo, int* hi) {
    const auto first = std::find(padded.begin(), padded.end(), 0);
    *lo = static_cast<int>(first - padded.begin());
    *hi = static_cast<int>(padded.rend() - std::find(padded.rbegin(), padded.rend(), 0));
    *hi = std::max(*hi, *lo);
  };
  span(pad_x, &shown[0], &shown[2]);
  span(pad_y, &shown[1], &shown[3]);
}

/// Whether the image steps leave every pixel outside the shown window as the render painted
/// it: each is a RandomPhotometricDistort on the shown pixels alone (photometric 2, the ssd
/// preset's before its zoom-out), so the padding keeps the fill.
bool PaddingKeepsFill(const TransformPipeline& pipeline) {
  const std::vector<TransformStep>& steps = pipeline.steps();
  for (size_t i = pipeline.image_begin(); i < pipeline.image_end(); ++i) {
    const ColorJitterParams* jitter = steps[i].get_if<ColorJitterParams>();
    if (jitter == nullptr || jitter->photometric != 2) return false;
  }
  return true;
}

}  // namespace

absl::Status FinishSample(const TransformPipeline& pipeline, const SampleGeometry& geometry,
                          SampleRng& rng, RenderState& state, void* dst) {
  if (geometry.error != nullptr) return absl::InvalidArgumentError(geometry.error);
  const OutputFormat fmt = OutputFormat::FromPipeline(pipeline);
  if (!pipeline.has_image_steps() && !pipeline.has_erasing() && !geometry.has_fill) {
    state.resampler.Finish(fmt, dst);  // the common case: resampled straight into the output
    return absl::OkStatus();
  }
  // The image stage works on the 8-bit RGB output of the geometric stage.
  OutputFormat levels;
  levels.dtype = DType::kUint8;
  levels.layout = Layout::kHWC;
  RgbView img;
  img.width = geometry.out_w;
  img.height = geometry.out_h;
  img.stride = static_cast<size_t>(img.width) * 3;
  const size_t bytes = img.stride * static_cast<size_t>(img.height);
  if (state.image.size() < bytes) state.image.resize(bytes);
  img.data = state.image.data();
  state.resampler.Finish(levels, img.data);
  // A padding whose fill no image step changes is written as that fill straight into the
  // output (a zoomed-out canvas is mostly padding): never painted, read or looked up per pixel.
  const bool framed = geometry.has_fill && PaddingKeepsFill(pipeline);
  if (geometry.has_fill && !framed) PaintFill(geometry, &img);
  ShownRect(geometry, img.width, img.height, state.augment.shown);
  absl::Status status = ApplyImageSteps(pipeline, rng, state.augment, &img);
  if (!status.ok()) return status;
  Resampler::Frame frame;
  std::copy(state.augment.shown, state.augment.shown + 4, frame.shown);
  std::copy(geometry.fill, geometry.fill + 3, frame.fill);
  state.resampler.WriteImage(img.data, img.stride, img.width, img.height, fmt, dst,
                             framed ? &frame : nullptr);
  if (pipeline.has_erasing()) ApplyErasing(pipeline, rng, img.height, img.width, dst);
  return absl::OkStatus();
}

absl::Status RenderSample(const uint8_t* pixels, size_t stride, int bytes_per_pixel, int width,
                          int height, const TransformPipeline& pipeline,
                          const SampleGeometry& geometry, SampleRng& rng, RenderState& state,
                          void* dst) {
  if (geometry.error != nullptr) return absl::InvalidArgumentError(geometry.error);
  AxisMapping ax, ay;
  GeometryToAxes(geometry, 1.0, width, height, &ax, &ay);
  Resampler& rs = state.resampler;
  rs.Prepare(ax, ay, width, height);
  rs.AddImage(pixels, stride, bytes_per_pixel);
  return FinishSample(pipeline, geometry, rng, state, dst);
}

}  // namespace ringloader
