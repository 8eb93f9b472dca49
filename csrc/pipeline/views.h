#pragma once
/// Several renderings ("views") of one sample's image, as multi-crop training uses
/// (LoaderOptions::views): the image is decoded once, then each view's chain draws and renders
/// it into its own part of the sample's row in the slot. A row holds the views one after
/// another, each starting on a kViewAlign boundary, so each view of a batch is a strided,
/// zero-copy tensor over the slot.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "decode/image_decoder.h"
#include "ringloader/types.h"
#include "transform/image_transform.h"
#include "transform/random.h"
#include "transform/render.h"

namespace ringloader {

inline constexpr size_t kViewAlign = 64;

/// The geometry record of a view (LoaderOptions::View::geometry): float64 fields, in this
/// order. The crop rectangle is the part of the source (continuous pixel coordinates, ordered:
/// left < right) that lands on the output; it reaches outside the source where the chain pads.
/// A source point (x, y) lands at left_out + (x - left) * out_w / (right - left) (mirrored
/// when hflip), as pixels and boxes do; v2 moves keypoints by key_dx/key_dy more (SampleGeometry).
/// kGeoDrawSeed: the seed of the draws made in Python for the sample (a Joint's RandomIoUCrop,
/// which draws against its boxes), an integer below 2^53 from the sample's seed (RowDrawSeed):
/// keyed per sample like every native draw, the same in every view of the row.
/// kGeoAngle..kGeoShearY: the draws of a RandomRotation or RandomAffine that is the view's first
/// image step (torchvision's make_params: angle in degrees, whole-pixel translation, scale,
/// shears in degrees), which rotates the rendered output; 0, 0, 0, 1, 0, 0 without one. A
/// Joint moves its boxes and masks by them with v2's kernels.
enum GeometryField : int {
  kGeoSrcW, kGeoSrcH, kGeoLeft, kGeoTop, kGeoRight, kGeoBottom, kGeoOutW, kGeoOutH,
  kGeoHFlip, kGeoVFlip, kGeoKeyDx, kGeoKeyDy, kGeoDrawSeed,
  kGeoAngle, kGeoTranslateX, kGeoTranslateY, kGeoScale, kGeoShearX, kGeoShearY,
  kGeometryFields,
};

/// The kGeoDrawSeed of a sample whose seed is `sample_seed`: exact in a float64.
uint64_t RowDrawSeed(uint64_t sample_seed);

/// Writes the record of `geometry` (planned by `pipeline` on a src_w x src_h image, for the
/// sample whose seed is `sample_seed`) at `out` (any alignment). `rng`: a copy of the view's
/// generator after the plan, from which its first image step, a rotation or affine, draws.
void WriteGeometry(const SampleGeometry& geometry, int src_w, int src_h, uint64_t sample_seed,
                   const TransformPipeline& pipeline, SampleRng rng, uint8_t* out);

/// Why `pipeline`'s image stage moves pixels (a flip, crop, pad, rotation or policy there),
/// so that its geometry cannot be recorded, or "" when it only changes values: a
/// RandomRotation or RandomAffine as its first image step is recorded (kGeoAngle...).
std::string UnrecordedGeometry(const TransformPipeline& pipeline);

struct ViewSet {
  std::vector<TransformPipeline> pipelines;
  std::vector<bool> luma;       ///< of each view (LoaderOptions::View::luma)
  std::vector<bool> mask;       ///< of each view (LoaderOptions::View::mask)
  std::vector<int> file;        ///< of each view (LoaderOptions::View::file)
  /// Of each view: the only view of its file, in RGB, (a Joint's image, or an image
  /// beside its mask): decoded straight into the view (ImageDecoder::DecodeInto), region of
  /// interest included, with the same pixels as a full decode and the same draws.
  std::vector<bool> sole;
  int files = 1;                ///< files a sample needs: 1 + the largest `file`
  std::vector<bool> share_geometry;  ///< of each view (LoaderOptions::View::share_geometry)
  std::vector<bool> tensor_nearest;  ///< of each view (LoaderOptions::View::tensor_nearest)
  /// Of each view: the level a label view sharing view 0's geometry pads with (TakeMaskFill),
  /// 0 for the others.
  std::vector<int> mask_fill;
  /// Of each view: its size depends on the image (LoaderOptions::View::variable): the row holds
  /// the record of its output, rendered into a buffer of its own (OutputSink).
  std::vector<bool> variable;
  std::vector<size_t> offsets;  ///< of each view in a row
  /// Of each view's geometry record in a row (8-byte aligned), -1 when not recorded.
  std::vector<int64_t> geometry_offsets;
  size_t row_bytes = 0;         ///< a multiple of kViewAlign

  /// Validates every view's chain (each must fix its output size unless it is variable); names
  /// the view that fails.
  static absl::StatusOr<ViewSet> Create(const std::vector<LoaderOptions::View>& views, Layout layout);
};

/// A label view's padding fill: v2 pads a Mask with the fill its transform gives masks (255,
/// "ignore", in torchvision's segmentation reference), which the fused geometry cannot (it pads
/// with zeros). Takes that fill out of `steps`' Pad/RandomCrop steps into `fill` (0 when none
/// pads with another level), so they fuse as zero padding; DecodeViews renders the label image
/// with a marker channel and sets the padded pixels to `fill` (FillMaskPadding). Returns why
/// the chain's padding cannot be one fill (a fill that is not one integer level, two fills, or
/// another step that pads with 0 beside it), or "".
std::string TakeMaskFill(std::vector<TransformStep>* steps, int* fill);

/// Sets the pixels of a rendered label view (height x width, 3 channels in `layout`) whose
/// channel 2 is 0 (padding: the label image was rendered with channel 2 at 255) to `fill`, and
/// replicates channel 0 into the others.
void FillMaskPadding(uint8_t* view, int height, int width, Layout layout, uint8_t fill);

/// Why `view`'s geometric steps would not draw as `first`'s do (another kind, size, scale,
/// ratio, probability or padding at some step), or "" when they draw alike.
std::string GeometryDrawsDiffer(const TransformPipeline& first, const TransformPipeline& view);

/// The seed of view `view`'s draws for a sample whose seed is `sample_seed`: view 0 draws as a
/// single-view sample would, the others independently of it and of each other.
uint64_t ViewSeed(uint64_t sample_seed, size_t view);

/// Pillow's convert("L") of packed RGB, written back replicated into all 3 channels.
void ReplicateLuma(const RgbImage& rgb, RgbImage* out);

/// The payload naming the file of a several-file sample that failed (Sample::more_files):
/// AnnotateSampleError names it instead of the sample's own.
inline constexpr char kSampleFilePayload[] = "ringloader.sample_file";

/// `cause` in file `path` of a several-file sample: its message prefixed with the path, and
/// kSampleFilePayload set.
absl::Status NameFile(const absl::Status& cause, const std::string& path);

/// One encoded file of a sample: its bytes, and its name for errors (null for file 0, which the
/// sample's own error names).
struct EncodedFile {
  const uint8_t* data = nullptr;
  size_t size = 0;
  const std::string* path = nullptr;
};

/// Where a variable-size view's output goes: a buffer of `bytes` for an output of height x
/// width in `dtype`, and the id its record names; a failure fails the sample (a sample larger
/// than the memory budget: ResourceExhausted).
struct OutputBuffer {
  uint64_t id = 0;
  uint8_t* data = nullptr;
};
using OutputSink =
    std::function<absl::StatusOr<OutputBuffer>(int height, int width, DType dtype, size_t bytes)>;

/// Decodes each file the views render once (full resolution, so every view of it sees the same
/// pixels; a file rendered both as an image and as a label image is decoded once each way) and
/// renders each view into the row at `dst` (a luma view from its image's luma, computed once;
/// a view that is its file's only RGB rendering through ImageDecoder::DecodeInto: region of
/// interest, scaled JPEG decode).
/// A variable view renders into the buffer `sink` gives (required then) and writes its record.
/// `files` holds at least views.files entries. `decodes` (if not null) counts the decodes.
/// A failure in file k > 0 carries kSampleFilePayload.
absl::Status DecodeViews(ImageDecoder& decoder, absl::Span<const EncodedFile> files,
                         const ViewSet& views, uint64_t sample_seed, RenderState& state,
                         uint8_t* dst, int* decodes = nullptr, const OutputSink* sink = nullptr);

}  // namespace ringloader
