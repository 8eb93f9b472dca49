#pragma once
/// What happens to a sample after its pixels are decoded, whatever the format: the geometric
/// prefix of the chain as one resample along the sample's geometry, then the 8-bit image steps
/// (colour, policies, rotation...), then the write-out into the output dtype and layout and the
/// output steps (RandomErasing). Decoders call one of the two entry points; a decoder that
/// streams rows (JPEG) feeds a Resampler itself and calls FinishSample, one that holds the
/// whole image calls RenderSample.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "transform/augment.h"
#include "transform/image_ops.h"
#include "transform/image_transform.h"
#include "transform/random.h"
#include "transform/resample.h"

namespace ringloader {

/// Per-thread state of the render stage; all buffers are grow-only.
struct RenderState {
  Resampler resampler;
  AugmentScratch augment;
  std::vector<uint8_t> image;  ///< the 8-bit image the image steps work on
};

/// Finishes a sample whose source rows were streamed into `state.resampler` (Prepare'd for
/// `geometry`): writes pipeline.OutputBytes(geometry) bytes at `dst`. A geometry that carries
/// an error (e.g. a RandomCrop larger than the image) gives InvalidArgument and writes nothing. `rng` continues the
/// sample's draws (the geometry's were drawn by Plan).
absl::Status FinishSample(const TransformPipeline& pipeline, const SampleGeometry& geometry,
                          SampleRng& rng, RenderState& state, void* dst);

/// Renders a sample from a whole decoded image: `pixels` with `bytes_per_pixel` 3 (packed RGB)
/// or 4 (RGBX), rows `stride` bytes apart, width x height at full resolution.
absl::Status RenderSample(const uint8_t* pixels, size_t stride, int bytes_per_pixel, int width,
                          int height, const TransformPipeline& pipeline,
                          const SampleGeometry& geometry, SampleRng& rng, RenderState& state,
                          void* dst);

}  // namespace ringloader
