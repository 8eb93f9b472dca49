/// libFuzzer target for the decode + transform stage: JpegDecoder::ReadInfo, DecodeFull and
/// DecodeInto (scaled + ROI fast path and full-decode reference path) with fixed train and eval
/// pipelines, on one long-lived decoder, as a loader worker uses it.
///
/// Besides what ASan/UBSan catch, every input checks the decoder's contract and aborts (a
/// finding) when it breaks:
///  * a failure is a Status with a specific code and a message, never a crash;
///  * ReadInfo/DecodeFull agree on dimensions and DecodeFull returns exactly w*h*3 bytes;
///  * a successful DecodeInto writes every byte of SampleBytes() and nothing depends on what
///    the destination held before (decoded twice over different fill patterns; the destination
///    is an exact-size heap block so a write past it is an ASan report);
///  * afterwards the same decoder still decodes a known-good image bit-identically, so no state
///    (scale, crop, colour space, error flags) leaks from a bad image into the next one.
///
/// libjpeg-turbo comes from the system and is not coverage-instrumented: the fuzzer steers by
/// coverage of ringloader's own code (header handling, limits, scale/ROI choice, CMYK
/// conversion, resampler), which depends on the header fields it mutates. libjpeg-turbo's own
/// parser is fuzzed upstream.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "fuzz_common.h"
#include "decode/jpeg_decoder.h"
#include "testing/jpeg_fixtures.h"
#include "transform/image_transform.h"
#include "transform/random.h"

namespace ringloader {
namespace {

/// Small enough that a fuzzed header cannot make one input take seconds or hundreds of MiB
/// (the production default is Pillow's 179 MP); the limit check itself is exercised either way.
constexpr uint64_t kMaxPixels = uint64_t{1} << 22;

/// 64x64 output keeps executions fast while small seeds (up to ~400 px) still reach every DCT
/// scale (1/8 .. 8/8) and both ROI branches: the scale and crop arithmetic is size-independent.
constexpr int kOut = 64;

[[noreturn]] void Finding(const char* what, const absl::Status& status = absl::OkStatus()) {
  fuzz::Finding("jpeg_decode_fuzzer", what, status);
}

TransformPipeline TrainPipeline() { return fuzz::TrainPipeline(kOut, "jpeg_decode_fuzzer"); }
TransformPipeline EvalPipeline() { return fuzz::EvalPipeline(kOut, "jpeg_decode_fuzzer"); }

/// Everything that lives across inputs, as in a loader worker.
struct Harness {
  JpegDecoder decoder;
  TransformPipeline train = TrainPipeline();
  TransformPipeline eval = EvalPipeline();
  std::vector<uint8_t> known_good;      // a valid 4:2:0 JPEG
  std::vector<uint8_t> known_good_out;  // its train-pipeline output on a fresh decoder
  Harness() {
    decoder.set_max_image_pixels(kMaxPixels);
    testing::JpegFlavor f;
    f.width = 97;
    f.height = 71;
    f.seed = 5;
    known_good = testing::EncodeJpeg(f);
    known_good_out = DecodeKnownGood(decoder);
  }
  std::vector<uint8_t> DecodeKnownGood(JpegDecoder& d) const {
    std::vector<uint8_t> out(train.SampleBytes());
    SampleRng rng(42);
    const absl::Status s =
        d.DecodeInto(known_good.data(), known_good.size(), train, rng, out.data());
    if (!s.ok()) Finding("known-good image failed to decode", s);
    return out;
  }
};

void CheckError(const absl::Status& s) { fuzz::CheckError("jpeg_decode_fuzzer", s); }

/// Exact-size heap block, so ASan reports a write one byte past SampleBytes().
absl::Status DecodeOnce(JpegDecoder& d, const uint8_t* data, size_t size,
                        const TransformPipeline& p, uint64_t seed, uint8_t fill,
                        std::vector<uint8_t>* out) {
  std::unique_ptr<uint8_t[]> dst(new uint8_t[p.SampleBytes()]);
  std::memset(dst.get(), fill, p.SampleBytes());
  SampleRng rng(seed);
  DecodeStats stats;
  const absl::Status s = d.DecodeInto(data, size, p, rng, dst.get(), &stats);
  if (s.ok()) {
    if (stats.scale_num != 1 && stats.scale_num != 2 && stats.scale_num != 4 &&
        stats.scale_num != 8) {
      Finding("DCT scale outside {1,2,4,8}/8");
    }
    out->assign(dst.get(), dst.get() + p.SampleBytes());
  }
  return s;
}

}  // namespace
}  // namespace ringloader

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ringloader;
  static Harness* h = new Harness();  // never destroyed: outlives every input, like a worker's
  JpegDecoder& d = h->decoder;
  const uint64_t hash = fuzz::InputHash(data, size);
  // libFuzzer hands a non-null pointer even for empty inputs; the decoder must not read it.
  const uint8_t* bytes = size == 0 ? nullptr : data;

  absl::StatusOr<JpegInfo> info = d.ReadInfo(bytes, size);
  CheckError(info.status());
  if (info.ok()) {
    if (info->width < 1 || info->height < 1 || info->width > 65535 || info->height > 65535) {
      Finding("ReadInfo returned impossible dimensions");
    }
    if (uint64_t(info->width) * uint64_t(info->height) > kMaxPixels) {
      Finding("ReadInfo accepted an image over the pixel limit");
    }
    if (info->components != 1 && info->components != 3 && info->components != 4) {
      Finding("ReadInfo accepted an unsupported component count");
    }
  }

  fuzz::CheckDecodeContract("jpeg_decode_fuzzer", *h, info, bytes, size, hash, DecodeOnce);
  return 0;
}
