#include "decode/image_decoder.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_util.h"
#include "decode/image_formats.h"
#include "transform/render.h"

namespace ringloader {

namespace decode_internal {

absl::Status CheckPixelLimit(const char* format, int width, int height, uint64_t max_pixels) {
  if (width < 1 || height < 1) {
    return absl::DataLossError(absl::StrCat("corrupt ", format, ": image size ", width, " x ",
                                            height));
  }
  const uint64_t pixels = uint64_t(width) * uint64_t(height);
  if (pixels > max_pixels) {
    return absl::OutOfRangeError(
        absl::StrFormat("%s image %d x %d = %d pixels exceeds the limit %d", format, width,
                        height, pixels, max_pixels));
  }
  return absl::OkStatus();
}

}  // namespace decode_internal

namespace {

using decode_internal::Decoded;
using decode_internal::ImageSize;

bool StartsWith(const uint8_t* d, size_t n, const char* sig, size_t len) {
  return n >= len && std::memcmp(d, sig, len) == 0;
}

bool IsPrintableText(const uint8_t* d, size_t n) {
  const size_t m = std::min<size_t>(n, 64);
  for (size_t i = 0; i < m; ++i) {
    const uint8_t c = d[i];
    if (!(c == '\t' || c == '\n' || c == '\r' || (c >= 0x20 && c < 0x7f))) return false;
  }
  return true;
}

/// Netpbm magic numbers Pillow's PpmImagePlugin knows (P1-P6, PFM, its "Py" extensions), read
/// as it reads them: up to 6 bytes, ended by whitespace.
bool IsNetpbmMagic(const uint8_t* d, size_t n) {
  size_t len = 0;
  while (len < n && len < 6 && !(d[len] == ' ' || (d[len] >= '\t' && d[len] <= '\r'))) ++len;
  const std::string magic(reinterpret_cast<const char*>(d), len);
  for (const char* known : {"P1", "P2", "P3", "P4", "P5", "P6", "Pf", "PyP", "PyRGBA", "PyCMYK"}) {
    if (magic == known) return true;
  }
  return false;
}

/// The format by signature, as Pillow's plugins accept it: JPEG (FF, then the JPEG decoder
/// judges the rest), PNG, RIFF/WEBP, "BM", and the Netpbm magic numbers.
/// Otherwise the status says what the bytes look like: Unimplemented for image formats that are
/// recognised but not decoded natively, InvalidArgument for anything else.
absl::StatusOr<ImageFormat> Sniff(const uint8_t* d, size_t n) {
  if (n == 0 || d == nullptr) return absl::InvalidArgumentError("not an image: empty file");
  if (d[0] == 0xFF) return ImageFormat::kJpeg;
  if (StartsWith(d, n, "\x89PNG\r\n\x1a\n", 8)) return ImageFormat::kPng;
  if (StartsWith(d, n, "RIFF", 4) && n >= 12 && std::memcmp(d + 8, "WEBP", 4) == 0) {
    return ImageFormat::kWebp;
  }
  if (StartsWith(d, n, "BM", 2)) return ImageFormat::kBmp;
  if (StartsWith(d, n, "II*\0", 4) || StartsWith(d, n, "MM\0*", 4)) return ImageFormat::kTiff;
  if (IsNetpbmMagic(d, n)) return ImageFormat::kPnm;
  const char* unsupported = nullptr;
  if (StartsWith(d, n, "GIF87a", 6) || StartsWith(d, n, "GIF89a", 6)) {
    unsupported = "GIF";
  } else if (n >= 12 && std::memcmp(d + 4, "ftyp", 4) == 0) {
    unsupported = "ISO media (HEIF/AVIF/MP4 'ftyp')";
  } else if (StartsWith(d, n, "\0\0\0\x0cjP  ", 8) || StartsWith(d, n, "\xff\x4f\xff\x51", 4)) {
    unsupported = "JPEG 2000";
  }
  if (unsupported != nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("unsupported image format: ", unsupported, " is not decoded natively"));
  }
  if (StartsWith(d, n, "RIFF", 4)) {
    return absl::InvalidArgumentError("not an image: RIFF container that is not WebP");
  }
  if (IsPrintableText(d, n)) return absl::InvalidArgumentError("not an image: text data");
  std::string what = "not an image: unknown data starting with";
  for (size_t i = 0; i < std::min<size_t>(n, 4); ++i) absl::StrAppendFormat(&what, " %02x", d[i]);
  return absl::InvalidArgumentError(what);
}

}  // namespace

const char* ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kWebp:
      return "WebP";
    case ImageFormat::kBmp:
      return "BMP";
    case ImageFormat::kTiff:
      return "TIFF";
    case ImageFormat::kPnm:
      return "PNM";
  }
  return "unknown";
}

struct ImageDecoder::State {
  decode_internal::Scratch scratch;
  RenderState render;
};

ImageDecoder::ImageDecoder() : state_(std::make_unique<State>()) {}
ImageDecoder::~ImageDecoder() = default;

void ImageDecoder::set_max_image_pixels(uint64_t max_pixels) {
  max_pixels_ = max_pixels;
  jpeg_.set_max_image_pixels(max_pixels);
}

void ImageDecoder::set_fast_paths(bool enabled) { jpeg_.set_fast_paths(enabled); }
void ImageDecoder::set_dct_scaling(bool enabled) { jpeg_.set_dct_scaling(enabled); }

namespace {

/// Header of a whole-image format.
absl::StatusOr<ImageSize> Header(ImageFormat format, const uint8_t* data, size_t size) {
  switch (format) {
    case ImageFormat::kPng:
      return decode_internal::PngHeader(data, size);
    case ImageFormat::kWebp:
      return decode_internal::WebpHeader(data, size);
    case ImageFormat::kBmp:
      return decode_internal::BmpHeader(data, size);
    case ImageFormat::kTiff:
      return decode_internal::TiffHeader(data, size);
    case ImageFormat::kPnm:
      return decode_internal::PnmHeader(data, size);
    case ImageFormat::kJpeg:
      break;
  }
  return absl::InternalError("JPEG has no whole-image reader");
}

/// Decode of a whole-image format into `scratch`.
absl::Status Decode(ImageFormat format, const uint8_t* data, size_t size, uint64_t max_pixels,
                    decode_internal::Scratch& scratch, Decoded* out) {
  switch (format) {
    case ImageFormat::kPng:
      return decode_internal::PngDecode(data, size, max_pixels, scratch, out);
    case ImageFormat::kWebp:
      return decode_internal::WebpDecode(data, size, max_pixels, scratch, out);
    case ImageFormat::kBmp:
      return decode_internal::BmpDecode(data, size, max_pixels, scratch, out);
    case ImageFormat::kTiff:
      return decode_internal::TiffDecode(data, size, max_pixels, scratch, out);
    case ImageFormat::kPnm:
      return decode_internal::PnmDecode(data, size, max_pixels, scratch, out);
    case ImageFormat::kJpeg:
      break;
  }
  return absl::InternalError("JPEG has no whole-image reader");
}

}  // namespace

absl::StatusOr<ImageInfo> ImageDecoder::ReadInfo(const uint8_t* data, size_t size) {
  RL_ASSIGN_OR_RETURN(const ImageFormat format, Sniff(data, size));
  ImageInfo info;
  info.format = format;
  if (format == ImageFormat::kJpeg) {
    RL_ASSIGN_OR_RETURN(const JpegInfo jpeg, jpeg_.ReadInfo(data, size));
    info.width = jpeg.width;
    info.height = jpeg.height;
    return info;
  }
  RL_ASSIGN_OR_RETURN(const ImageSize s, Header(format, data, size));
  RL_RETURN_IF_ERROR(
      decode_internal::CheckPixelLimit(ImageFormatName(format), s.width, s.height, max_pixels_));
  info.width = s.width;
  info.height = s.height;
  return info;
}

absl::StatusOr<RgbImage> ImageDecoder::DecodeFull(const uint8_t* data, size_t size) {
  RL_ASSIGN_OR_RETURN(const ImageFormat format, Sniff(data, size));
  if (format == ImageFormat::kJpeg) return jpeg_.DecodeFull(data, size);
  Decoded d;
  RL_RETURN_IF_ERROR(Decode(format, data, size, max_pixels_, state_->scratch, &d));
  RgbImage image;
  image.width = d.width;
  image.height = d.height;
  const size_t row = static_cast<size_t>(d.width) * 3;
  image.pixels.resize(row * static_cast<size_t>(d.height));
  for (int y = 0; y < d.height; ++y) {
    const uint8_t* in = d.pixels + d.stride * static_cast<size_t>(y);
    uint8_t* out = image.pixels.data() + row * static_cast<size_t>(y);
    if (d.bytes_per_pixel == 3) {
      std::memcpy(out, in, row);
    } else {
      for (int x = 0; x < d.width; ++x, in += 4, out += 3) std::memcpy(out, in, 3);
    }
  }
  return image;
}

absl::Status ImageDecoder::DecodeInto(const uint8_t* data, size_t size,
                                      const TransformPipeline& pipeline, SampleRng& rng, void* dst,
                                      DecodeStats* stats) {
  RL_ASSIGN_OR_RETURN(const ImageFormat format, Sniff(data, size));
  if (format == ImageFormat::kJpeg) return jpeg_.DecodeInto(data, size, pipeline, rng, dst, stats);
  Decoded d;
  RL_RETURN_IF_ERROR(Decode(format, data, size, max_pixels_, state_->scratch, &d));
  if (stats) *stats = DecodeStats{8, d.width, d.height, 0};
  const SampleGeometry g = pipeline.Plan(d.width, d.height, rng);
  return RenderSample(d.pixels, d.stride, d.bytes_per_pixel, d.width, d.height, pipeline, g, rng,
                      state_->render, dst);
}

}  // namespace ringloader
