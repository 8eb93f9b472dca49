#pragma once
/// One decoder for every image format torchvision's ImageFolder picks up, chosen by the file's
/// signature (never its name): JPEG (libjpeg-turbo, see jpeg_decoder.h), PNG (libspng), WebP
/// (libwebp), BMP, TIFF (libtiff; the layouts Pillow reads as plain samples) and binary PNM
/// (PBM/PGM/PPM). Every format converts to RGB exactly as
/// Pillow's `Image.open(f).convert("RGB")` does, so lossless formats give the same pixels as
/// torchvision's default loader.
///
/// JPEG streams rows into the transform (scaled + region-of-interest decoding); the other
/// formats decode the whole image into a grow-only buffer and hand it to RenderSample.
///
/// Errors: InvalidArgument (not an image: names what the bytes look like), Unimplemented (a
/// known format or variant that is not decoded natively: names it), DataLoss (corrupt or
/// truncated: names the format and the problem), OutOfRange (pixel limit), ResourceExhausted.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "decode/jpeg_decoder.h"
#include "transform/image_transform.h"

namespace ringloader {

/// The container formats the decoder recognises by signature.
enum class ImageFormat : uint8_t { kJpeg, kPng, kWebp, kBmp, kTiff, kPnm, kGif };

/// "JPEG", "PNG", "WebP", "BMP", "TIFF", "PNM", "GIF".
const char* ImageFormatName(ImageFormat format);

/// What the header says about an image.
struct ImageInfo {
  ImageFormat format = ImageFormat::kJpeg;
  int width = 0;
  int height = 0;
};

/// Decodes image byte buffers of any supported format. Not thread-safe: one per thread; its
/// buffers are grow-only, so a long-lived decoder allocates only what the libraries need.
class ImageDecoder {
 public:
  ImageDecoder();
  ~ImageDecoder();
  ImageDecoder(const ImageDecoder&) = delete;
  ImageDecoder& operator=(const ImageDecoder&) = delete;

  /// Refuse images with more pixels than this (decompression bombs) before allocating.
  void set_max_image_pixels(uint64_t max_pixels);
  /// JPEG only: DCT scaling and region-of-interest decoding (default true). Off: full decode.
  void set_fast_paths(bool enabled);
  /// JPEG: allow DCT-scaled decoding (see JpegDecoder::set_dct_scaling).
  void set_dct_scaling(bool enabled);
  /// JPEG: the fast_decode level (see JpegDecoder::set_fast_decode; replaces set_dct_scaling's).
  void set_fast_decode(FastDecode level);
  /// JPEG: refuse data libjpeg only warns about (see JpegDecoder::set_strict; default true).
  void set_strict(bool enabled);
  /// Apply the EXIF orientation (JPEG APP1, PNG eXIf, WebP EXIF, a TIFF's own tag) as Pillow's
  /// ImageOps.exif_transpose does, before the transform (default false, as torchvision). An
  /// image that needs it is decoded whole (no region-of-interest or DCT-scaled JPEG decode).
  /// A TIFF's Orientation tag is applied either way, as Pillow's TIFF reader does.
  void set_exif_transpose(bool enabled);
  /// Charge each decode's buffers (the decoded image, the resampler's intermediates, a
  /// progressive JPEG's coefficients, an orientation's copy) to `budget` before allocating them:
  /// a decode that needs more than the budget allows fails with ResourceExhausted naming the
  /// image and the bytes, and one that needs more than is free waits for it. Between images the
  /// decoder keeps at most the budget's allowance. Null (the default): no accounting. See
  /// memory/decode_budget.h.
  void set_memory_budget(DecodeBudget* budget);

  /// Bytes the decoder keeps between images (its grow-only buffers).
  uint64_t RetainedBytes() const;

  /// Reads the header only (for WebP and PNG: what the library parses before pixel data). With
  /// exif_transpose, the size is the upright image's.
  absl::StatusOr<ImageInfo> ReadInfo(const uint8_t* data, size_t size);

  /// Full-resolution decode to packed RGB.
  absl::StatusOr<RgbImage> DecodeFull(const uint8_t* data, size_t size);

  /// A label image (mode="mask") as Pillow's Image.open() holds it: a palette image's indices
  /// (no palette lookup) or a gray image's values, replicated into R, G and B; no EXIF
  /// orientation (a TIFF's own Orientation tag applies, as in Pillow). PNG, BMP and TIFF; a
  /// layout Pillow opens in another mode than "P" or "L" (RGB, 16-bit, black/white) and other
  /// formats are Unimplemented, naming what the file is.
  absl::StatusOr<RgbImage> DecodeLabels(const uint8_t* data, size_t size);

  /// Decodes, applies `pipeline` with random draws from `rng`, and writes exactly
  /// pipeline.SampleBytes() bytes at `dst` in the pipeline's dtype and layout. For formats
  /// other than JPEG, `stats` reports a full-resolution decode (scale 8/8).
  absl::Status DecodeInto(const uint8_t* data, size_t size, const TransformPipeline& pipeline,
                          SampleRng& rng, void* dst, DecodeStats* stats = nullptr);

 private:
  /// Full decode as stored (no EXIF orientation applied).
  absl::StatusOr<RgbImage> DecodeStored(ImageFormat format, const uint8_t* data, size_t size);
  /// With a budget: the grant for decoding a whole-image format (`extra`: bytes beside the
  /// reader's own, such as the copies DecodeFull returns); `pipeline` and `rng` (a copy is
  /// planned on) add the render stage's buffers for DecodeInto.
  absl::Status Reserve(ImageFormat format, const uint8_t* data, size_t size, uint64_t extra_per_pixel,
                       const TransformPipeline* pipeline, const SampleRng* rng, DecodeBudget::Grant* grant);
  /// Releases the buffers kept past the allowance.
  void TrimToAllowance();
  absl::Status DecodeIntoBudgeted(const uint8_t* data, size_t size, const TransformPipeline& pipeline,
                                  SampleRng& rng, void* dst, DecodeStats* stats, DecodeBudget::Grant* grant);

  struct State;
  JpegDecoder jpeg_;
  std::unique_ptr<State> state_;
  uint64_t max_pixels_ = kDefaultMaxImagePixels;
  bool exif_transpose_ = false;
  DecodeBudget* budget_ = nullptr;
};

}  // namespace ringloader
