#pragma once
/// What the fuzz targets share: how a broken contract is reported, and the train and eval
/// chains a loader worker runs (built with the public, torchvision-named builders).

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "ringloader/transforms.h"

namespace ringloader::fuzz {

/// Prints "<target>: contract violated: <what> (<status>)" and aborts, which libFuzzer records
/// as a crash with the input that caused it.
[[noreturn]] inline void Finding(const char* target, const char* what,
                                 const absl::Status& status = absl::OkStatus()) {
  std::fprintf(stderr, "%s: contract violated: %s (%s)\n", target, what,
               status.ToString().c_str());
  std::abort();
}

/// RandomResizedCrop(out) + RandomHorizontalFlip + ToTensor + Normalize(ImageNet), float32 CHW.
inline TransformPipeline TrainPipeline(int out, const char* target) {
  auto p = TransformPipeline::Create(transforms::ImageNetTrain(out), DType::kFloat32, Layout::kCHW);
  if (!p.ok()) Finding(target, "train pipeline", p.status());
  return *std::move(p);
}

/// Resize(out + out / 8) (shorter side) + CenterCrop(out), uint8 HWC. A CenterCrop larger than
/// the resized width of a very wide or tall image exercises the zero padding.
inline TransformPipeline EvalPipeline(int out, const char* target) {
  auto p = TransformPipeline::Create({transforms::Resize(out + out / 8), transforms::CenterCrop(out)},
                                     DType::kUint8, Layout::kHWC);
  if (!p.ok()) Finding(target, "eval pipeline", p.status());
  return *std::move(p);
}

}  // namespace ringloader::fuzz
