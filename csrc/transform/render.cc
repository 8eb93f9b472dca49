#include "transform/render.h"

namespace ringloader {

absl::Status FinishSample(const TransformPipeline& pipeline, const SampleGeometry& geometry,
                          SampleRng& rng, RenderState& state, void* dst) {
  (void)geometry;
  (void)rng;
  state.resampler.Finish(OutputFormat::FromPipeline(pipeline), dst);
  return absl::OkStatus();
}

absl::Status RenderSample(const uint8_t* pixels, size_t stride, int bytes_per_pixel, int width,
                          int height, const TransformPipeline& pipeline,
                          const SampleGeometry& geometry, SampleRng& rng, RenderState& state,
                          void* dst) {
  AxisMapping ax, ay;
  GeometryToAxes(geometry, 1.0, width, height, &ax, &ay);
  Resampler& rs = state.resampler;
  rs.Prepare(ax, ay, width, height);
  rs.AddImage(pixels, stride, bytes_per_pixel);
  return FinishSample(pipeline, geometry, rng, state, dst);
}

}  // namespace ringloader
