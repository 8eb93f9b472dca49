#include "decode/image_decoder.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_util.h"
#include "decode/image_formats.h"
#include "decode/signature.h"
#include "transform/render.h"
#include "transform/resample.h"

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
using decode_internal::DescribeBytes;
using decode_internal::ImageSize;
using decode_internal::Signature;
using decode_internal::SignatureOf;

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
/// judges the rest), PNG, RIFF/WEBP, "BM", the Netpbm magic numbers and GIF87a/GIF89a.
/// Otherwise the status says what the bytes look like: Unimplemented for image formats that are
/// recognised but not decoded natively, InvalidArgument for anything else.
absl::StatusOr<ImageFormat> Sniff(const uint8_t* d, size_t n) {
  if (n == 0 || d == nullptr) return absl::InvalidArgumentError("not an image: empty file");
  if (d[0] == 0xFF) return ImageFormat::kJpeg;
  if (IsNetpbmMagic(d, n)) return ImageFormat::kPnm;  // "P...": no other signature starts so
  const char* unsupported = nullptr;
  switch (SignatureOf(d, n)) {
    case Signature::kPng: return ImageFormat::kPng;
    case Signature::kWebp: return ImageFormat::kWebp;
    case Signature::kBmp: return ImageFormat::kBmp;
    case Signature::kTiff: return ImageFormat::kTiff;
    case Signature::kGif: return ImageFormat::kGif;
    case Signature::kIsoMedia: unsupported = "ISO media (HEIF/AVIF/MP4 'ftyp')"; break;
    case Signature::kJpeg2000: unsupported = "JPEG 2000"; break;
    case Signature::kRiff: return absl::InvalidArgumentError("not an image: RIFF container that is not WebP");
    case Signature::kJpeg:  // FF: handled above
    case Signature::kNone: break;
  }
  if (unsupported != nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("unsupported image format: ", unsupported, " is not decoded natively"));
  }
  return absl::InvalidArgumentError(absl::StrCat("not an image: ", DescribeBytes(d, n)));
}

uint32_t Be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

uint32_t Le32(const uint8_t* p) {
  return (uint32_t{p[3]} << 24) | (uint32_t{p[2]} << 16) | (uint32_t{p[1]} << 8) | p[0];
}

/// The Orientation tag (274) of IFD0 of a TIFF structure (an EXIF block, or a TIFF file); 1 when
/// absent, out of 1..8 or unreadable: Pillow ignores a broken EXIF block too.
int TiffOrientation(const uint8_t* d, size_t n) {
  if (n >= 6 && std::memcmp(d, "Exif\0\0", 6) == 0) d += 6, n -= 6;  // WebP may keep the prefix
  if (n < 8) return 1;
  const bool little = d[0] == 'I' && d[1] == 'I';
  if (!little && !(d[0] == 'M' && d[1] == 'M')) return 1;
  auto u16 = [&](size_t at) {
    return little ? uint32_t{d[at]} | (uint32_t{d[at + 1]} << 8)
                  : (uint32_t{d[at]} << 8) | d[at + 1];
  };
  auto u32 = [&](size_t at) { return little ? Le32(d + at) : Be32(d + at); };
  const size_t ifd = u32(4);
  if (ifd > n || n - ifd < 2) return 1;
  const size_t entries = u16(ifd);
  for (size_t e = 0; e < entries; ++e) {
    const size_t at = ifd + 2 + 12 * e;
    if (at > n || n - at < 12) return 1;
    if (u16(at) != 274) continue;
    const uint32_t type = u16(at + 2);
    const uint32_t value = type == 3 ? u16(at + 8) : type == 4 ? u32(at + 8) : 0;
    return value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
  }
  return 1;
}

/// The EXIF orientation Pillow's ImageOps.exif_transpose reads: JPEG's first "Exif" APP1
/// segment, PNG's eXIf chunk, WebP's EXIF chunk, a TIFF's own IFD0. 1 for the other formats.
int ExifOrientation(ImageFormat format, const uint8_t* d, size_t n) {
  switch (format) {
    case ImageFormat::kJpeg:
      for (size_t i = 2; i + 4 <= n && d[i] == 0xFF;) {
        const uint8_t marker = d[i + 1];
        if (marker == 0xFF) {  // fill byte
          ++i;
          continue;
        }
        if (marker == 0xDA || marker == 0xD9) break;  // the scan: no metadata after it
        const size_t len = (size_t{d[i + 2]} << 8) | d[i + 3];
        if (len < 2 || len > n - i - 2) break;
        if (marker == 0xE1 && len >= 8 && std::memcmp(d + i + 4, "Exif\0\0", 6) == 0) {
          return TiffOrientation(d + i + 4, len - 2);
        }
        i += 2 + len;
      }
      return 1;
    case ImageFormat::kPng:
      for (size_t i = 8; i + 12 <= n;) {
        const size_t len = Be32(d + i);
        if (len > n - i - 12) break;
        if (std::memcmp(d + i + 4, "eXIf", 4) == 0) return TiffOrientation(d + i + 8, len);
        if (std::memcmp(d + i + 4, "IEND", 4) == 0) break;
        i += 12 + len;
      }
      return 1;
    case ImageFormat::kWebp:
      for (size_t i = 12; i + 8 <= n;) {
        const size_t len = Le32(d + i + 4);
        if (len > n - i - 8) break;
        if (std::memcmp(d + i, "EXIF", 4) == 0) return TiffOrientation(d + i + 8, len);
        i += 8 + len + (len & 1);
      }
      return 1;
    case ImageFormat::kTiff:
      return TiffOrientation(d, n);
    case ImageFormat::kBmp:
    case ImageFormat::kPnm:
    case ImageFormat::kGif:
      return 1;
  }
  return 1;
}

/// The orientation to apply: Pillow's TIFF reader always applies a TIFF's own Orientation tag
/// (convert("RGB") is already upright, and exif_transpose then finds nothing to do).
int Orientation(bool exif_transpose, ImageFormat format, const uint8_t* d, size_t n) {
  return exif_transpose || format == ImageFormat::kTiff ? ExifOrientation(format, d, n) : 1;
}

/// `in` transposed as Pillow's ImageOps.exif_transpose does for EXIF `orientation` (2..8).
void Orient(const RgbImage& in, int orientation, RgbImage* out) {
  const int w = in.width, h = in.height;
  const bool swap = orientation >= 5;
  out->width = swap ? h : w;
  out->height = swap ? w : h;
  out->pixels.resize(in.pixels.size());
  for (int y = 0; y < out->height; ++y) {
    for (int x = 0; x < out->width; ++x) {
      int sx = x, sy = y;
      switch (orientation) {
        case 2: sx = w - 1 - x; break;                       // FLIP_LEFT_RIGHT
        case 3: sx = w - 1 - x, sy = h - 1 - y; break;       // ROTATE_180
        case 4: sy = h - 1 - y; break;                       // FLIP_TOP_BOTTOM
        case 5: sx = y, sy = x; break;                       // TRANSPOSE
        case 6: sx = y, sy = h - 1 - x; break;               // ROTATE_270
        case 7: sx = w - 1 - y, sy = h - 1 - x; break;       // TRANSVERSE
        case 8: sx = w - 1 - y, sy = x; break;               // ROTATE_90
      }
      std::memcpy(out->pixels.data() + (static_cast<size_t>(y) * out->width + x) * 3,
                  in.pixels.data() + (static_cast<size_t>(sy) * w + sx) * 3, 3);
    }
  }
}

}  // namespace

namespace {

/// One row per format: its name, and the whole-image reader's two entry points (none for JPEG,
/// which JpegDecoder reads scaled and by region). Adding a format is one row here.
struct FormatReader {
  ImageFormat format;
  const char* name;
  absl::StatusOr<ImageSize> (*header)(const uint8_t* data, size_t size);
  absl::Status (*decode)(const uint8_t* data, size_t size, uint64_t max_pixels,
                         decode_internal::Scratch& scratch, Decoded* out);
};

constexpr FormatReader kFormatReaders[] = {
    {ImageFormat::kJpeg, "JPEG", nullptr, nullptr},
    {ImageFormat::kPng, "PNG", decode_internal::PngHeader, decode_internal::PngDecode},
    {ImageFormat::kWebp, "WebP", decode_internal::WebpHeader, decode_internal::WebpDecode},
    {ImageFormat::kBmp, "BMP", decode_internal::BmpHeader, decode_internal::BmpDecode},
    {ImageFormat::kTiff, "TIFF", decode_internal::TiffHeader, decode_internal::TiffDecode},
    {ImageFormat::kPnm, "PNM", decode_internal::PnmHeader, decode_internal::PnmDecode},
    {ImageFormat::kGif, "GIF", decode_internal::GifHeader, decode_internal::GifDecode},
};

const FormatReader* ReaderOf(ImageFormat format) {
  for (const FormatReader& reader : kFormatReaders) {
    if (reader.format == format) return &reader;
  }
  return nullptr;
}

}  // namespace

const char* ImageFormatName(ImageFormat format) {
  const FormatReader* reader = ReaderOf(format);
  return reader != nullptr ? reader->name : "unknown";
}

namespace {

/// Bytes a whole-image reader allocates for a `w` x `h` image of `format` in `n` bytes of file:
/// its buffers as the readers size them (image_formats.h), and the decoding libraries' own
/// image-sized memory, from above.
uint64_t ReaderBytes(ImageFormat format, const uint8_t* d, size_t n, uint64_t w, uint64_t h) {
  const uint64_t px = w * h, rgb = px * 3;
  constexpr uint64_t kSmall = uint64_t{1} << 20;  // tables, contexts, a few rows
  switch (format) {
    case ImageFormat::kPng: {
      // IHDR: bit depth at byte 24, colour type at 25, interlace at 28 (the header read checked
      // the chunk).
      const uint64_t depth = n >= 29 ? d[24] : 16, type = n >= 29 ? d[25] : 6;
      const bool interlaced = n >= 29 ? d[28] != 0 : true;
      const uint64_t channels = type == 2 ? 3 : type == 4 ? 2 : type == 6 ? 4 : 1;
      const uint64_t row = (w * channels * depth + 7) / 8, filtered = (row + 1) * h;
      const bool common = depth == 8 && !interlaced && (type == 0 || type == 2 || type == 6);
      // The common photo: the filtered rows inflated in place (gray: then spread to RGB), the
      // IDAT data gathered when it spans chunks. Their buffers go before libspng is tried.
      const uint64_t fast = common ? filtered + (type == 0 ? rgb : 0) + n : 0;
      // libspng: the image in the PNG's own format (where 8-bit RGB and RGBA stay), else
      // converted to RGB.
      const bool in_place = depth == 8 && (type == 2 || type == 6);
      const uint64_t spng = row * h + (in_place ? 0 : rgb) + 4 * filtered / std::max<uint64_t>(h, 1);
      return std::max(fast, spng) + kSmall;
    }
    case ImageFormat::kWebp:
      // The RGB image; libwebp's own: a lossless image's ARGB pixels and their transforms' copy.
      return rgb + px * 8 + kSmall;
    case ImageFormat::kBmp:
      return px * 4 + px + n + kSmall;  // the image (RGBX at most); RLE runs expanded
    case ImageFormat::kTiff:
      return px * 8 + rgb + n + kSmall;  // samples (16-bit RGBA at most), RGB, a strip or tile
    case ImageFormat::kGif:
      return px + rgb + kSmall;  // indices, RGB
    case ImageFormat::kPnm:
      return px * 4 + kSmall;
    case ImageFormat::kJpeg:
      // A whole decode (JpegDecoder::DecodeFull): RGB, and every coefficient when the file has
      // several scans (2 bytes a sample, 3 samples a pixel at most).
      return rgb + px * 6 + w * 256 + kSmall;
  }
  return px * 8 + kSmall;
}

}  // namespace

struct ImageDecoder::State {
  decode_internal::Scratch scratch;
  RenderState render;
  RgbImage oriented;  // exif_transpose: the upright image
};

ImageDecoder::ImageDecoder() : state_(std::make_unique<State>()) {}
ImageDecoder::~ImageDecoder() = default;

void ImageDecoder::set_max_image_pixels(uint64_t max_pixels) {
  max_pixels_ = max_pixels;
  jpeg_.set_max_image_pixels(max_pixels);
}

void ImageDecoder::set_fast_paths(bool enabled) { jpeg_.set_fast_paths(enabled); }
void ImageDecoder::set_dct_scaling(bool enabled) { jpeg_.set_dct_scaling(enabled); }
void ImageDecoder::set_fast_decode(FastDecode level) { jpeg_.set_fast_decode(level); }
void ImageDecoder::set_strict(bool enabled) { jpeg_.set_strict(enabled); }
void ImageDecoder::set_exif_transpose(bool enabled) { exif_transpose_ = enabled; }
namespace {

/// Header of a whole-image format.
absl::StatusOr<ImageSize> Header(ImageFormat format, const uint8_t* data, size_t size) {
  const FormatReader* reader = ReaderOf(format);
  if (reader == nullptr || reader->header == nullptr) {
    return absl::InternalError(absl::StrCat(ImageFormatName(format), " has no whole-image reader"));
  }
  return reader->header(data, size);
}

/// Decode of a whole-image format into `scratch`.
absl::Status Decode(ImageFormat format, const uint8_t* data, size_t size, uint64_t max_pixels,
                    decode_internal::Scratch& scratch, Decoded* out) {
  const FormatReader* reader = ReaderOf(format);
  if (reader == nullptr || reader->decode == nullptr) {
    return absl::InternalError(absl::StrCat(ImageFormatName(format), " has no whole-image reader"));
  }
  return reader->decode(data, size, max_pixels, scratch, out);
}

}  // namespace

void ImageDecoder::set_memory_budget(DecodeBudget* budget) {
  budget_ = budget;
  jpeg_.set_memory_budget(budget);
}

uint64_t ImageDecoder::RetainedBytes() const {
  const decode_internal::Scratch& sc = state_->scratch;
  const RenderState& r = state_->render;
  return jpeg_.RetainedBytes() + sc.pixels.capacity() + sc.raw.capacity() + sc.tile.capacity() +
         sc.compressed.capacity() + sc.zeros.capacity() + r.resampler.RetainedBytes() + r.image.capacity() +
         r.augment.padded.capacity() + r.augment.padded2.capacity() + state_->oriented.pixels.capacity();
}

void ImageDecoder::TrimToAllowance() {
  if (budget_ == nullptr || RetainedBytes() <= budget_->allowance()) return;
  if (jpeg_.RetainedBytes() > 0) jpeg_.Trim();
  decode_internal::Scratch& sc = state_->scratch;
  for (std::vector<uint8_t>* v : {&sc.pixels, &sc.raw, &sc.tile, &sc.compressed, &sc.zeros,
                                  &state_->render.image, &state_->render.augment.padded,
                                  &state_->render.augment.padded2, &state_->oriented.pixels}) {
    std::vector<uint8_t>().swap(*v);
  }
  state_->render.resampler.Trim();
}

absl::Status ImageDecoder::Reserve(ImageFormat format, const uint8_t* data, size_t size,
                                   uint64_t extra_per_pixel, const TransformPipeline* pipeline,
                                   const SampleRng* rng, DecodeBudget::Grant* grant) {
  // The header's size; its errors are the decode's, which reports them.
  absl::StatusOr<ImageSize> header = ImageSize{};
  if (format == ImageFormat::kPng && size >= 24 && std::memcmp(data + 12, "IHDR", 4) == 0) {
    // Read in place: a PNG dataset's every sample passes here (the reader checks the chunk).
    header = ImageSize{static_cast<int>(Be32(data + 16) & 0x7fffffff),
                       static_cast<int>(Be32(data + 20) & 0x7fffffff)};
  } else if (format == ImageFormat::kJpeg) {
    absl::StatusOr<JpegInfo> info = jpeg_.ReadInfo(data, size);
    header = info.ok() ? absl::StatusOr<ImageSize>(ImageSize{info->width, info->height}) : info.status();
  } else {
    header = Header(format, data, size);
  }
  if (!header.ok() || header->width < 1 || header->height < 1) return absl::OkStatus();
  const uint64_t w = static_cast<uint64_t>(header->width), h = static_cast<uint64_t>(header->height);
  if (w * h > max_pixels_) return absl::OkStatus();  // refused by the reader, before allocating
  uint64_t need = ReaderBytes(format, data, size, w, h) + w * h * extra_per_pixel;
  if (pipeline != nullptr) {
    // The resampler keeps at most every source pixel as RGBX, the image stage three output
    // images: below the allowance with those, the exact sums are not needed.
    const uint64_t fixed_out =
        uint64_t(std::max(0, pipeline->out_h())) * uint64_t(std::max(0, pipeline->out_w())) * 3;
    if (pipeline->fixed_size() && need + w * h * 4 + 3 * fixed_out <= budget_->allowance()) {
      return absl::OkStatus();
    }
    SampleRng planner = *rng;  // DecodeInto plans again from the same state
    const bool swap = Orientation(exif_transpose_, format, data, size) >= 5;
    const int pw = static_cast<int>(swap ? h : w), ph = static_cast<int>(swap ? w : h);
    const SampleGeometry g = pipeline->Plan(pw, ph, planner);
    if (g.error == nullptr) {
      AxisMapping ax, ay;
      GeometryToAxes(g, 1.0, pw, ph, &ax, &ay);
      const uint64_t out = uint64_t(std::max(0, g.out_w)) * uint64_t(std::max(0, g.out_h)) * 3;
      need += Resampler::IntermediateBytes(ax, ay, pw, ph) + 3 * out;  // image stage: as JPEG's
    }
    if (need <= budget_->allowance()) return absl::OkStatus();
  }
  RL_ASSIGN_OR_RETURN(*grant,
                      budget_->Acquire(need, absl::StrCat(ImageFormatName(format), " image ", w, " x ", h)));
  return absl::OkStatus();
}

absl::StatusOr<ImageInfo> ImageDecoder::ReadInfo(const uint8_t* data, size_t size) {
  RL_ASSIGN_OR_RETURN(const ImageFormat format, Sniff(data, size));
  ImageInfo info;
  info.format = format;
  if (format == ImageFormat::kJpeg) {
    RL_ASSIGN_OR_RETURN(const JpegInfo jpeg, jpeg_.ReadInfo(data, size));
    info.width = jpeg.width;
    info.height = jpeg.height;
  } else {
    RL_ASSIGN_OR_RETURN(const ImageSize s, Header(format, data, size));
    RL_RETURN_IF_ERROR(
        decode_internal::CheckPixelLimit(ImageFormatName(format), s.width, s.height, max_pixels_));
    info.width = s.width;
    info.height = s.height;
  }
  if (Orientation(exif_transpose_, format, data, size) >= 5) {
    std::swap(info.width, info.height);
  }
  return info;
}

absl::StatusOr<RgbImage> ImageDecoder::DecodeFull(const uint8_t* data, size_t size) {
  RL_ASSIGN_OR_RETURN(const ImageFormat format, Sniff(data, size));
  const int orientation = Orientation(exif_transpose_, format, data, size);
  DecodeBudget::Grant grant;  // an upright JPEG charges in the JPEG decoder
  const bool whole = budget_ != nullptr && (format != ImageFormat::kJpeg || orientation != 1);
  if (whole) {
    // The RGB copy returned (a JPEG decodes into it), and the upright one.
    const uint64_t copies = (format == ImageFormat::kJpeg ? 0 : 3) + (orientation == 1 ? 0 : 3);
    RL_RETURN_IF_ERROR(Reserve(format, data, size, copies, nullptr, nullptr, &grant));
  }
  // One grant at a time: a decode that waited while holding one could wait for ever.
  if (whole) jpeg_.set_memory_budget(nullptr);
  absl::StatusOr<RgbImage> image = DecodeStored(format, data, size);
  if (whole) jpeg_.set_memory_budget(budget_);
  if (image.ok() && orientation != 1) {
    RgbImage upright;
    Orient(*image, orientation, &upright);
    image = std::move(upright);
  }
  TrimToAllowance();
  return image;
}

absl::StatusOr<RgbImage> ImageDecoder::DecodeLabels(const uint8_t* data, size_t size) {
  RL_ASSIGN_OR_RETURN(const ImageFormat format, Sniff(data, size));
  if (format != ImageFormat::kPng && format != ImageFormat::kBmp && format != ImageFormat::kTiff) {
    return absl::UnimplementedError(
        absl::StrCat("mode='mask' label images are decoded natively from PNG, BMP and TIFF "
                     "files; this is ", ImageFormatName(format), " (save the masks as PNG)"));
  }
  DecodeBudget::Grant grant;
  if (budget_ != nullptr) RL_RETURN_IF_ERROR(Reserve(format, data, size, 6, nullptr, nullptr, &grant));
  state_->scratch.labels = true;
  absl::StatusOr<RgbImage> image = DecodeStored(format, data, size);
  state_->scratch.labels = false;
  TrimToAllowance();
  if (!image.ok()) return image;
  // Image.open() applies only a TIFF's own Orientation tag (never EXIF for a label image).
  const int orientation = Orientation(false, format, data, size);
  if (orientation == 1) return image;
  RgbImage upright;
  Orient(*image, orientation, &upright);
  return upright;
}

absl::StatusOr<RgbImage> ImageDecoder::DecodeStored(ImageFormat format, const uint8_t* data,
                                                    size_t size) {
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
  if (budget_ == nullptr) return DecodeIntoBudgeted(data, size, pipeline, rng, dst, stats, nullptr);
  DecodeBudget::Grant grant;  // released after the trim: what it covered is gone by then
  absl::Status status = DecodeIntoBudgeted(data, size, pipeline, rng, dst, stats, &grant);
  TrimToAllowance();
  return status;
}

absl::Status ImageDecoder::DecodeIntoBudgeted(const uint8_t* data, size_t size,
                                              const TransformPipeline& pipeline, SampleRng& rng, void* dst,
                                              DecodeStats* stats, DecodeBudget::Grant* grant) {
  RL_ASSIGN_OR_RETURN(const ImageFormat format, Sniff(data, size));
  const int orientation = Orientation(exif_transpose_, format, data, size);
  if (grant != nullptr && (format != ImageFormat::kJpeg || orientation != 1)) {
    // A JPEG decoded by region charges in the JPEG decoder; an upright copy holds the decoded
    // image twice more (the stored one copied, then transposed).
    const uint64_t copies = orientation == 1 ? 0 : format == ImageFormat::kJpeg ? 3 : 6;
    RL_RETURN_IF_ERROR(Reserve(format, data, size, copies, &pipeline, &rng, grant));
  }
  if (orientation != 1) {
    // Rare in training sets: a full decode, transposed, then the transform as for other formats.
    // One grant at a time: a decode that waited while holding one could wait for ever.
    if (grant != nullptr) jpeg_.set_memory_budget(nullptr);
    absl::StatusOr<RgbImage> stored = DecodeStored(format, data, size);
    if (grant != nullptr) jpeg_.set_memory_budget(budget_);
    RL_RETURN_IF_ERROR(stored.status());
    const RgbImage image = *std::move(stored);
    RgbImage& upright = state_->oriented;
    Orient(image, orientation, &upright);
    if (stats) *stats = DecodeStats{8, upright.width, upright.height, 0};
    const SampleGeometry g = pipeline.Plan(upright.width, upright.height, rng);
    return RenderSample(upright.pixels.data(), static_cast<size_t>(upright.width) * 3, 3,
                        upright.width, upright.height, pipeline, g, rng, state_->render, dst);
  }
  if (format == ImageFormat::kJpeg) return jpeg_.DecodeInto(data, size, pipeline, rng, dst, stats);
  Decoded d;
  RL_RETURN_IF_ERROR(Decode(format, data, size, max_pixels_, state_->scratch, &d));
  if (stats) *stats = DecodeStats{8, d.width, d.height, 0};
  const SampleGeometry g = pipeline.Plan(d.width, d.height, rng);
  return RenderSample(d.pixels, d.stride, d.bytes_per_pixel, d.width, d.height, pipeline, g, rng,
                      state_->render, dst);
}

}  // namespace ringloader
