#include "transform/render.h"

namespace ringloader {

absl::Status FinishSample(const TransformPipeline& pipeline, const SampleGeometry& geometry,
                          SampleRng& rng, RenderState& state, void* dst) {
  if (geometry.error != nullptr) return absl::InvalidArgumentError(geometry.error);
  const OutputFormat fmt = OutputFormat::FromPipeline(pipeline);
  if (!pipeline.has_image_steps() && !pipeline.has_erasing()) {
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
  absl::Status status = ApplyImageSteps(pipeline, rng, state.augment, &img);
  if (!status.ok()) return status;
  state.resampler.WriteImage(img.data, img.stride, img.width, img.height, fmt, dst);
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
