/// libFuzzer target for ImageDecoder, the one entry point for every format: format sniffing,
/// the PNG (libspng), WebP (libwebp), BMP, PNM and GIF readers, the pixel limit and the render
/// stage, through ReadInfo, DecodeFull and DecodeInto with fixed train and eval pipelines on one
/// long-lived decoder, as a loader worker uses it. JPEG inputs reach the JPEG decoder, which
/// jpeg_decode_fuzzer covers in depth.
///
/// Contract checked on every input besides what ASan/UBSan catch (a break aborts: a finding):
///  * a failure is a Status with a specific code and a message, never a crash;
///  * ReadInfo/DecodeFull agree on dimensions; DecodeFull returns exactly w*h*3 bytes;
///  * a successful DecodeInto writes every byte of SampleBytes() and is deterministic;
///  * afterwards the same decoder still decodes known-good images (JPEG, PNM) identically, so
///    no state leaks from one image into the next;
///  * a PNG gets the same verdict and pixels from the libdeflate fast path as from libspng.
///
/// libspng and libwebp come from the system, not coverage-instrumented: coverage steers by
/// ringloader's own code (sniffing, the BMP/PNM/GIF parsers, the PNG/WebP conversions and
/// limits).

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fuzz_common.h"
#include "decode/image_decoder.h"
#include "decode/image_formats.h"
#include "testing/jpeg_fixtures.h"
#include "transform/image_transform.h"
#include "transform/random.h"

namespace ringloader {
namespace {

/// Keeps one input fast and small; the limit check itself is exercised either way.
constexpr uint64_t kMaxPixels = uint64_t{1} << 22;
constexpr int kOut = 64;

[[noreturn]] void Finding(const char* what, const absl::Status& status = absl::OkStatus()) {
  fuzz::Finding("image_decode_fuzzer", what, status);
}

TransformPipeline TrainPipeline() { return fuzz::TrainPipeline(kOut, "image_decode_fuzzer"); }
TransformPipeline EvalPipeline() { return fuzz::EvalPipeline(kOut, "image_decode_fuzzer"); }

/// A 31 x 23 binary PPM of the fixtures' texture.
std::vector<uint8_t> KnownGoodPnm() {
  const RgbImage t = testing::MakeTexture(31, 23, 9);
  const std::string header = "P6\n31 23\n255\n";
  std::vector<uint8_t> out(header.begin(), header.end());
  out.insert(out.end(), t.pixels.begin(), t.pixels.end());
  return out;
}

std::vector<uint8_t> KnownGoodJpeg() {
  testing::JpegFlavor f;
  f.width = 97;
  f.height = 71;
  f.seed = 5;
  return testing::EncodeJpeg(f);
}

/// Everything that lives across inputs, as in a loader worker.
struct Harness {
  ImageDecoder decoder;
  TransformPipeline train = TrainPipeline();
  TransformPipeline eval = EvalPipeline();
  std::vector<std::vector<uint8_t>> known_good = {KnownGoodJpeg(), KnownGoodPnm()};
  std::vector<std::vector<uint8_t>> known_good_out;  // train output on a fresh decoder
  Harness() {
    decoder.set_max_image_pixels(kMaxPixels);
    known_good_out = DecodeKnownGood(decoder);
  }
  std::vector<std::vector<uint8_t>> DecodeKnownGood(ImageDecoder& d) const {
    std::vector<std::vector<uint8_t>> outs;
    for (const std::vector<uint8_t>& file : known_good) {
      std::vector<uint8_t> out(train.SampleBytes());
      SampleRng rng(42);
      const absl::Status s = d.DecodeInto(file.data(), file.size(), train, rng, out.data());
      if (!s.ok()) Finding("known-good image failed to decode", s);
      outs.push_back(std::move(out));
    }
    return outs;
  }
};

void CheckError(const absl::Status& s) { fuzz::CheckError("image_decode_fuzzer", s); }

/// Exact-size heap block, so ASan reports a write one byte past SampleBytes().
absl::Status DecodeOnce(ImageDecoder& d, const uint8_t* data, size_t size,
                        const TransformPipeline& p, uint64_t seed, uint8_t fill,
                        std::vector<uint8_t>* out) {
  std::unique_ptr<uint8_t[]> dst(new uint8_t[p.SampleBytes()]);
  std::memset(dst.get(), fill, p.SampleBytes());
  SampleRng rng(seed);
  const absl::Status s = d.DecodeInto(data, size, p, rng, dst.get());
  if (s.ok()) out->assign(dst.get(), dst.get() + p.SampleBytes());
  return s;
}

/// The PNG fast path (libdeflate + in-place unfiltering) may only ever agree with libspng: the
/// same status (code and message) and, when it decodes, the same pixels.
void CheckPngPathsAgree(const uint8_t* data, size_t size) {
  static decode_internal::Scratch* fast_scratch = new decode_internal::Scratch();
  static decode_internal::Scratch* spng_scratch = new decode_internal::Scratch();
  decode_internal::Decoded fast, spng;
  const absl::Status a = decode_internal::PngDecode(data, size, kMaxPixels, *fast_scratch, &fast);
  const absl::Status b =
      decode_internal::PngDecodeSpng(data, size, kMaxPixels, *spng_scratch, &spng);
  if (a != b) Finding("the PNG fast path's verdict differs from libspng's", a);
  if (!a.ok()) return;
  if (fast.width != spng.width || fast.height != spng.height) {
    Finding("the PNG fast path's size differs from libspng's");
  }
  for (int y = 0; y < fast.height; ++y) {
    const uint8_t* p = fast.pixels + fast.stride * static_cast<size_t>(y);
    const uint8_t* q = spng.pixels + spng.stride * static_cast<size_t>(y);
    for (int x = 0; x < fast.width; ++x) {
      if (std::memcmp(p + x * fast.bytes_per_pixel, q + x * spng.bytes_per_pixel, 3) != 0) {
        Finding("the PNG fast path's pixels differ from libspng's");
      }
    }
  }
}

}  // namespace
}  // namespace ringloader

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ringloader;
  static Harness* h = new Harness();  // never destroyed: outlives every input, like a worker's
  ImageDecoder& d = h->decoder;
  const uint64_t hash = fuzz::InputHash(data, size);
  const uint8_t* bytes = size == 0 ? nullptr : data;

  absl::StatusOr<ImageInfo> info = d.ReadInfo(bytes, size);
  CheckError(info.status());
  if (info.ok()) {
    if (info->width < 1 || info->height < 1) Finding("ReadInfo returned impossible dimensions");
    if (uint64_t(info->width) * uint64_t(info->height) > kMaxPixels) {
      Finding("ReadInfo accepted an image over the pixel limit");
    }
  }

  fuzz::CheckDecodeContract("image_decode_fuzzer", *h, info, bytes, size, hash, DecodeOnce);
  if (size >= 8 && std::memcmp(data, "\x89PNG\r\n\x1a\n", 8) == 0) CheckPngPathsAgree(data, size);
  return 0;
}
