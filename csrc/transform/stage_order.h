#pragma once
/// The stage-order rules of a transform chain: which steps fuse into the one resample, and the
/// walk over a chain that TransformPipeline::Create and StageOrderError (image_transform.h) both
/// take, so the two cannot disagree on what is refused. Internal to csrc/transform.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "ringloader/transform_step.h"

namespace ringloader {

/// The padding of a Pad or RandomCrop step; nullptr for the other kinds.
const PaddingParams* PaddingOf(const TransformStep& s);
/// Whether `s` is v2's RandomZoomOut (a Pad step with zoom_out).
bool IsZoomOut(const TransformStep& s);
/// Whether a Pad/RandomCrop step pads with a constant zero fill (what the resampler writes
/// outside the source, so its padding fuses wherever it is).
bool ZeroConstantFill(const PaddingParams& s);

/// The stage-order rules of a chain, one step at a time: Create and StageOrderError walk the
/// chain with it, so the two cannot disagree on what is refused.
class StageWalk {
 public:
  enum class Stage { kGeometry, kImage, kOutput };
  enum class Rule {
    kNone,
    kAfterTensor,        ///< an image step after the output stage began
    kToTensorTwice,
    kNeedsTensor,        ///< Normalize / RandomErasing without ToTensor before it
    kResizeAfterImage,   ///< a resize after the image stage began (see image_begin)
    kSecondResize,       ///< a resize after the fused geometry's resize (see resized_at)
    kGuardedStep,        ///< a RandomApply guards a step that is not a size-keeping image step
    kGuardPastEnd,       ///< a RandomApply guards more steps than follow it (or its own guard)
    kZoomOutUnfused,     ///< a RandomZoomOut that cannot fuse (it has no 8-bit image form)
  };

  /// Advances over steps[i] (after steps[0..i)); returns the rule it breaks.
  Rule Step(const std::vector<TransformStep>& steps, size_t i);

  Stage stage() const { return stage_; }
  /// The first image-stage step (valid once stage() left kGeometry for kImage).
  size_t image_begin() const { return image_begin_; }
  bool seen_to_tensor() const { return seen_to_tensor_; }
  /// The fused geometry's resize.
  std::optional<size_t> resized_at() const { return resized_at_; }

  /// Whether a RandomApply may guard `s`: a step of the 8-bit image that keeps its size (a
  /// colour/filter/policy step, rotation, affine, a flip, or a nested RandomApply), so the
  /// output size never depends on the draw.
  static bool Guardable(const TransformStep& s);

 private:
  std::vector<size_t> guard_ends_;  ///< the last step each enclosing RandomApply guards
  Stage stage_ = Stage::kGeometry;
  size_t image_begin_ = 0;
  std::optional<size_t> resized_at_;
  bool seen_to_tensor_ = false;
};

/// Create's words for `rule`, which steps[i] breaks (`walk` has just stepped over it): what
/// follows "transform step i (Name): " in its InvalidArgument error.
std::string StageRuleError(const std::vector<TransformStep>& steps, size_t i,
                           StageWalk::Rule rule, const StageWalk& walk);

}  // namespace ringloader
