/// BMP reader following Pillow's BmpImagePlugin: the Windows (40..124-byte) and OS/2 core
/// (12-byte) headers; uncompressed 1, 4 and 8-bit palette, 16-bit 5-5-5, 24-bit and 32-bit
/// pixels; BITFIELDS with the masks Pillow accepts; RLE8 and RLE4 palette images; bottom-up and
/// top-down rows. Other compressions are Unimplemented.

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_util.h"
#include "decode/image_formats.h"

namespace ringloader::decode_internal {
namespace {

constexpr uint32_t kRaw = 0, kRle8 = 1, kRle4 = 2, kBitfields = 3;

uint16_t Le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
uint32_t Le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

/// How one pixel's bytes map to RGB.
enum class Pixel : uint8_t {
  kIndexed,  ///< 1, 4 or 8-bit palette index
  kGray,     ///< 8-bit index into a grey-ramp palette: Pillow reads it as mode "L"
  kBilevel,  ///< any depth with a black/white 2-entry palette: Pillow reads 1 bit per pixel
  kRgb15,    ///< 16-bit x-5-5-5 ("BGR;15")
  kRgb16,    ///< 16-bit 5-6-5 ("BGR;16")
  kBytes,    ///< 24 or 32-bit: R, G, B at byte offsets `rgb`
};

struct Header {
  int width = 0;
  int height = 0;
  bool top_down = false;
  int bits = 0;
  int rle = 0;         ///< 8 or 4 for RLE8/RLE4 (indices expanded to one byte each), else 0
  int index_bits = 0;  ///< bits per palette index in the rows ConvertRow reads
  size_t offset = 0;  ///< first pixel byte
  size_t stride = 0;  ///< bytes per row, padded to 4
  Pixel pixel = Pixel::kBytes;
  int rgb[3] = {2, 1, 0};          ///< kBytes: byte offsets of R, G, B
  uint8_t palette[256][3] = {};    ///< kIndexed: RGB per index; past the colour count: black
};

absl::Status Corrupt(const std::string& what) {
  return absl::DataLossError(absl::StrCat("corrupt BMP: ", what));
}

/// Byte offsets of R, G, B in a little-endian 32-bit pixel, for the (R, G, B, A) masks in
/// Pillow's BITFIELDS table (all-zero masks mean BGRA); false for any other layout.
bool MaskOffsets32(const uint32_t* mask, int* rgb) {
  static constexpr uint32_t kAccepted[][4] = {
      {0xFF0000, 0xFF00, 0xFF, 0x0},         {0xFF000000, 0xFF0000, 0xFF00, 0x0},
      {0xFF000000, 0xFF00, 0xFF, 0x0},       {0xFF000000, 0xFF0000, 0xFF00, 0xFF},
      {0xFF, 0xFF00, 0xFF0000, 0xFF000000},  {0xFF0000, 0xFF00, 0xFF, 0xFF000000},
      {0xFF000000, 0xFF00, 0xFF, 0xFF0000},  {0x0, 0x0, 0x0, 0x0}};
  bool accepted = false;
  for (const auto& a : kAccepted) {
    accepted = accepted || std::equal(a, a + 4, mask);
  }
  if (!accepted) return false;
  if (mask[0] == 0) return true;  // BGRA: the default offsets
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 4; ++i) {
      if (mask[c] == 0xFFu << (8 * i)) rgb[c] = i;
    }
  }
  return true;
}

/// Parses the headers and palette the way BmpImagePlugin._open/_bitmap do.
absl::Status ParseHeader(const uint8_t* d, size_t n, Header* h) {
  if (n < 18) return absl::DataLossError("truncated BMP: header");
  const size_t offset = Le32(d + 10);
  const uint32_t header_size = Le32(d + 14);
  const uint8_t* info = d + 18;  // the info header after its size field
  if (header_size != 12 && header_size != 40 && header_size != 52 && header_size != 56 &&
      header_size != 64 && header_size != 108 && header_size != 124) {
    return absl::UnimplementedError(absl::StrCat("unsupported BMP header size ", header_size));
  }
  if (n < 14 + size_t{header_size}) return absl::DataLossError("truncated BMP: header");
  uint32_t compression = kRaw, colors = 0;
  size_t palette_entry = 4;
  int64_t width = 0, height = 0;
  if (header_size == 12) {
    width = Le16(info);
    height = Le16(info + 2);
    h->bits = Le16(info + 6);
    palette_entry = 3;
  } else {
    width = Le32(info);
    const uint32_t raw_height = Le32(info + 4);
    h->top_down = info[7] == 0xFF;  // Pillow's test: the height's top byte
    height = h->top_down ? (int64_t{1} << 32) - raw_height : raw_height;
    h->bits = Le16(info + 10);
    compression = Le32(info + 12);
    colors = Le32(info + 28);
  }
  if (width <= 0 || height <= 0 || width > 0x7FFFFFFF || height > 0x7FFFFFFF) {
    return Corrupt(absl::StrCat("image size ", width, " x ", height));
  }
  h->width = static_cast<int>(width);
  h->height = static_cast<int>(height);
  const int bits = h->bits;
  if (bits != 1 && bits != 4 && bits != 8 && bits != 16 && bits != 24 && bits != 32) {
    return absl::UnimplementedError(absl::StrCat("unsupported BMP pixel depth ", bits));
  }
  h->stride = ((static_cast<size_t>(width) * bits + 31) >> 3) & ~size_t{3};
  h->pixel = bits <= 8 ? Pixel::kIndexed : bits == 16 ? Pixel::kRgb15 : Pixel::kBytes;
  if (compression == kBitfields) {
    uint32_t mask[4] = {0, 0, 0, 0};  // R, G, B, A
    if (header_size >= 52) {
      for (int i = 0; i < 3; ++i) mask[i] = Le32(info + 36 + 4 * i);
      if (header_size >= 56) mask[3] = Le32(info + 48);
    } else {
      if (n < 14 + size_t{header_size} + 12) return absl::DataLossError("truncated BMP: masks");
      for (int i = 0; i < 3; ++i) mask[i] = Le32(d + 14 + header_size + 4 * i);
    }
    const bool bgr = mask[0] == 0xFF0000 && mask[1] == 0xFF00 && mask[2] == 0xFF;
    const bool rgb565 = mask[0] == 0xF800 && mask[1] == 0x7E0 && mask[2] == 0x1F;
    const bool rgb555 = mask[0] == 0x7C00 && mask[1] == 0x3E0 && mask[2] == 0x1F;
    if (bits == 16 && rgb565) h->pixel = Pixel::kRgb16;
    if (!(bits == 32 ? MaskOffsets32(mask, h->rgb)
                     : (bits == 24 && bgr) || (bits == 16 && (rgb565 || rgb555)))) {
      return absl::UnimplementedError(absl::StrCat("unsupported BMP bitfields layout for ",
                                                   bits, "-bit pixels"));
    }
  } else if (compression == kRle8 || compression == kRle4) {
    h->rle = compression == kRle8 ? 8 : 4;
    if (bits > 8) {
      return absl::UnimplementedError(
          absl::StrCat("unsupported BMP: RLE", h->rle, " with ", bits, "-bit pixels"));
    }
  } else if (compression != kRaw) {
    return absl::UnimplementedError(absl::StrCat("unsupported BMP compression ", compression));
  }
  h->index_bits = h->rle ? 8 : bits;
  if (colors == 0) colors = uint32_t{1} << std::min(bits, 31);
  h->offset = offset;
  if (bits <= 8) {
    if (colors > 65536) return Corrupt(absl::StrCat("palette of ", colors, " colours"));
    const size_t start = 14 + size_t{header_size};
    if (n < start + palette_entry * colors) return absl::DataLossError("truncated BMP: palette");
    // Pillow reads the pixels right after the palette when the header says they start where the
    // palette does.
    if (offset == start) h->offset = start + palette_entry * colors;
    // A palette that is exactly black/white (2 colours or fewer) or the grey ramp 0..n-1 makes
    // Pillow read mode "1" or "L" instead of "P".
    bool gray = true;
    for (uint32_t i = 0; i < colors && gray; ++i) {
      const uint8_t* e = d + start + palette_entry * i;
      const int want = colors == 2 ? (i == 0 ? 0 : 255) : static_cast<int>(i);
      gray = e[0] == want && e[1] == want && e[2] == want;
    }
    if (gray && colors <= 2 && h->rle) {
      // Pillow then unpacks the expanded indices as raw mode "L" into a mode "1" image.
      return absl::UnimplementedError("unsupported BMP: RLE with a black/white palette");
    } else if (gray && colors <= 2) {
      h->pixel = Pixel::kBilevel;
    } else if (gray && (bits == 8 || h->rle)) {
      h->pixel = Pixel::kGray;
    } else if (gray) {
      // Pillow then reads packed 1/4-bit indices as whole bytes ("L"): not a real image layout.
      return absl::UnimplementedError(
          absl::StrCat("unsupported BMP: ", bits, "-bit grey-ramp palette"));
    } else {
      for (uint32_t i = 0; i < colors && i < 256; ++i) {
        const uint8_t* e = d + start + palette_entry * i;  // B, G, R(, X)
        h->palette[i][0] = e[2];
        h->palette[i][1] = e[1];
        h->palette[i][2] = e[0];
      }
    }
  }
  return absl::OkStatus();
}

/// One row of the file to RGB with the raw unpackers Pillow uses for each mode.
void ConvertRow(const Header& h, const uint8_t* in, uint8_t* out) {
  const int w = h.width;
  switch (h.pixel) {
    case Pixel::kIndexed:
      for (int x = 0; x < w; ++x, out += 3) {
        int v;
        const int bits = h.index_bits;
        if (bits == 8) {
          v = in[x];
        } else {
          const int per_byte = 8 / bits;
          v = (in[x / per_byte] >> (8 - bits * (x % per_byte + 1))) & ((1 << bits) - 1);
        }
        std::memcpy(out, h.palette[v], 3);
      }
      break;
    case Pixel::kGray:
      for (int x = 0; x < w; ++x, out += 3) out[0] = out[1] = out[2] = in[x];
      break;
    case Pixel::kBilevel:
      for (int x = 0; x < w; ++x, out += 3) {
        out[0] = out[1] = out[2] = ((in[x >> 3] >> (7 - (x & 7))) & 1) ? 255 : 0;
      }
      break;
    case Pixel::kRgb15:  // Pillow's unpackers: channel * 255 / max, truncated
      for (int x = 0; x < w; ++x, out += 3) {
        const int p = Le16(in + 2 * x);
        out[0] = static_cast<uint8_t>(((p >> 10) & 31) * 255 / 31);
        out[1] = static_cast<uint8_t>(((p >> 5) & 31) * 255 / 31);
        out[2] = static_cast<uint8_t>((p & 31) * 255 / 31);
      }
      break;
    case Pixel::kRgb16:
      for (int x = 0; x < w; ++x, out += 3) {
        const int p = Le16(in + 2 * x);
        out[0] = static_cast<uint8_t>(((p >> 11) & 31) * 255 / 31);
        out[1] = static_cast<uint8_t>(((p >> 5) & 63) * 255 / 63);
        out[2] = static_cast<uint8_t>((p & 31) * 255 / 31);
      }
      break;
    case Pixel::kBytes: {
      const int bpp = h.bits / 8;
      for (int x = 0; x < w; ++x, in += bpp, out += 3) {
        out[0] = in[h.rgb[0]];
        out[1] = in[h.rgb[1]];
        out[2] = in[h.rgb[2]];
      }
      break;
    }
  }
}

/// Pillow's BmpRleDecoder, step for step (including its quirks: a run past the row end is
/// clipped by a column count that absolute runs advance by their nominal length, absolute runs
/// align to an even offset in the file, a delta fills with index 0): expands the RLE stream at
/// `pos` into `out`, one index per pixel in file row order. Pillow refuses a stream that ends
/// before every pixel has a value, even by an end-of-bitmap code.
absl::Status ExpandRle(const uint8_t* d, size_t n, size_t pos, const Header& h,
                       std::vector<uint8_t>* out) {
  const size_t w = static_cast<size_t>(h.width);
  const size_t dest = w * static_cast<size_t>(h.height);
  const bool rle4 = h.rle == 4;
  out->clear();
  size_t x = 0;
  while (out->size() < dest) {
    if (n - std::min(n, pos) < 2) break;
    size_t count = d[pos];
    const uint8_t byte = d[pos + 1];
    pos += 2;
    if (count > 0) {  // encoded run
      if (x + count > w) count = x < w ? w - x : 0;
      for (size_t i = 0; i < count; ++i) {
        out->push_back(rle4 ? (i % 2 == 0 ? byte >> 4 : byte & 0x0F) : byte);
      }
      x += count;
    } else if (byte == 0) {  // end of line
      while (out->size() % w != 0) out->push_back(0);
      x = 0;
    } else if (byte == 1) {  // end of bitmap
      break;
    } else if (byte == 2) {  // delta
      if (n - pos < 2) break;
      const size_t skip = d[pos] + size_t{d[pos + 1]} * w;
      pos += 2;
      out->resize(out->size() + std::min(dest - out->size(), skip), 0);
      x = out->size() % w;
    } else {  // absolute run of `byte` indices
      const size_t wanted = std::min<size_t>(dest - out->size(), byte);
      const size_t want_bytes = rle4 ? (wanted + 1) / 2 : wanted;
      const size_t got = std::min(want_bytes, n - pos);
      for (size_t i = 0; i < got; ++i) {
        const uint8_t v = d[pos + i];
        if (!rle4) {
          out->push_back(v);
          continue;
        }
        out->push_back(v >> 4);
        if (i * 2 + 1 < wanted) out->push_back(v & 0x0F);
      }
      pos += got;
      if (got < want_bytes || out->size() == dest) break;
      x += byte;
      if (pos % 2 != 0) ++pos;
    }
  }
  if (out->size() < dest) return absl::DataLossError("truncated BMP: RLE data ends early");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ImageSize> BmpHeader(const uint8_t* data, size_t size) {
  Header h;
  RL_RETURN_IF_ERROR(ParseHeader(data, size, &h));
  return ImageSize{h.width, h.height};
}

absl::Status BmpDecode(const uint8_t* data, size_t size, uint64_t max_pixels, Scratch& scratch,
                       Decoded* out) {
  Header h;
  RL_RETURN_IF_ERROR(ParseHeader(data, size, &h));
  RL_RETURN_IF_ERROR(CheckPixelLimit("BMP", h.width, h.height, max_pixels));
  if (scratch.labels) {
    // Pillow opens a palette BMP as "P" (its indices) and a grey-ramp one as "L" (the indices
    // again, the ramp being the identity); a black/white one is "1", deeper ones RGB.
    if (h.pixel == Pixel::kIndexed) {
      for (int i = 0; i < 256; ++i) {
        h.palette[i][0] = h.palette[i][1] = h.palette[i][2] = static_cast<uint8_t>(i);
      }
    } else if (h.pixel != Pixel::kGray) {
      return absl::UnimplementedError(absl::StrCat(
          "mode='mask' takes a label image Pillow opens as 'P' or 'L' (a palette or grey BMP); "
          "this is a ", h.pixel == Pixel::kBilevel ? "black/white (mode '1')" : "colour", " ",
          h.bits, "-bit BMP"));
    }
  }
  const uint8_t* rows = data + std::min(h.offset, size);
  size_t row_stride = h.stride;
  if (h.rle) {
    RL_RETURN_IF_ERROR(ExpandRle(data, size, h.offset, h, &scratch.raw));
    rows = scratch.raw.data();
    row_stride = static_cast<size_t>(h.width);
  } else if (h.offset > size || (size - h.offset) / h.stride < static_cast<size_t>(h.height)) {
    // Pillow refuses a file whose pixel data ends early ("image file is truncated").
    return absl::DataLossError("truncated BMP: pixel data ends early");
  }
  const size_t stride = static_cast<size_t>(h.width) * 3;
  uint8_t* px = scratch.Pixels(stride * static_cast<size_t>(h.height));
  for (int y = 0; y < h.height; ++y) {
    const int file_row = h.top_down ? y : h.height - 1 - y;
    ConvertRow(h, rows + row_stride * static_cast<size_t>(file_row),
               px + stride * static_cast<size_t>(y));
  }
  *out = Decoded{px, stride, 3, h.width, h.height};
  return absl::OkStatus();
}

}  // namespace ringloader::decode_internal
