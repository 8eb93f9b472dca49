#pragma once
/// Internal interface between ImageDecoder and the whole-image format readers (PNG, WebP, BMP,
/// TIFF, PNM, GIF). Each reader has two entry points: a header read that reports the size without
/// allocating for pixels (so the caller can enforce the pixel limit first), and a decode that
/// fills a grow-only buffer with the image as Pillow's convert("RGB") would see it.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ringloader::decode_internal {

/// Width and height from a header.
struct ImageSize {
  int width = 0;
  int height = 0;
};

/// A decoded image in `Scratch::pixels`: rows `stride` bytes apart, `bytes_per_pixel` 3 (packed
/// RGB) or 4 (RGB plus a fourth byte that carries no colour: alpha Pillow drops, or padding).
struct Decoded {
  const uint8_t* pixels = nullptr;
  size_t stride = 0;
  int bytes_per_pixel = 3;
  int width = 0;
  int height = 0;
};

/// Grow-only buffers shared by the readers of one decoder.
struct Scratch {
  /// Decode a label image (ImageDecoder::DecodeLabels): what Pillow opens as mode "P" gives its
  /// palette indices and mode "L" its values, each replicated into R, G and B; anything else
  /// is refused (Unimplemented, naming the layout). Read by the PNG, BMP and TIFF readers.
  bool labels = false;
  std::vector<uint8_t> pixels;  ///< the decoded image
  std::vector<uint8_t> raw;     ///< the library's output before conversion, when one is needed
  std::vector<uint8_t> tile;    ///< one TIFF tile
  std::vector<uint8_t> compressed;  ///< a PNG's IDAT data gathered from its chunks
  std::vector<uint8_t> zeros;       ///< all zeros: the row above a PNG's first row

  /// `pixels` with room for at least `bytes`.
  uint8_t* Pixels(size_t bytes) {
    if (pixels.size() < bytes) pixels.resize(bytes);
    return pixels.data();
  }
  /// `raw` with room for at least `bytes`.
  uint8_t* Raw(size_t bytes) {
    if (raw.size() < bytes) raw.resize(bytes);
    return raw.data();
  }
  /// `tile` with room for at least `bytes`.
  uint8_t* Tile(size_t bytes) {
    if (tile.size() < bytes) tile.resize(bytes);
    return tile.data();
  }
  /// `compressed` with room for at least `bytes`.
  uint8_t* Compressed(size_t bytes) {
    if (compressed.size() < bytes) compressed.resize(bytes);
    return compressed.data();
  }
  /// At least `bytes` zeros (never written through).
  const uint8_t* Zeros(size_t bytes) {
    if (zeros.size() < bytes) zeros.resize(bytes);
    return zeros.data();
  }
};

/// OutOfRange when width x height exceeds `max_pixels` (Pillow's decompression-bomb error);
/// every reader calls it between its header and its first pixel allocation.
absl::Status CheckPixelLimit(const char* format, int width, int height, uint64_t max_pixels);

absl::StatusOr<ImageSize> PngHeader(const uint8_t* data, size_t size);
absl::Status PngDecode(const uint8_t* data, size_t size, uint64_t max_pixels, Scratch& scratch,
                       Decoded* out);
/// PngDecode through libspng alone, the path PngDecode takes for every PNG its fast path does
/// not accept: the reference its verdicts and pixels are tested against.
absl::Status PngDecodeSpng(const uint8_t* data, size_t size, uint64_t max_pixels,
                           Scratch& scratch, Decoded* out);

absl::StatusOr<ImageSize> WebpHeader(const uint8_t* data, size_t size);
absl::Status WebpDecode(const uint8_t* data, size_t size, uint64_t max_pixels, Scratch& scratch,
                        Decoded* out);

absl::StatusOr<ImageSize> BmpHeader(const uint8_t* data, size_t size);
absl::Status BmpDecode(const uint8_t* data, size_t size, uint64_t max_pixels, Scratch& scratch,
                       Decoded* out);

absl::StatusOr<ImageSize> TiffHeader(const uint8_t* data, size_t size);
absl::Status TiffDecode(const uint8_t* data, size_t size, uint64_t max_pixels, Scratch& scratch,
                        Decoded* out);

absl::StatusOr<ImageSize> GifHeader(const uint8_t* data, size_t size);
absl::Status GifDecode(const uint8_t* data, size_t size, uint64_t max_pixels, Scratch& scratch,
                       Decoded* out);

absl::StatusOr<ImageSize> PnmHeader(const uint8_t* data, size_t size);
absl::Status PnmDecode(const uint8_t* data, size_t size, uint64_t max_pixels, Scratch& scratch,
                       Decoded* out);

}  // namespace ringloader::decode_internal
