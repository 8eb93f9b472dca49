#pragma once
/// Transform chains with torchvision semantics, compiled once into a plan that maps every
/// sample to one source rectangle, one output size and one write-out format.
///
/// Geometric steps (Resize, CenterCrop, RandomResizedCrop, RandomHorizontalFlip) compose into a
/// single `SampleGeometry`: the (possibly mirrored) rectangle of the source image, in continuous
/// pixel coordinates, that lands on the output grid. The decoder uses it to pick a DCT scale and
/// a region of interest, and the resampler uses it to produce the output in one pass.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ringloader/transform_step.h"
#include "transform/random.h"

namespace ringloader {

struct AugmentScratch;
struct RgbView;

/// Bytes per element of `dtype`.
size_t DTypeSize(DType dtype);
/// "uint8", "float32", ... as numpy/torch name them.
const char* DTypeName(DType dtype);

/// Which stage of a chain (TransformPipeline::Create) a kind's steps run in.
enum class StepStage : uint8_t {
  kGeometry,  ///< fused into the one resample
  kCropPad,   ///< fused with a zero constant fill, else on the 8-bit image (RandomCrop, Pad)
  kImage,     ///< on the 8-bit image
  kOutput,    ///< on the written output (ToTensor, Normalize, RandomErasing)
};

/// One step's parameters as the binding holds them (a Python dict there), read by key. Each
/// getter fills `out` and returns true when the step has `key`, false when it has not. A value
/// of the wrong type is the reader's own error (the binding raises TypeError), so a kind's parse
/// function only checks what the types cannot say (counts, names).
class StepParamReader {
 public:
  virtual ~StepParamReader() = default;
  virtual bool Int(const char* key, int* out) = 0;
  virtual bool Double(const char* key, double* out) = 0;
  virtual bool Bool(const char* key, bool* out) = 0;
  virtual bool String(const char* key, std::string* out) = 0;
  /// A (lo, hi) pair.
  virtual bool Pair(const char* key, double out[2]) = 0;
  /// A (lo, hi) pair or None; None reads as absent.
  virtual bool OptionalPair(const char* key, double out[2]) = 0;
  virtual bool Floats(const char* key, std::vector<float>* out) = 0;
  virtual bool Ints(const char* key, std::vector<int>* out) = 0;
  virtual bool Strings(const char* key, std::vector<std::string>* out) = 0;
  /// A list of (lo, hi) pairs or Nones; a None is an empty optional.
  virtual bool Pairs(const char* key, std::vector<std::optional<std::array<double, 2>>>* out) = 0;
};

/// Reads "ranges", a list of (lo, hi) pairs or Nones, into `named` in order (a None leaves its
/// range as it is). InvalidArgument for more ranges than `named` has.
absl::Status ReadRanges(StepParamReader& params, std::span<std::optional<Range>* const> named);

/// One row per step kind: its parameter struct's kind, the names it goes by, the stage-order
/// facts about it, and its per-kind parts. The binding parses the kind by `key` and its
/// parameters with `parse`, Create checks them with `check` and orders the chain by `stage`
/// and `resizes`, errors name it by `name` and Describe shows it with `describe`. The rows are made (step_kinds.cc) from
/// functions that take the kind's own parameter struct (ResizeParams...), so a new kind is its
/// struct in transform_step.h, one row, and its functions.
struct StepKindInfo {
  TransformStep::Kind kind;
  const char* key;   ///< the binding's "kind" ("random_resized_crop")
  const char* name;  ///< torchvision's class ("RandomResizedCrop"), in errors and Describe
  StepStage stage;
  bool resizes;      ///< a resample of the whole image (Resize, RandomResizedCrop)
  /// The binding's parameter keys of this kind ("size_h", "size_w", "scale", "ratio",
  /// "interpolation"): any other key in a step dict is refused.
  std::vector<std::string_view> params;
  /// Reads the kind's parameters (exactly the keys of `params`) into `*step`'s parameter
  /// struct, which is of this kind and holds its defaults. InvalidArgument for a value the
  /// fields cannot hold ("fill needs 1 or 3 values"); the value checks are Create's.
  absl::Status (*parse)(StepParamReader& params, TransformStep* step);
  /// The step in TransformPipeline::Describe ("Resize(256)"); `name` when null.
  std::string (*describe)(const TransformStep& step);
  /// Create's checks of the kind's values ("p must be in [0, 1]"), "" when they are valid;
  /// null for the kinds whose checks follow the output size (the geometric and crop steps'
  /// sizes, in Create's walk) or that have none.
  std::string (*check)(const TransformStep& step);
  /// Runs one step of the kind on the 8-bit image (augment.h), drawing its random parameters
  /// from `rng`; null for the kinds that never run there (the resizes and the output steps)
  /// and for RandomApply, which ApplyImageSteps runs itself (it decides whether the steps it
  /// guards run).
  absl::Status (*apply_image)(const TransformStep& step, SampleRng& rng, AugmentScratch& scratch,
                              RgbView* img);
  /// Whether `key` is one of `params`.
  bool Takes(std::string_view key) const;
  /// `params` separated by spaces, as errors list them.
  std::string ParamList() const;
};
/// Every kind, in TransformStep::Kind order.
const std::vector<StepKindInfo>& StepKinds();
const StepKindInfo& KindInfo(TransformStep::Kind kind);
/// The row whose key is `key`, or nullptr.
const StepKindInfo* KindFromKey(std::string_view key);

/// Why steps[first..] cannot follow steps[0..first) in one native chain, by the stage order
/// that Create enforces ("it needs ToTensor before it", "a second resize would need a second
/// resample, which is not native", ...), or "" when they can. The Python package splits a
/// transform at the first step this refuses and runs the rest in Python.
std::string StageOrderError(const std::vector<TransformStep>& steps, size_t first = 0);

/// Where one output image comes from: the source rectangle [x0,x1) x [y0,y1) in continuous
/// source-pixel coordinates (x0 > x1 means mirrored horizontally) mapped onto out_w x out_h.
struct SampleGeometry {
  static constexpr double kUnbounded = 1e300;  ///< a window edge that restricts nothing
  double x0 = 0, x1 = 0, y0 = 0, y1 = 0;
  int out_w = 0, out_h = 0;
  /// Source box of the image that torchvision's last resize step reads (ordered, continuous
  /// coordinates). PIL clips and renormalises filter taps at that image's border, which is the
  /// crop box for RandomResizedCrop and the whole image for Resize; it extends beyond the
  /// source where that image was padded. An empty box means the whole source.
  double clip_x0 = 0, clip_x1 = 0, clip_y0 = 0, clip_y1 = 0;
  /// The part of the clip box holding image pixels: crops before the last resize narrow it,
  /// and the rest of the clip box is zero padding that the filter reads as zeros.
  double read_x0 = -kUnbounded, read_x1 = kUnbounded, read_y0 = -kUnbounded, read_y1 = kUnbounded;
  /// The part of the last resize's output that the crops after it keep (source coordinates):
  /// output pixels whose centre falls outside it are zero padding (a CenterCrop larger than
  /// the image, Pad, RandomCrop padding).
  double show_x0 = -kUnbounded, show_x1 = kUnbounded, show_y0 = -kUnbounded, show_y1 = kUnbounded;
  /// Filter of the resize that produces the output (the last resizing step's interpolation).
  Interpolation filter = Interpolation::kBilinear;
  /// Where torchvision v2 puts a keypoint, relative to this geometry's continuous mapping of
  /// it, in output pixels: v2 flips keypoints about (size - 1) / 2 (pixel indices) where boxes
  /// and pixels flip about size / 2, and later resizes scale that offset.
  double key_dx = 0, key_dy = 0;
  /// With a nearest `filter`: pick source pixels as torch's interpolate(mode="nearest") does on
  /// a tensor (v2 on a tv_tensors.Mask) instead of Pillow's NEAREST. Set by the caller.
  bool tensor_nearest = false;
  /// The last resize runs on a uint8 tensor (its step's `tensor`: it follows v2's ToImage):
  /// torch's kernel of `filter` (bilinear: the antialiased uint8 interpolate of
  /// tensor_resize.h, horizontal pass first; nearest: as tensor_nearest), decoded at full scale.
  bool tensor = false;
  /// The image the last resize reads is mirrored along x (y): a flip comes before that resize
  /// (an odd number of them). torchvision resizes the flipped image, and a resize's taps are
  /// not symmetric (NEAREST picks the pixel right of a centre on a pixel edge, torch's nearest
  /// floors), so the resample takes them on the mirrored image (AxisMapping::reflect).
  bool reflect_x = false, reflect_y = false;
  /// The padding of a fused Pad/RandomCrop with a constant non-zero fill (its only padding):
  /// the render sets every output pixel whose centre lies outside the shown window to `fill`.
  bool has_fill = false;
  uint8_t fill[3] = {0, 0, 0};
  /// Set when the chain cannot be applied to this image (torchvision raises for it too, e.g. a
  /// RandomCrop larger than the image without pad_if_needed): a static message.
  const char* error = nullptr;
  bool flipped() const { return x0 > x1; }
};

/// The float32 operations that take an 8-bit level to its output value, in order, each with an
/// operand per channel ('*', '/', '-': ToTensor's scaling, Normalize's subtraction and
/// division). n < 0: not known (only the values are).
struct LevelOps {
  static constexpr int kMax = 6;
  int n = -1;
  char op[kMax] = {};
  float k[kMax][3] = {};
};

/// A validated transform chain plus output format. Built once (setup: sizes, coefficients that
/// do not depend on the sample); `Plan` is cheap and allocation-free per sample.
class TransformPipeline {
 public:
  /// Validates `steps` and fixes dtype and layout. A chain has three stages, in this order:
  ///  1. geometric steps fused into one resample (Resize, CenterCrop, RandomResizedCrop, the
  ///     flips, and RandomCrop/Pad with zero constant fill, or with another constant fill when
  ///     it is the output's only padding and no resize follows it: painted after the resample);
  ///  2. image steps on the 8-bit image (colour, policies, rotation/affine, blur, and
  ///     RandomCrop/Pad with other fills or modes); flips and CenterCrop after the first of
  ///     them move the 8-bit image's pixels, a resize there is refused; a RandomApply guards
  ///     the next `apply_steps` steps, which must be image steps that keep the size;
  ///  3. output steps: ToTensor, Normalize, RandomErasing (after ToTensor).
  /// Unless `allow_variable_size`, the chain must end in a fixed output size so samples can be
  /// batched. Errors: InvalidArgument naming the offending step.
  static absl::StatusOr<TransformPipeline> Create(std::vector<TransformStep> steps, DType dtype,
                                                  Layout layout, bool allow_variable_size = false);

  /// Geometry for one source image of src_w x src_h, drawing the random parameters of the
  /// geometric stage from `rng` in step order (RandomResizedCrop: torchvision's get_params;
  /// flip: one uniform draw). The image and output stages draw later, from the same `rng`.
  SampleGeometry Plan(int src_w, int src_h, SampleRng& rng) const;

  /// Output size of a sample with this geometry (the image stage may pad or crop).
  void OutputSize(const SampleGeometry& geometry, int* height, int* width) const;
  /// Bytes of the output of a sample with this geometry.
  size_t OutputBytes(const SampleGeometry& geometry) const;
  /// False when the output size depends on the input image (allowed by Create's flag only).
  bool fixed_size() const { return fixed_size_; }
  /// Index of the first image-stage step (== first output step when there are none).
  size_t image_begin() const { return image_begin_; }
  /// One past the last image-stage step.
  size_t image_end() const { return image_end_; }
  bool has_image_steps() const { return image_end_ > image_begin_; }
  /// True when an output step works on the written output (RandomErasing).
  bool has_erasing() const { return has_erasing_; }

  /// Fixed output size (0 x 0 when !fixed_size()).
  int out_h() const { return out_h_; }
  int out_w() const { return out_w_; }
  DType dtype() const { return dtype_; }
  Layout layout() const { return layout_; }
  /// True when ToTensor is in the chain (values scaled to [0,1] before Normalize).
  bool to_unit() const { return to_unit_; }
  /// Output value = stored_level * scale[c] + bias[c], stored_level in [0,255] (rounded), up to
  /// float rounding; values() has the exact ones.
  const float* scale() const { return scale_; }
  const float* bias() const { return bias_; }
  /// The float32 output value of each level per channel (values()[c * 256 + level]), computed
  /// with torch's float32 operations in the chain's order, so float outputs equal torchvision's.
  const float* values() const { return values_.data(); }
  /// Those operations themselves (the write-out computes them in SIMD lanes).
  const LevelOps& level_ops() const { return level_ops_; }
  /// Bytes of one output image (fixed size).
  size_t SampleBytes() const;
  const std::vector<TransformStep>& steps() const { return steps_; }
  /// Human readable, e.g. "RandomResizedCrop(224x224) -> Flip(0.5) -> ToTensor -> Normalize".
  std::string Describe() const;

 private:
  std::vector<TransformStep> steps_;
  DType dtype_ = DType::kUint8;
  Layout layout_ = Layout::kCHW;
  int out_h_ = 0, out_w_ = 0;
  bool fixed_size_ = true;
  size_t image_begin_ = 0, image_end_ = 0;
  bool has_erasing_ = false;
  bool to_unit_ = false;
  float scale_[3] = {1.f, 1.f, 1.f};
  float bias_[3] = {0.f, 0.f, 0.f};
  std::array<float, 3 * 256> values_{};
  LevelOps level_ops_;
};

/// torchvision RandomResizedCrop.get_params on an image of width x height: returns the crop
/// (top, left, h, w) in integer pixels, with the same draw order and fallback (10 attempts,
/// then a centre crop with the ratio clamped).
struct CropBox {
  int top = 0, left = 0, height = 0, width = 0;
};
CropBox RandomResizedCropBox(int width, int height, double scale_min, double scale_max,
                             double ratio_min, double ratio_max, SampleRng& rng);

}  // namespace ringloader
