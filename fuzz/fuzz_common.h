#pragma once
/// What the fuzz targets share: how a broken contract is reported, and the train and eval
/// chains a loader worker runs (built with the public, torchvision-named builders).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "ringloader/transforms.h"
#include "transform/random.h"

namespace ringloader::fuzz {

/// Prints "<target>: contract violated: <what> (<status>)" and aborts, which libFuzzer records
/// as a crash with the input that caused it.
[[noreturn]] inline void Finding(const char* target, const char* what,
                                 const absl::Status& status = absl::OkStatus()) {
  std::fprintf(stderr, "%s: contract violated: %s (%s)\n", target, what,
               status.ToString().c_str());
  std::abort();
}

/// A decoder's failure must be a specific, explained Status: never Unknown or Internal, never
/// without a message.
inline void CheckError(const char* target, const absl::Status& s) {
  if (s.ok()) return;
  if (s.code() == absl::StatusCode::kUnknown || s.code() == absl::StatusCode::kInternal) {
    Finding(target, "unexpected status code", s);
  }
  if (s.message().empty()) Finding(target, "error without a message", s);
}

/// FNV-1a over the size and the first bytes: a per-input (reproducible) seed and path choice.
inline uint64_t InputHash(const uint8_t* data, size_t size) {
  uint64_t h = 1469598103934665603ULL ^ size;
  for (size_t i = 0; i < size && i < 64; ++i) h = (h ^ data[i]) * 1099511628211ULL;
  return Mix64(h);
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
