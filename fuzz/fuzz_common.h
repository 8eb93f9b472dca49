#pragma once
/// What the fuzz targets share: how a broken contract is reported, and the train and eval
/// chains a loader worker runs (built with the public, torchvision-named builders).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ringloader/transforms.h"
#include "transform/image_transform.h"
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

/// The contract the decode targets check on one input after ReadInfo (`info`): DecodeFull agrees
/// with ReadInfo; DecodeInto through the harness's train or eval chain (picked by the input's
/// hash, as are the fast paths: 3 inputs in 4 take them, as in production), run twice by
/// `decode_once(decoder, bytes, size, chain, seed, fill, &out)` into blocks pre-filled with 0x00
/// and 0xFF, writes every byte and writes them identically; train outputs are finite and
/// normalised; and the known-good images then decode as on a fresh decoder (no state leaks).
template <typename Harness, typename Info, typename DecodeOnce>
void CheckDecodeContract(const char* target, Harness& h, const absl::StatusOr<Info>& info,
                         const uint8_t* bytes, size_t size, uint64_t hash, DecodeOnce decode_once) {
  auto& d = h.decoder;
  auto full = d.DecodeFull(bytes, size);
  CheckError(target, full.status());
  if (full.ok()) {
    if (!info.ok()) Finding(target, "DecodeFull succeeded where ReadInfo failed", info.status());
    if (full->width != info->width || full->height != info->height) {
      Finding(target, "DecodeFull and ReadInfo disagree on dimensions");
    }
    if (full->pixels.size() != size_t(full->width) * size_t(full->height) * 3) {
      Finding(target, "DecodeFull returned a wrongly sized buffer");
    }
  }

  const bool train = (hash & 1) != 0;
  const auto& p = train ? h.train : h.eval;
  d.set_fast_paths((hash & 6) != 0);
  std::vector<uint8_t> first, second;
  const absl::Status s = decode_once(d, bytes, size, p, hash, 0x00, &first);
  CheckError(target, s);
  if (s.ok()) {
    if (!info.ok()) Finding(target, "DecodeInto succeeded where ReadInfo failed", info.status());
    const absl::Status again = decode_once(d, bytes, size, p, hash, 0xFF, &second);
    if (!again.ok()) Finding(target, "second identical DecodeInto failed", again);
    if (first != second) Finding(target, "DecodeInto left output bytes unwritten or is nondeterministic");
    if (train) {
      // All-0xFF bytes are a NaN: any float left unwritten shows up here as well.
      const float* f = reinterpret_cast<const float*>(second.data());
      for (size_t i = 0; i < second.size() / sizeof(float); ++i) {
        if (!std::isfinite(f[i]) || std::fabs(f[i]) > 3.0f) Finding(target, "train output out of range");
      }
    }
  }

  d.set_fast_paths(true);
  if (h.DecodeKnownGood(d) != h.known_good_out) {
    Finding(target, "decoder state leaked from the previous image into the next one");
  }
}

}  // namespace ringloader::fuzz
