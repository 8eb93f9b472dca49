/// PNG reader. Two paths with one verdict:
///  * the common photo (8-bit gray, RGB or RGBA, not interlaced): libspng judges the header and
///    the chunks before the image data, then the IDAT data is inflated in one call by libdeflate
///    (whole-buffer inflate, about twice zlib's streaming rate) and unfiltered in place
///    (png_unfilter.h), so RGB and RGBA rows are handed on where they lie, filter bytes between
///    them, with no copy;
///  * everything else, and any common-photo file the first path does not accept as flawless:
///    libspng inflates, unfilters and deinterlaces into the PNG's own sample format
///    (SPNG_FMT_PNG); the conversion to RGB below is Pillow's, which differs from libspng's
///    RGB8 output for 16-bit gray (Pillow clips, it does not scale) and for palette indices past
///    the end of PLTE (Pillow gives black, libspng refuses the image).
/// The first path accepts only files libspng accepts with the same pixels, and hands every other
/// one to libspng, so a damaged file's verdict and message are libspng's either way.

#include <libdeflate.h>
#include <spng.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_util.h"
#include "decode/image_formats.h"
#include "decode/png_unfilter.h"

namespace ringloader::decode_internal {
namespace {

/// Bound on any one ancillary chunk and on all of them together (text, ICC, EXIF...): real
/// files carry kilobytes; a corrupt length field must not make libspng allocate gigabytes.
constexpr size_t kChunkLimit = size_t{64} << 20;

enum ColorType : uint8_t { kGray = 0, kRgb = 2, kPalette = 3, kGrayAlpha = 4, kRgba = 6 };

struct CtxDeleter {
  void operator()(spng_ctx* ctx) const { spng_ctx_free(ctx); }
};
using Ctx = std::unique_ptr<spng_ctx, CtxDeleter>;

uint32_t Be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

/// Names the first chunk whose stored CRC does not match ("IDAT"), or "" when all match.
std::string BadCrcChunk(const uint8_t* d, size_t n) {
  size_t pos = 8;
  while (pos + 12 <= n) {
    const uint32_t len = Be32(d + pos);
    if (len > n - pos - 12) break;
    if (libdeflate_crc32(0, d + pos + 4, size_t{len} + 4) != Be32(d + pos + 8 + len)) {
      std::string name(reinterpret_cast<const char*>(d + pos + 4), 4);
      for (char& c : name) {
        if (!std::isalpha(static_cast<unsigned char>(c))) c = '?';
      }
      return name;
    }
    pos += 12 + size_t{len};
  }
  return "";
}

/// Status for a libspng error code. libspng inflates IDAT data before it reaches the chunk's
/// CRC, so damaged compressed data usually surfaces as a stream error: a chunk with a bad CRC is
/// named as the cause whenever there is one.
absl::Status SpngStatus(int err, const uint8_t* d, size_t n) {
  const char* what = spng_strerror(err);
  switch (err) {
    case SPNG_EMEM:
    case SPNG_ECHUNK_LIMITS:
      return absl::ResourceExhaustedError(absl::StrCat("PNG decode needs too much memory: ", what));
    case SPNG_ECHUNK_UNKNOWN_CRITICAL:
      // The PNG spec forbids decoding past one (Pillow skips it).
      return absl::UnimplementedError("unsupported PNG: unknown critical chunk");
    case SPNG_EUSER_WIDTH:
    case SPNG_EUSER_HEIGHT:
    case SPNG_EOVERFLOW:
      return absl::OutOfRangeError(absl::StrCat("PNG too large: ", what));
    default:
      break;
  }
  if (const std::string chunk = BadCrcChunk(d, n); !chunk.empty()) {
    return absl::DataLossError(absl::StrCat("corrupt PNG: bad CRC in ", chunk, " chunk"));
  }
  if (err == SPNG_IO_EOF || err == SPNG_EOF || err == SPNG_EIDAT_TOO_SHORT) {
    return absl::DataLossError(absl::StrCat("truncated PNG: ", what));
  }
  return absl::DataLossError(absl::StrCat("corrupt PNG: ", what));
}

/// A context over `data` with its header read and limits set. A bad CRC is an error in any
/// chunk libspng reads: every critical chunk, and the ancillary ones before the image data
/// (Pillow refuses those too; libspng's default would drop a damaged ancillary chunk silently).
absl::Status Open(const uint8_t* data, size_t size, Ctx* ctx, spng_ihdr* ihdr) {
  ctx->reset(spng_ctx_new(0));
  if (*ctx == nullptr) return absl::ResourceExhaustedError("libspng context could not be created");
  spng_ctx* c = ctx->get();
  spng_set_chunk_limits(c, kChunkLimit, kChunkLimit);
  spng_set_crc_action(c, SPNG_CRC_ERROR, SPNG_CRC_ERROR);
  if (int e = spng_set_png_buffer(c, data, size); e != 0) return SpngStatus(e, data, size);
  if (int e = spng_get_ihdr(c, ihdr); e != 0) return SpngStatus(e, data, size);
  return absl::OkStatus();
}

/// Sample `x` of a row of `depth`-bit samples (1, 2, 4: packed, most significant first; 8).
inline int Sample(const uint8_t* row, int x, int depth) {
  if (depth == 8) return row[x];
  const int per_byte = 8 / depth;
  const int shift = 8 - depth * (x % per_byte + 1);
  return (row[x / per_byte] >> shift) & ((1 << depth) - 1);
}

/// Pillow's PNG modes, converted to RGB: gray "1"/"L;2"/"L;4"/"L" unpacks to 0..255 by
/// replicating bits (x255, x85, x17); 16-bit gray opens as "I;16" and convert("RGB") clips
/// to 255; LA and 16-bit RGB/RGBA/LA keep the high byte ("...;16B" raw modes); alpha dropped.
void GrayRow(const uint8_t* in, int w, int depth, uint8_t* out) {
  if (depth == 16) {
    const auto* in16 = reinterpret_cast<const uint16_t*>(in);  // host-endian (SPNG_FMT_PNG)
    for (int x = 0; x < w; ++x, out += 3) {
      out[0] = out[1] = out[2] = static_cast<uint8_t>(std::min<int>(in16[x], 255));
    }
    return;
  }
  const int scale = 255 / ((1 << depth) - 1);
  for (int x = 0; x < w; ++x, out += 3) {
    out[0] = out[1] = out[2] = static_cast<uint8_t>(Sample(in, x, depth) * scale);
  }
}

/// High byte of each sample of 16-bit data with `channels` samples per pixel, first three kept.
void HighBytesRow(const uint8_t* in, int w, int channels, uint8_t* out) {
  const auto* in16 = reinterpret_cast<const uint16_t*>(in);
  for (int x = 0; x < w; ++x, in16 += channels, out += 3) {
    if (channels <= 2) {
      out[0] = out[1] = out[2] = static_cast<uint8_t>(in16[0] >> 8);
    } else {
      out[0] = static_cast<uint8_t>(in16[0] >> 8);
      out[1] = static_cast<uint8_t>(in16[1] >> 8);
      out[2] = static_cast<uint8_t>(in16[2] >> 8);
    }
  }
}

/// Pillow's "P" to "RGB": a palette lookup; indices past the PLTE entries are black; tRNS is
/// ignored (convert("RGB") drops transparency).
void PaletteRow(const uint8_t* in, int w, int depth, const uint8_t (*lut)[3], uint8_t* out) {
  for (int x = 0; x < w; ++x, out += 3) std::memcpy(out, lut[Sample(in, x, depth)], 3);
}

/// Adam7 pass geometry: first column and column step of each pass (libspng reports the row).
constexpr int kPassX0[7] = {0, 4, 0, 2, 0, 1, 0}, kPassDx[7] = {8, 8, 4, 4, 2, 2, 1};

/// Deinterlaces an image of packed (1, 2, 4-bit) samples into the packed rows a non-interlaced
/// decode gives (`out`: h rows of ceil(w * depth / 8) bytes). libspng 0.7 misplaces such samples
/// when it deinterlaces them itself, so the passes' scanlines are read one by one and placed
/// here. Returns a libspng error code (0 on success).
int DecodePackedInterlaced(spng_ctx* c, int w, int h, int depth, uint8_t* out) {
  const size_t row_bytes = (static_cast<size_t>(w) * depth + 7) / 8;
  std::memset(out, 0, row_bytes * static_cast<size_t>(h));
  if (int e = spng_decode_image(c, nullptr, 0, SPNG_FMT_PNG, SPNG_DECODE_PROGRESSIVE); e != 0) {
    return e;
  }
  std::vector<uint8_t> line(row_bytes);
  while (true) {
    spng_row_info info;
    if (int e = spng_get_row_info(c, &info); e != 0) return e == SPNG_EOI ? 0 : e;
    const int e = spng_decode_scanline(c, line.data(), line.size());
    if (e != 0 && e != SPNG_EOI) return e;
    const int pass = info.pass, y = static_cast<int>(info.row_num);
    if (pass < 0 || pass > 6 || y < 0 || y >= h) return SPNG_EINTERNAL;
    uint8_t* row = out + row_bytes * static_cast<size_t>(y);
    const int per_byte = 8 / depth;
    for (int i = 0, x = kPassX0[pass]; x < w; ++i, x += kPassDx[pass]) {
      const int v = Sample(line.data(), i, depth);
      row[x / per_byte] |= static_cast<uint8_t>(v << (8 - depth * (x % per_byte + 1)));
    }
    if (e == SPNG_EOI) return 0;
  }
}

/// libspng's decode of an opened context into `out`: every PNG variant.
absl::Status SpngDecode(const uint8_t* data, size_t size, spng_ctx* c, const spng_ihdr& ihdr,
                        Scratch& scratch, Decoded* out) {
  const bool labels = scratch.labels;
  const int w = static_cast<int>(ihdr.width);
  const int h = static_cast<int>(ihdr.height);
  size_t len = 0;
  if (int e = spng_decoded_image_size(c, SPNG_FMT_PNG, &len); e != 0) {
    return SpngStatus(e, data, size);
  }
  const int depth = ihdr.bit_depth;
  const int type = ihdr.color_type;
  *out = Decoded{nullptr, static_cast<size_t>(w) * 3, 3, w, h};
  // 8-bit RGB and RGBA are already what the render stage takes: decode straight into place.
  if (depth == 8 && (type == kRgb || type == kRgba)) {
    uint8_t* px = scratch.Pixels(len);
    if (int e = spng_decode_image(c, px, len, SPNG_FMT_PNG, 0); e != 0) {
      return SpngStatus(e, data, size);
    }
    out->pixels = px;
    if (type == kRgba) out->stride = static_cast<size_t>(w) * 4, out->bytes_per_pixel = 4;
    return absl::OkStatus();
  }
  uint8_t* raw = scratch.Raw(len);
  const int e = depth < 8 && ihdr.interlace_method != 0
                    ? DecodePackedInterlaced(c, w, h, depth, raw)
                    : spng_decode_image(c, raw, len, SPNG_FMT_PNG, 0);
  if (e != 0) return SpngStatus(e, data, size);
  uint8_t lut[256][3] = {};
  if (type == kPalette && labels) {
    for (int i = 0; i < 256; ++i) lut[i][0] = lut[i][1] = lut[i][2] = static_cast<uint8_t>(i);
  } else if (type == kPalette) {
    spng_plte plte;
    if (int e = spng_get_plte(c, &plte); e != 0) return SpngStatus(e, data, size);
    for (uint32_t i = 0; i < plte.n_entries && i < 256; ++i) {
      lut[i][0] = plte.entries[i].red;
      lut[i][1] = plte.entries[i].green;
      lut[i][2] = plte.entries[i].blue;
    }
  }
  const size_t raw_stride = len / static_cast<size_t>(h);
  uint8_t* px = scratch.Pixels(out->stride * static_cast<size_t>(h));
  for (int y = 0; y < h; ++y) {
    const uint8_t* in = raw + raw_stride * static_cast<size_t>(y);
    uint8_t* o = px + out->stride * static_cast<size_t>(y);
    switch (type) {
      case kGray:
        GrayRow(in, w, depth, o);
        break;
      case kPalette:
        PaletteRow(in, w, depth, lut, o);
        break;
      case kGrayAlpha:
        if (depth == 16) {
          HighBytesRow(in, w, 2, o);
        } else {
          for (int x = 0; x < w; ++x, o += 3) o[0] = o[1] = o[2] = in[2 * x];
        }
        break;
      default:  // 16-bit RGB or RGBA
        HighBytesRow(in, w, type == kRgba ? 4 : 3, o);
        break;
    }
  }
  out->pixels = px;
  return absl::OkStatus();
}

struct DecompressorDeleter {
  void operator()(libdeflate_decompressor* d) const { libdeflate_free_decompressor(d); }
};

/// The common photo PNG: 8-bit gray, RGB or RGBA, not interlaced.
bool IsCommonPhoto(const spng_ihdr& ihdr) {
  return ihdr.bit_depth == 8 && ihdr.interlace_method == 0 &&
         (ihdr.color_type == kGray || ihdr.color_type == kRgb || ihdr.color_type == kRgba);
}

/// Decodes a common photo PNG (`c` opened over it) without libspng's row-at-a-time inflate, or
/// returns false having decided nothing. It accepts only what libspng accepts, with the same
/// pixels: libspng itself reads and judges every chunk before the image data; then each chunk
/// must have its CRC right and be at most kChunkLimit long (libspng's limit), the IDAT chunks
/// must be one run followed by an empty IEND that ends the file, the zlib stream must end exactly
/// where the IDAT data ends with its Adler-32 right and inflate to exactly the filtered image,
/// and every filter type must be 0-4. A file that misses any of these, damaged or
/// only unusual, goes to libspng, whose verdict stands.
bool DecodeCommonPhoto(const uint8_t* d, size_t n, spng_ctx* c, const spng_ihdr& ihdr,
                       Scratch& scratch, Decoded* out) {
  spng_plte plte;  // the getter makes libspng read up to the first IDAT chunk
  if (int e = spng_get_plte(c, &plte); e != 0 && e != SPNG_ECHUNKAVAIL) return false;

  size_t pos = 8, first_idat = 0, idat_chunks = 0, compressed = 0;
  bool in_idat_run = false, ended = false;
  while (!ended && pos + 12 <= n) {
    const uint32_t len = Be32(d + pos);
    if (len > kChunkLimit || len > n - pos - 12) return false;
    if (libdeflate_crc32(0, d + pos + 4, size_t{len} + 4) != Be32(d + pos + 8 + len)) return false;
    const size_t next = pos + 12 + size_t{len};
    if (std::memcmp(d + pos + 4, "IDAT", 4) == 0) {
      if (idat_chunks > 0 && !in_idat_run) return false;
      if (idat_chunks++ == 0) first_idat = pos;
      compressed += len;
      in_idat_run = true;
    } else if (idat_chunks > 0) {
      if (std::memcmp(d + pos + 4, "IEND", 4) != 0 || len != 0 || next != n) return false;
      ended = true;
    } else if (std::memcmp(d + pos + 4, "IEND", 4) == 0) {
      return false;
    }
    pos = next;
  }
  if (!ended || compressed < 2) return false;

  // The zlib stream: in place when one IDAT chunk holds it, else gathered.
  const uint8_t* z = d + first_idat + 8;
  if (idat_chunks > 1) {
    uint8_t* gathered = scratch.Compressed(compressed);
    for (size_t at = first_idat, done = 0; done < compressed;) {
      const uint32_t len = Be32(d + at);
      std::memcpy(gathered + done, d + at + 8, len);
      done += len;
      at += 12 + size_t{len};
    }
    z = gathered;
  }

  const int w = static_cast<int>(ihdr.width), h = static_cast<int>(ihdr.height);
  const int bpp = ihdr.color_type == kGray ? 1 : ihdr.color_type == kRgb ? 3 : 4;
  const size_t row_bytes = static_cast<size_t>(w) * bpp, stride = row_bytes + 1;
  if (stride > SIZE_MAX / static_cast<size_t>(h)) return false;
  const size_t filtered = stride * static_cast<size_t>(h);
  uint8_t* raw = scratch.Raw(filtered);
  std::unique_ptr<libdeflate_decompressor, DecompressorDeleter> inflater(
      libdeflate_alloc_decompressor());
  size_t used = 0;
  if (inflater == nullptr ||
      libdeflate_zlib_decompress_ex(inflater.get(), z, compressed, raw, filtered, &used,
                                    nullptr) != LIBDEFLATE_SUCCESS ||
      used != compressed) {
    return false;
  }
  const uint8_t* prev = scratch.Zeros(row_bytes);
  for (int y = 0; y < h; ++y) {
    uint8_t* line = raw + stride * static_cast<size_t>(y);
    if (!UnfilterRow(line[0], bpp, prev, line + 1, row_bytes)) return false;
    prev = line + 1;
  }

  *out = Decoded{raw + 1, stride, bpp == 4 ? 4 : 3, w, h};
  if (bpp == 1) {
    uint8_t* px = scratch.Pixels(static_cast<size_t>(w) * 3 * static_cast<size_t>(h));
    for (int y = 0; y < h; ++y) {
      const uint8_t* in = raw + 1 + stride * static_cast<size_t>(y);
      uint8_t* o = px + static_cast<size_t>(w) * 3 * static_cast<size_t>(y);
      for (int x = 0; x < w; ++x, o += 3) o[0] = o[1] = o[2] = in[x];
    }
    *out = Decoded{px, static_cast<size_t>(w) * 3, 3, w, h};
  }
  return true;
}

}  // namespace

absl::StatusOr<ImageSize> PngHeader(const uint8_t* data, size_t size) {
  Ctx ctx;
  spng_ihdr ihdr;
  RL_RETURN_IF_ERROR(Open(data, size, &ctx, &ihdr));
  return ImageSize{static_cast<int>(ihdr.width), static_cast<int>(ihdr.height)};
}

absl::Status PngDecode(const uint8_t* data, size_t size, uint64_t max_pixels, Scratch& scratch,
                       Decoded* out) {
  Ctx ctx;
  spng_ihdr ihdr;
  RL_RETURN_IF_ERROR(Open(data, size, &ctx, &ihdr));
  RL_RETURN_IF_ERROR(CheckPixelLimit("PNG", static_cast<int>(ihdr.width),
                                     static_cast<int>(ihdr.height), max_pixels));
  if (scratch.labels) {
    // Pillow's PNG modes: palette PNGs of any depth open as "P" (indices unscaled); gray of 2, 4
    // or 8 bits as "L" ("L;2"/"L;4" scaled, as GrayRow does); 1-bit gray is "1", 16-bit "I;16".
    const int depth = ihdr.bit_depth, type = ihdr.color_type;
    if (!(type == kPalette || (type == kGray && depth >= 2 && depth <= 8))) {
      static constexpr const char* kTypes[] = {"gray", "?", "RGB", "palette", "gray+alpha", "?",
                                               "RGBA"};
      return absl::UnimplementedError(absl::StrCat(
          "mode='mask' takes a label image Pillow opens as 'P' or 'L' (a palette PNG, or 2 to "
          "8-bit gray); this is a ", depth, "-bit ", type <= 6 ? kTypes[type] : "?", " PNG"));
    }
    if (type == kPalette) return SpngDecode(data, size, ctx.get(), ihdr, scratch, out);
  }
  if (!IsCommonPhoto(ihdr)) return SpngDecode(data, size, ctx.get(), ihdr, scratch, out);
  if (DecodeCommonPhoto(data, size, ctx.get(), ihdr, scratch, out)) return absl::OkStatus();
  // The first path's image-sized buffers go before libspng allocates its own: a file is never
  // held twice (the decode memory budget counts the larger path, not both).
  std::vector<uint8_t>().swap(scratch.raw);
  std::vector<uint8_t>().swap(scratch.compressed);
  // libspng judges the file from its start: the context above may hold an error state.
  RL_RETURN_IF_ERROR(Open(data, size, &ctx, &ihdr));
  return SpngDecode(data, size, ctx.get(), ihdr, scratch, out);
}

absl::Status PngDecodeSpng(const uint8_t* data, size_t size, uint64_t max_pixels,
                           Scratch& scratch, Decoded* out) {
  Ctx ctx;
  spng_ihdr ihdr;
  RL_RETURN_IF_ERROR(Open(data, size, &ctx, &ihdr));
  RL_RETURN_IF_ERROR(CheckPixelLimit("PNG", static_cast<int>(ihdr.width),
                                     static_cast<int>(ihdr.height), max_pixels));
  return SpngDecode(data, size, ctx.get(), ihdr, scratch, out);
}

}  // namespace ringloader::decode_internal
