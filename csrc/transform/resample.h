#pragma once
/// Antialiased resampling with Pillow's arithmetic (ImagingResample, 8-bit path; every filter
/// Pillow has: bilinear, bicubic, lanczos, box, hamming, and nearest), fused with the write-out
/// into the output dtype and layout.
///
/// Pillow computes, per output index, a filter of support filter_support * max(1, scale)
/// centred on the output pixel's source position, clipped and renormalised at the input image border, converted
/// to 22-bit fixed point. It runs two passes with an 8-bit intermediate image: horizontal then
/// vertical, except that Pillow 13 runs the vertical pass first when the height shrinks by more
/// than twice as many pixels as the width (see ResizesVerticallyFirst). The rounding (and for
/// bicubic and lanczos the clipping of overshoot) between the passes makes the order visible in
/// the levels, so `Resampler` follows it. It streams source rows in (so the decoder never holds
/// the whole image) and writes the final levels straight into the tensor layout.

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "transform/image_transform.h"
#include "transform/tensor_resize.h"

namespace ringloader {

/// Fractional bits of the fixed-point filter weights (Pillow: 32 - 8 - 2).
inline constexpr int kResamplePrecisionBits = 22;

/// How output levels (integers 0..255) become stored elements: value = level * scale + bias
/// (or, when `exact`, values[c * 256 + level]), rounded to the dtype (uint8: saturated to 0..255).
struct OutputFormat {
  DType dtype = DType::kUint8;
  Layout layout = Layout::kCHW;
  float scale[3] = {1.f, 1.f, 1.f};
  float bias[3] = {0.f, 0.f, 0.f};
  bool exact = false;  ///< Use `values` (a pipeline's TransformPipeline::values()).
  std::array<float, 3 * 256> values{};
  /// With `exact`: the operations that make `values` (TransformPipeline::level_ops()); a SIMD
  /// write-out computes them instead of looking each level up, once it has checked that they
  /// give every level's value.
  LevelOps ops;

  /// The format a pipeline writes.
  static OutputFormat FromPipeline(const TransformPipeline& pipeline);
};

/// One axis of a resample, in the coordinates of the image being resampled.
struct AxisMapping {
  static constexpr double kUnbounded = 1e300;  ///< a window edge that restricts nothing
  double begin = 0;  ///< Source coordinate of output edge 0.
  double end = 0;    ///< Source coordinate of output edge out_size (end < begin: mirrored).
  double clip_lo = 0, clip_hi = 0;  ///< Taps stay inside; output centres outside give 0.
  int out_size = 0;
  /// Pillow's filter. kNearest reproduces Image.resize(NEAREST) (an affine scale that picks
  /// one source pixel per output, not a convolution): one tap of weight 1.
  Interpolation filter = Interpolation::kBilinear;
  /// The part of the clip box that holds image pixels: beyond it lies zero padding added
  /// before the resize (taps there weigh in the filter's normalisation but read zeros).
  double read_lo = -kUnbounded, read_hi = kUnbounded;
  /// The part of the resize's output that later crops keep: output centres outside it are the
  /// zero padding added after the resize.
  double show_lo = -kUnbounded, show_hi = kUnbounded;
  /// With kNearest: torch's interpolate(mode="nearest") on a tensor (SampleGeometry::
  /// tensor_nearest): source index floor(i * (in / out)) in float, not Pillow's centre rule.
  bool tensor_nearest = false;
  /// With kBilinear or kBicubic: torch's antialiased interpolate on a uint8 tensor
  /// (SampleGeometry::tensor):
  /// torch's taps (TensorAxisTaps: int16 weights at the precision the axis's largest tap
  /// allows, which scaled to kResamplePrecisionBits give the same sums) and the horizontal
  /// pass first. Needs a clip box on whole pixels (full-scale decode).
  bool tensor_taps = false;
  /// The resize reads the source mirrored (SampleGeometry::reflect_x; GeometryToAxes sets it
  /// at full decode scale): taps are computed on the mirrored source (every coordinate c
  /// becoming src_size - c) and mirrored back, which is the resize of the flipped image exactly,
  /// not its mirror.
  bool reflect = false;
};

/// Maps a sample's geometry (full-resolution source coordinates) into an image whose pixels are
/// `factor` times smaller per side (DCT-scaled decode: factor = scale_num / 8) and `src_w` x
/// `src_h` in size.
void GeometryToAxes(const SampleGeometry& geometry, double factor, int src_w, int src_h,
                    AxisMapping* x, AxisMapping* y);

/// Pillow's per-output-index filter taps for one axis, in fixed point.
class AxisCoeffs {
 public:
  /// Computes the taps for mapping `m` over a source axis of `src_size` pixels. Grow-only: no
  /// allocation once the buffers have reached the largest size seen.
  void Compute(const AxisMapping& m, int src_size);

  int out_size() const { return out_size_; }
  /// Taps per output index: the same for every output (shorter filters are zero-padded) and
  /// the row stride of weights().
  int ksize() const { return ksize_; }
  /// First source index any output reads; first() == end() when no output reads the source.
  int first() const { return first_; }
  /// One past the last source index any output reads.
  int end() const { return end_; }
  /// (start, count) per output index; start is an absolute source index, count == ksize().
  const int32_t* bounds() const { return bounds_.data(); }
  /// ksize() weights per output index, summing to 1 << kResamplePrecisionBits (up to rounding).
  const int32_t* weights() const { return weights_.data(); }
  /// The size of the image Pillow resizes along this axis (the clip box) and the size it
  /// resizes it to (the whole resized image, of which the out_size() outputs are a view).
  /// These, not the view, decide Pillow's pass order.
  double resize_in() const { return resize_in_; }
  double resize_out() const { return resize_out_; }
  /// Whether every output is one source pixel unchanged (one tap of weight 1, the others 0) or
  /// zero (no weight): an axis at scale 1 (crops, paddings, flips) or a nearest one. Its pass
  /// is then a copy, whose levels equal the filter's exactly: ((p << 22) + half) >> 22 == p.
  bool copies() const { return copies_; }
  /// With copies(): the source pixel output `i` copies, -1 where it is zero.
  const int32_t* copy_source() const { return copy_source_.data(); }
  /// With copies(): the outputs [copy_lo(), copy_hi()) hold every non-zero one; copy_step() is
  /// +1 (-1) when they all copy, consecutive increasing (decreasing) source pixels, else 0.
  int copy_lo() const { return copy_lo_; }
  int copy_hi() const { return copy_hi_; }
  int copy_step() const { return copy_step_; }

 private:
  // Pillow's normalised fixed-point taps of `filter` for the n pixels from xmin around
  // `center`, of which only those in [keep_lo, keep_hi) are stored in k (the others read
  // zeros); returns the stored count (0 when every weight is 0 or none is kept).
  int Taps(Interpolation filter, double center, int xmin, int n, int keep_lo, int keep_hi,
           double inv_filterscale, int32_t* k);

  // Compute's last steps: the outputs in reverse order (a mirrored box), then every output
  // given the same number of taps (the largest), zero-padded and shifted to stay inside
  // [first_, end_): the kernels' inner loops get a fixed trip count.
  void ReverseOutputs();
  void EqualizeTaps();
  // Sets copies_ and the copy span from the equalized taps.
  void FindCopies();
  // AxisMapping::tensor_taps: the fractional bits of torch's int16 taps for the clip box's
  // in_size pixels resized to `resized` (TensorAxisTaps). Taps (the same filter, window and
  // normalisation as torch's) then rounds its weights as torch does.
  int TensorPrecision(int in_size, int64_t resized, Interpolation filter);

  int out_size_ = 0, ksize_ = 0, first_ = 0, end_ = 0;
  bool copies_ = false;
  int copy_lo_ = 0, copy_hi_ = 0, copy_step_ = 0;
  std::vector<int32_t> copy_source_;
  double resize_in_ = 0, resize_out_ = 0;
  std::vector<int32_t> bounds_;
  std::vector<int32_t> weights_;
  std::vector<double> scratch_;
  std::vector<int32_t> row_tmp_;
  TensorAxisTaps tensor_;      // AxisMapping::tensor_taps: torch's taps of the whole resize
  int tensor_precision_ = -1;  // their precision; -1: Pillow's weights
};

/// Pillow 13's pass order (ImagingResample): the vertical pass runs first when both passes run
/// and the height shrinks by more than twice as many pixels as the width does.
bool ResizesVerticallyFirst(double in_w, double in_h, double out_w, double out_h);

/// The pass order of a resample along `x` and `y`: Pillow's (above), or the horizontal pass
/// first for torch's kernel (AxisMapping::tensor_taps).
bool ResizesVerticallyFirst(const AxisMapping& x, const AxisCoeffs& xc, const AxisCoeffs& yc);

/// Two-pass resampler over streamed RGB rows. Usage per image: Prepare, then AddRow for source
/// rows (only rows in [first_row, end_row) are used), then Finish. Reuse one per thread: all
/// buffers are grow-only.
class Resampler {
 public:
  /// Computes both axes' taps for a source of src_w x src_h pixels and Pillow's pass order.
  void Prepare(const AxisMapping& x, const AxisMapping& y, int src_w, int src_h);

  /// Whether Finish runs the vertical pass before the horizontal one (as Pillow does for this
  /// geometry). AddRow then only keeps the used part of each row; both passes run in Finish.
  bool vertical_first() const { return vertical_first_; }

  /// Source columns [first_col, end_col) and rows [first_row, end_row) that the output reads.
  int first_col() const { return xc_.first(); }
  int end_col() const { return xc_.end(); }
  int first_row() const { return yc_.first(); }
  int end_row() const { return yc_.end(); }

  /// Rows passed to AddRow start at source column `x_origin` (region-of-interest decode);
  /// must be <= first_col(). Default 0.
  void SetColumnOrigin(int x_origin) { x_origin_ = x_origin; }

  /// Horizontal pass of source row `y` (vertical_first(): a copy of its used columns);
  /// `rgbx` holds RGBX pixels (4 bytes, the 4th ignored: one pixel fills one integer vector)
  /// starting at column x_origin and covering at least end_col(). Rows outside
  /// [first_row, end_row) are ignored.
  void AddRow(int y, const uint8_t* rgbx);

  /// Vertical pass and write-out of the whole output image to `dst` (out_h * out_w * 3
  /// elements of fmt.dtype in fmt.layout). Every row in [first_row, end_row) must have been
  /// added first.
  void Finish(const OutputFormat& fmt, void* dst);

  /// The pixels of an image outside one rectangle, all of one colour (a fused padding's fill).
  struct Frame {
    int shown[4];     // x0, y0, x1, y1: the rectangle, [x0, x1) x [y0, y1)
    uint8_t fill[3];  // the levels of every pixel outside it
  };

  /// Writes a packed RGB image of levels (width x height, rows `stride` bytes apart) to `dst`
  /// in fmt's dtype and layout, as Finish writes the resampled output. With `frame`, the
  /// pixels outside its rectangle are stored as its fill without being read (the caller
  /// vouches that they are that fill).
  void WriteImage(const uint8_t* rgb, size_t stride, int width, int height,
                  const OutputFormat& fmt, void* dst, const Frame* frame = nullptr);

  /// Adds every needed row of an image already in memory (after Prepare): packed RGB
  /// (bytes_per_pixel 3) or RGBX (4), rows `stride` bytes apart, starting at column 0.
  void AddImage(const uint8_t* pixels, size_t stride, int bytes_per_pixel);

  /// Bytes Prepare + Finish allocate for this geometry (the intermediate rows above all: with
  /// vertical_first() every used source pixel as RGBX), without allocating them: what the
  /// decode memory budget (memory/decode_budget.h) charges before a large image is decoded.
  static uint64_t IntermediateBytes(const AxisMapping& x, const AxisMapping& y, int src_w, int src_h);

  /// Whether float32 CHW write-outs of the format last written compute their values in SIMD
  /// lanes (the format's operations, checked to give every level's value) rather than look
  /// them up.
  bool computes_values() const;

  /// Bytes this resampler keeps between images (its grow-only buffers), and their release.
  uint64_t RetainedBytes() const;
  void Trim();

  /// Convenience for an image already in memory (packed RGB: bytes_per_pixel 3, or RGBX: 4):
  /// Prepare + AddRow for the needed rows + Finish.
  void Resample(const uint8_t* pixels, size_t stride, int bytes_per_pixel, int src_w, int src_h,
                const AxisMapping& x, const AxisMapping& y, const OutputFormat& fmt, void* dst);

 private:
  void PrepareLut(const OutputFormat& fmt);
  // Pixels [x0, x1) (x1 < 0: to out_w) of row y of levels (out_w RGB, from pixel 0) through
  // the lookup table into dst's dtype and layout; with `fill`, that pixel in each of them.
  void StoreRow(const uint8_t* levels, int out_w, int out_h, int y, const OutputFormat& fmt,
                void* dst, int x0 = 0, int x1 = -1, const uint8_t* fill = nullptr) const;

  // The horizontal pass of one RGBX row whose first pixel is source column `origin`, by the
  // kernel this CPU runs (a copy when the axis copies()). May store 4 bytes past the row.
  void HorizontalPass(const uint8_t* src, int origin, uint8_t* dst) const;
  // The vertical pass of output row y into `width` bytes at `out`: n rows from `rows`, stride
  // tmp_stride_ (a copy of one row, or zeros, when the axis copies()).
  void VerticalPass(const uint8_t* rows, int y, int width, uint8_t* out) const;

  // Vertical-first Finish: both passes over the kept source rows.
  void FinishVerticalFirst(const OutputFormat& fmt, bool direct, void* dst);

  AxisCoeffs xc_, yc_;
  int x_origin_ = 0;
  bool vertical_first_ = false;
  size_t tmp_stride_ = 0;
  // Rows [first_row, end_row): the horizontal pass output (RGB), or with vertical_first_ the
  // source columns [first_col, end_col) as RGBX.
  std::vector<uint8_t> tmp_;
  std::vector<uint8_t> column_row_;  // vertical_first_: one vertically filtered row, RGBX
  std::vector<uint8_t> rgbx_row_;  // Resample(): one packed-RGB row widened to RGBX
  // The horizontal taps in the SIMD kernel's layout (PairWeights in resample.cc).
  std::vector<int16_t> pair_weights_;
  std::vector<uint32_t> pair_offsets_;
  std::vector<uint8_t> levels_;    // one output row of final levels
  // Level -> stored element lookup, rebuilt only when the output format changes.
  alignas(64) uint32_t lut_[3][256] = {};
  bool lut_valid_ = false;
  bool lut_identity_ = false;  // uint8 output whose levels are stored unchanged
  bool lut_ops_ = false;  // float32 values computed by lut_fmt_.ops in lanes (checked equal)
  bool probed_ = false;  // lut_ops_ was decided with the lanes kernel present
  OutputFormat lut_fmt_;
};

/// Test hook: false forces the portable scalar kernels, true restores the best ones for this
/// CPU (both give identical results). Returns whether SIMD kernels exist here. Not thread-safe:
/// call only while no resampling runs.
bool SetResampleSimdForTesting(bool enabled);

/// IEEE binary16 bits of `v`, rounded to nearest even (overflow to inf, subnormals kept).
uint16_t FloatToHalf(float v);
/// The float value of binary16 bits.
float HalfToFloat(uint16_t h);
/// bfloat16 bits of `v`, rounded to nearest even (NaN stays NaN).
uint16_t FloatToBFloat16(float v);
/// The float value of bfloat16 bits.
float BFloat16ToFloat(uint16_t b);

}  // namespace ringloader
