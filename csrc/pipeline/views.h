#pragma once
/// Several renderings ("views") of one sample's image, as multi-crop training uses
/// (LoaderOptions::views): the image is decoded once, then each view's chain draws and renders
/// it into its own part of the sample's row in the slot. A row holds the views one after
/// another, each starting on a kViewAlign boundary, so each view of a batch is a strided,
/// zero-copy tensor over the slot.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "decode/image_decoder.h"
#include "ringloader/types.h"
#include "transform/image_transform.h"
#include "transform/render.h"

namespace ringloader {

inline constexpr size_t kViewAlign = 64;

/// The geometry record of a view (LoaderOptions::View::geometry): float64 fields, in this
/// order. The crop rectangle is the part of the source (continuous pixel coordinates, ordered:
/// left < right) that lands on the output; it reaches outside the source where the chain pads.
/// A source point (x, y) lands at left_out + (x - left) * out_w / (right - left) (mirrored
/// when hflip), as pixels and boxes do; v2 moves keypoints by key_dx/key_dy more (SampleGeometry).
enum GeometryField : int {
  kGeoSrcW, kGeoSrcH, kGeoLeft, kGeoTop, kGeoRight, kGeoBottom, kGeoOutW, kGeoOutH,
  kGeoHFlip, kGeoVFlip, kGeoKeyDx, kGeoKeyDy,
  kGeometryFields,
};

/// Writes the record of `geometry` (planned on a src_w x src_h image) at `out` (any alignment).
void WriteGeometry(const SampleGeometry& geometry, int src_w, int src_h, uint8_t* out);

/// Why `pipeline`'s image stage moves pixels (a flip, crop, pad, rotation or policy there),
/// so that its geometry cannot be recorded, or "" when it only changes values.
std::string UnrecordedGeometry(const TransformPipeline& pipeline);

struct ViewSet {
  std::vector<TransformPipeline> pipelines;
  std::vector<bool> luma;       ///< of each view (LoaderOptions::View::luma)
  std::vector<bool> share_geometry;  ///< of each view (LoaderOptions::View::share_geometry)
  std::vector<size_t> offsets;  ///< of each view in a row
  /// Of each view's geometry record in a row (8-byte aligned), -1 when not recorded.
  std::vector<int64_t> geometry_offsets;
  size_t row_bytes = 0;         ///< a multiple of kViewAlign

  /// Validates every view's chain (each must fix its output size); names the view that fails.
  static absl::StatusOr<ViewSet> Create(const std::vector<LoaderOptions::View>& views, Layout layout);
};

/// Why `view`'s geometric steps would not draw as `first`'s do (another kind, size, scale,
/// ratio, probability or padding at some step), or "" when they draw alike.
std::string GeometryDrawsDiffer(const TransformPipeline& first, const TransformPipeline& view);

/// The seed of view `view`'s draws for a sample whose seed is `sample_seed`: view 0 draws as a
/// single-view sample would, the others independently of it and of each other.
uint64_t ViewSeed(uint64_t sample_seed, size_t view);

/// Pillow's convert("L") of packed RGB, written back replicated into all 3 channels.
void ReplicateLuma(const RgbImage& rgb, RgbImage* out);

/// Decodes `data` once (full resolution, so every view sees the same pixels) and renders each
/// view into the row at `dst` (a luma view from the image's luma, computed once). A lone RGB
/// view renders through ImageDecoder::DecodeInto (region of interest, scaled JPEG decode).
absl::Status DecodeViews(ImageDecoder& decoder, const uint8_t* data, size_t size,
                         const ViewSet& views, uint64_t sample_seed, RenderState& state,
                         uint8_t* dst);

}  // namespace ringloader
