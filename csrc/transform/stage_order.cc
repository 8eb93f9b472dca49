#include "transform/stage_order.h"

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "transform/image_ops.h"
#include "transform/image_transform.h"

namespace ringloader {
namespace {

using Kind = TransformStep::Kind;

const char* KindName(Kind kind) { return KindInfo(kind).name; }

bool Resizes(Kind kind);

/// Whether a Pad/RandomCrop step may add padding (RandomCrop without padding never does).
bool CanPad(const TransformStep& s) {
  const PaddingParams& p = *PaddingOf(s);
  const RandomCropParams* crop = s.get_if<RandomCropParams>();
  return (crop != nullptr && crop->pad_if_needed) || IsZoomOut(s) || p.pad[0] != 0 ||
         p.pad[1] != 0 || p.pad[2] != 0 || p.pad[3] != 0;
}

/// Whether the constant, non-zero fill of steps[i] (a Pad/RandomCrop) fuses: its padding must be
/// the only padding of the output, so that the render can paint every pixel outside the shown
/// image with it (SampleGeometry::has_fill): no resize after it (which would blend it), no
/// other step that pads with another fill or mode, and no CenterCrop (which pads with zeros).
bool FusesFill(const std::vector<TransformStep>& steps, size_t i) {
  const PaddingParams& s = *PaddingOf(steps[i]);
  for (size_t j = 0; j < steps.size(); ++j) {
    const TransformStep& step = steps[j];
    if ((j > i && Resizes(step.kind())) || step.kind() == Kind::kCenterCrop) return false;
    const PaddingParams* t = PaddingOf(step);
    if (j != i && t != nullptr && CanPad(step) &&
        (t->pad_mode != PadMode::kConstant || t->fill[0] != s.fill[0] ||
         t->fill[1] != s.fill[1] || t->fill[2] != s.fill[2])) {
      return false;
    }
  }
  return true;
}

/// Steps the geometric stage absorbs: the geometric ones, and padding/cropping with a zero
/// constant fill (the resampler writes zeros outside the source) or with another constant fill
/// that FusesFill.
bool IsFusable(const std::vector<TransformStep>& steps, size_t i) {
  const TransformStep& s = steps[i];
  const StepStage stage = KindInfo(s.kind()).stage;
  const PaddingParams* padding = PaddingOf(s);
  return stage == StepStage::kGeometry ||
         (stage == StepStage::kCropPad && padding->pad_mode == PadMode::kConstant &&
          (ZeroConstantFill(*padding) || FusesFill(steps, i)));
}

bool IsOutputStep(Kind kind) { return KindInfo(kind).stage == StepStage::kOutput; }
bool Resizes(Kind kind) { return KindInfo(kind).resizes; }

/// Why `s` starts the image stage: what keeps it out of the fused resample.
std::string ImageStageReason(const TransformStep& s) {
  if (IsZoomOut(s)) return "RandomZoomOut fuses only as the output's one padding";
  if (const PaddingParams* padding = PaddingOf(s)) {
    static constexpr const char* kModes[] = {"constant", "edge", "reflect", "symmetric"};
    if (padding->pad_mode != PadMode::kConstant) {
      return absl::StrCat(KindName(s.kind()), " with padding_mode='",
                          kModes[static_cast<int>(padding->pad_mode)],
                          "' runs on the 8-bit image");
    }
    return absl::StrCat(KindName(s.kind()), " with a non-zero fill runs on the 8-bit image");
  }
  if (const AugOpParams* op = s.get_if<AugOpParams>()) {
    return absl::StrCat("the ", AugOpName(op->aug_op), " step runs on the 8-bit image");
  }
  return absl::StrCat(KindName(s.kind()), " runs on the 8-bit image");
}

constexpr const char* kZoomOutError =
    "RandomZoomOut is native as the output's one padding, before any colour step and with no "
    "resize after it";

std::string GuardedStepError(const TransformStep& s) {
  return absl::StrCat("a RandomApply guards it, and only image steps that keep the size (colour, "
                      "blur, grayscale, the single-op and policy steps, rotation, affine, "
                      "flips) can be guarded natively; ",
                      KindName(s.kind()), " is not one");
}

std::string GuardPastEndError(const std::vector<TransformStep>& steps, size_t i) {
  return absl::StrCat("it guards the next ", steps[i].get<RandomApplyParams>().apply_steps,
                      " step(s), more than follow it in the chain or in the RandomApply that "
                      "guards it");
}

}  // namespace

const PaddingParams* PaddingOf(const TransformStep& s) {
  if (const RandomCropParams* crop = s.get_if<RandomCropParams>()) return crop;
  return s.get_if<PadParams>();
}

bool IsZoomOut(const TransformStep& s) {
  const PadParams* pad = s.get_if<PadParams>();
  return pad != nullptr && pad->zoom_out.has_value();
}

bool ZeroConstantFill(const PaddingParams& s) {
  return s.pad_mode == PadMode::kConstant && s.fill[0] == 0.f && s.fill[1] == 0.f &&
         s.fill[2] == 0.f;
}

StageWalk::Rule StageWalk::Step(const std::vector<TransformStep>& steps, size_t i) {
  const TransformStep& s = steps[i];
  while (!guard_ends_.empty() && guard_ends_.back() < i) guard_ends_.pop_back();
  if (!guard_ends_.empty() && !Guardable(s)) return Rule::kGuardedStep;
  if (const RandomApplyParams* guard = s.get_if<RandomApplyParams>()) {
    const size_t end = i + static_cast<size_t>(std::max(guard->apply_steps, 0));
    if (end >= steps.size() || (!guard_ends_.empty() && end > guard_ends_.back())) {
      return Rule::kGuardPastEnd;
    }
    if (end > i) guard_ends_.push_back(end);
  }
  Rule rule = Rule::kNone;
  if (IsOutputStep(s.kind())) {
    stage_ = Stage::kOutput;
    if (s.kind() == Kind::kToTensor) {
      if (seen_to_tensor_) return Rule::kToTensorTwice;
      seen_to_tensor_ = true;
    } else if (!seen_to_tensor_) {
      return Rule::kNeedsTensor;
    }
  } else if (stage_ == Stage::kOutput) {
    return Rule::kAfterTensor;
  } else if (stage_ == Stage::kGeometry && !IsFusable(steps, i)) {
    stage_ = Stage::kImage;
    image_begin_ = i;
  } else if (stage_ == Stage::kGeometry && resized_at_ && Resizes(s.kind())) {
    // The fused geometry resamples once, from the source; torchvision resamples twice, and
    // the second pass filters the first one's rounded levels: one resample cannot equal that.
    rule = Rule::kSecondResize;
  } else if (stage_ == Stage::kImage && Resizes(s.kind())) {
    // Flips and CenterCrop move pixels of the 8-bit image; a resize would need a second
    // resample of it.
    rule = Rule::kResizeAfterImage;
  }
  // RandomZoomOut has no 8-bit image form: where it cannot fuse, the chain is refused there
  // (and the steps after it see the image stage begun, as after any step that cannot fuse).
  if (IsZoomOut(s) && stage_ != Stage::kGeometry && rule == Rule::kNone) {
    rule = Rule::kZoomOutUnfused;
  }
  if (Resizes(s.kind()) && rule == Rule::kNone) resized_at_ = i;
  return rule;
}

bool StageWalk::Guardable(const TransformStep& s) {
  const Kind kind = s.kind();
  return KindInfo(kind).stage == StepStage::kImage || kind == Kind::kRandomHorizontalFlip ||
         kind == Kind::kRandomVerticalFlip;
}

std::string StageOrderError(const std::vector<TransformStep>& steps, size_t first) {
  using Rule = StageWalk::Rule;
  StageWalk walk;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Rule rule = walk.Step(steps, i);
    if (i < first || rule == Rule::kNone) continue;
    switch (rule) {
      case Rule::kAfterTensor:
      case Rule::kToTensorTwice:
        return "it runs on the tensor after ToTensor";
      case Rule::kNeedsTensor:
        return "it needs ToTensor before it";
      case Rule::kResizeAfterImage:
        return absl::StrCat("a resize after an earlier step that cannot fuse into the resample (",
                            ImageStageReason(steps[walk.image_begin()]),
                            ") would need a second resample, which is not native");
      case Rule::kSecondResize:
        return "a second resize would need a second resample, which is not native";
      case Rule::kGuardedStep:
        return GuardedStepError(steps[i]);
      case Rule::kGuardPastEnd:
        return GuardPastEndError(steps, i);
      case Rule::kZoomOutUnfused:
        return kZoomOutError;
      case Rule::kNone:
        break;
    }
  }
  return "";
}

std::string StageRuleError(const std::vector<TransformStep>& steps, size_t i,
                           StageWalk::Rule rule, const StageWalk& walk) {
  using Rule = StageWalk::Rule;
  const TransformStep& s = steps[i];
  switch (rule) {
    case Rule::kNone:
      break;
    case Rule::kAfterTensor:
      return "image steps must come before ToTensor/Normalize";
    case Rule::kToTensorTwice:
      return "ToTensor appears more than once";
    case Rule::kNeedsTensor:
      return s.kind() == Kind::kNormalize ? "Normalize needs ToTensor before it"
                                        : "RandomErasing works on the tensor: put ToTensor first";
    case Rule::kSecondResize:
      return absl::StrCat("a second resize (after step ", *walk.resized_at(), ", ",
                          KindName(steps[*walk.resized_at()].kind()),
                          ") would need a second resample, which is not native");
    case Rule::kResizeAfterImage:
      return absl::StrCat("a resize after step ", walk.image_begin(), " (",
                          ImageStageReason(steps[walk.image_begin()]),
                          ") is not supported natively");
    case Rule::kGuardedStep:
      return GuardedStepError(s);
    case Rule::kGuardPastEnd:
      return GuardPastEndError(steps, i);
    case Rule::kZoomOutUnfused:
      return kZoomOutError;
  }
  return "";
}

}  // namespace ringloader
