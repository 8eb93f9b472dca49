/// TIFF reader on libtiff for the layouts Pillow's TiffImagePlugin reads as plain samples (its
/// OPEN_INFO table), first page only: 8-bit gray (min-is-black or min-is-white), bilevel,
/// gray + alpha, RGB, RGBA/RGBX and 1/2/4/8-bit palette; unsigned samples, chunky planar
/// configuration, MSB-first fill order; strips or tiles, any compression libtiff decodes except
/// JPEG. Pillow decodes those by unpacking libtiff's decoded strips with a raw mode, which is
/// what is reproduced here. Everything else (YCbCr, CMYK, JPEG-compressed, 16-bit, float,
/// separate planes, associated alpha) is Unimplemented.

#include <tiffio.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_util.h"
#include "decode/image_formats.h"

namespace ringloader::decode_internal {
namespace {

/// The file in memory, as libtiff's client I/O sees it.
struct MemFile {
  const uint8_t* data;
  size_t size;
  size_t pos = 0;
  std::string error;  ///< libtiff's first error message
};

tmsize_t Read(thandle_t h, void* buf, tmsize_t n) {
  auto* f = static_cast<MemFile*>(h);
  const size_t avail = f->pos < f->size ? f->size - f->pos : 0;
  const size_t take = std::min(avail, static_cast<size_t>(n));
  if (take > 0) std::memcpy(buf, f->data + f->pos, take);
  f->pos += take;
  return static_cast<tmsize_t>(take);
}
tmsize_t Write(thandle_t, void*, tmsize_t) { return -1; }
toff_t Seek(thandle_t h, toff_t off, int whence) {
  auto* f = static_cast<MemFile*>(h);
  const toff_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? f->pos : f->size;
  f->pos = static_cast<size_t>(base + off);
  return f->pos;
}
int Close(thandle_t) { return 0; }
toff_t Size(thandle_t h) { return static_cast<MemFile*>(h)->size; }
int Map(thandle_t h, void** base, toff_t* size) {
  auto* f = static_cast<MemFile*>(h);
  *base = const_cast<uint8_t*>(f->data);
  *size = f->size;
  return 1;
}
void Unmap(thandle_t, void*, toff_t) {}

int OnError(TIFF*, void* user, const char* module, const char* fmt, va_list ap) {
  auto* f = static_cast<MemFile*>(user);
  if (f->error.empty()) {
    char message[512];
    std::vsnprintf(message, sizeof(message), fmt, ap);
    f->error = message;
  }
  return 1;
}
int OnWarning(TIFF*, void*, const char*, const char*, va_list) { return 1; }  // never print

struct TiffCloser {
  void operator()(TIFF* t) const { TIFFClose(t); }
};
using Tiff = std::unique_ptr<TIFF, TiffCloser>;

absl::Status LibtiffError(const MemFile& f, const char* what) {
  return absl::DataLossError(
      absl::StrCat("corrupt or truncated TIFF: ", f.error.empty() ? what : f.error));
}

/// Opens `f` with per-handle error handlers (libtiff's global ones are process-wide) and a bound
/// on any single allocation libtiff makes.
absl::Status Open(MemFile* f, uint64_t max_pixels, Tiff* out) {
  TIFFOpenOptions* opts = TIFFOpenOptionsAlloc();
  if (opts == nullptr) return absl::ResourceExhaustedError("libtiff options could not be made");
  TIFFOpenOptionsSetErrorHandlerExtR(opts, OnError, f);
  TIFFOpenOptionsSetWarningHandlerExtR(opts, OnWarning, f);
  const uint64_t max_alloc =
      std::clamp<uint64_t>(max_pixels * 8, uint64_t{64} << 20, uint64_t{4} << 30);
  TIFFOpenOptionsSetMaxSingleMemAlloc(opts, static_cast<tmsize_t>(max_alloc));
  out->reset(TIFFClientOpenExt("image", "rm", f, Read, Write, Seek, Close, Size, Map, Unmap, opts));
  TIFFOpenOptionsFree(opts);
  if (*out == nullptr) return LibtiffError(*f, "cannot read the header");
  return absl::OkStatus();
}

/// The sample layout and how Pillow converts it.
struct Layout {
  int width = 0;
  int height = 0;
  uint16_t photometric = 0;
  uint16_t bits = 0;
  uint16_t samples = 1;
  uint8_t palette[256][3] = {};
};

/// Checks the tags against the layouts Pillow unpacks directly; Unimplemented names the rest.
absl::Status ReadLayout(TIFF* t, Layout* l) {
  uint32_t w = 0, h = 0;
  if (!TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &w) || !TIFFGetField(t, TIFFTAG_IMAGELENGTH, &h) ||
      w == 0 || h == 0 || w > 0x7FFFFFFF || h > 0x7FFFFFFF) {
    return absl::DataLossError("corrupt TIFF: no valid image size");
  }
  l->width = static_cast<int>(w);
  l->height = static_cast<int>(h);
  uint16_t format = 1, planar = 1, fill = 1, compression = 1, extra_count = 0;
  uint16_t* extra = nullptr;
  if (!TIFFGetField(t, TIFFTAG_PHOTOMETRIC, &l->photometric)) {
    return absl::DataLossError("corrupt TIFF: no photometric interpretation");
  }
  TIFFGetFieldDefaulted(t, TIFFTAG_BITSPERSAMPLE, &l->bits);
  TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLESPERPIXEL, &l->samples);
  TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLEFORMAT, &format);
  TIFFGetFieldDefaulted(t, TIFFTAG_PLANARCONFIG, &planar);
  TIFFGetFieldDefaulted(t, TIFFTAG_FILLORDER, &fill);
  TIFFGetFieldDefaulted(t, TIFFTAG_COMPRESSION, &compression);
  TIFFGetFieldDefaulted(t, TIFFTAG_EXTRASAMPLES, &extra_count, &extra);
  const int pm = l->photometric, bits = l->bits, spp = l->samples;
  // Unspecified (0) or unassociated (2) alpha: Pillow's "LX"/"LA"/"RGBX"/"RGBA" raw modes.
  const bool plain_extra = extra_count == 1 && extra != nullptr && (extra[0] == 0 || extra[0] == 2);
  if (!TIFFIsCODECConfigured(compression)) {
    return absl::UnimplementedError(
        absl::StrCat("unsupported TIFF compression ", compression, " (not in this libtiff)"));
  }
  bool ok = format == 1 && (planar == 1 || spp == 1) && fill == 1 && compression != 6 &&
            compression != 7;
  if (pm == PHOTOMETRIC_MINISBLACK || pm == PHOTOMETRIC_MINISWHITE) {
    ok = ok && ((bits == 8 && (spp == 1 || (spp == 2 && plain_extra && pm == 1))) ||
                (bits == 1 && spp == 1));
  } else if (pm == PHOTOMETRIC_RGB) {
    ok = ok && bits == 8 && (spp == 3 || (spp == 4 && plain_extra));
  } else if (pm == PHOTOMETRIC_PALETTE) {
    ok = ok && spp == 1 && (bits == 1 || bits == 2 || bits == 4 || bits == 8);
  } else {
    ok = false;
  }
  if (!ok) {
    return absl::UnimplementedError(absl::StrCat(
        "unsupported TIFF layout: photometric ", pm, ", ", spp, " x ", bits, "-bit samples",
        format != 1 ? ", non-integer samples" : "", planar != 1 ? ", separate planes" : "",
        compression == 6 || compression == 7 ? ", JPEG compression" : "",
        fill != 1 ? ", LSB-first fill order" : "",
        extra_count > 0 && !plain_extra ? ", associated alpha" : ""));
  }
  if (pm == PHOTOMETRIC_PALETTE) {
    uint16_t *r = nullptr, *g = nullptr, *b = nullptr;
    if (!TIFFGetField(t, TIFFTAG_COLORMAP, &r, &g, &b)) {
      return absl::DataLossError("corrupt TIFF: palette image without a colour map");
    }
    for (int i = 0; i < (1 << bits); ++i) {  // Pillow keeps each entry's high byte
      l->palette[i][0] = static_cast<uint8_t>(r[i] >> 8);
      l->palette[i][1] = static_cast<uint8_t>(g[i] >> 8);
      l->palette[i][2] = static_cast<uint8_t>(b[i] >> 8);
    }
  }
  return absl::OkStatus();
}

/// Reads every strip or tile into `out`: `height` rows of `row_bytes` packed samples.
absl::Status ReadSamples(TIFF* t, MemFile& f, const Layout& l, size_t row_bytes, uint8_t* out,
                         Scratch& scratch) {
  const size_t h = static_cast<size_t>(l.height);
  if (!TIFFIsTiled(t)) {
    uint32_t rows_per_strip = 0;
    TIFFGetFieldDefaulted(t, TIFFTAG_ROWSPERSTRIP, &rows_per_strip);
    rows_per_strip = std::clamp<uint32_t>(rows_per_strip, 1, static_cast<uint32_t>(h));
    for (size_t y = 0, s = 0; y < h; y += rows_per_strip, ++s) {
      const size_t rows = std::min<size_t>(rows_per_strip, h - y);
      const tmsize_t want = static_cast<tmsize_t>(rows * row_bytes);
      if (TIFFReadEncodedStrip(t, static_cast<uint32_t>(s), out + y * row_bytes, want) != want) {
        return LibtiffError(f, "strip ends early");
      }
    }
    return absl::OkStatus();
  }
  uint32_t tw = 0, th = 0;
  TIFFGetField(t, TIFFTAG_TILEWIDTH, &tw);
  TIFFGetField(t, TIFFTAG_TILELENGTH, &th);
  const tmsize_t tile_bytes = TIFFTileSize(t);
  const size_t tile_row = static_cast<size_t>(TIFFTileRowSize(t));
  if (tw == 0 || th == 0 || tile_bytes <= 0 || tile_row * th != static_cast<size_t>(tile_bytes)) {
    return absl::DataLossError("corrupt TIFF: bad tile geometry");
  }
  uint8_t* tile = scratch.Tile(static_cast<size_t>(tile_bytes));
  const size_t bits_per_pixel = static_cast<size_t>(l.bits) * l.samples;
  for (uint32_t y = 0; y < h; y += th) {
    for (uint32_t x = 0; x < static_cast<uint32_t>(l.width); x += tw) {
      if (TIFFReadTile(t, tile, x, y, 0, 0) != tile_bytes) {
        return LibtiffError(f, "tile ends early");
      }
      // Tile widths are multiples of 16 pixels, so a tile starts on a byte of the row.
      const size_t x0 = x * bits_per_pixel / 8;
      const size_t bytes = std::min(tile_row, row_bytes - x0);
      for (uint32_t r = 0; r < th && y + r < h; ++r) {
        std::memcpy(out + (y + r) * row_bytes + x0, tile + r * tile_row, bytes);
      }
    }
  }
  return absl::OkStatus();
}

/// One row of samples to RGB with Pillow's raw modes: "L", "L;I" (min-is-white: 255 - v),
/// "1"/"1;I", "LX"/"LA" (first sample), "RGB"/"RGBX"/"RGBA" (first three), "P;n" (colour map).
void ConvertRow(const Layout& l, const uint8_t* in, uint8_t* out) {
  const int w = l.width, spp = l.samples;
  const bool white_is_zero = l.photometric == PHOTOMETRIC_MINISWHITE;
  if (l.photometric == PHOTOMETRIC_PALETTE) {
    const int per_byte = 8 / l.bits;
    for (int x = 0; x < w; ++x, out += 3) {
      const int v = l.bits == 8 ? in[x]
                                : (in[x / per_byte] >> (8 - l.bits * (x % per_byte + 1))) &
                                      ((1 << l.bits) - 1);
      std::memcpy(out, l.palette[v], 3);
    }
  } else if (l.photometric == PHOTOMETRIC_RGB) {
    for (int x = 0; x < w; ++x, in += spp, out += 3) std::memcpy(out, in, 3);
  } else if (l.bits == 1) {
    for (int x = 0; x < w; ++x, out += 3) {
      const bool set = (in[x >> 3] >> (7 - (x & 7))) & 1;
      out[0] = out[1] = out[2] = set != white_is_zero ? 255 : 0;
    }
  } else {
    for (int x = 0; x < w; ++x, in += spp, out += 3) {
      out[0] = out[1] = out[2] = white_is_zero ? static_cast<uint8_t>(255 - in[0]) : in[0];
    }
  }
}

}  // namespace

absl::StatusOr<ImageSize> TiffHeader(const uint8_t* data, size_t size) {
  MemFile f{data, size, 0, {}};
  Tiff t;
  RL_RETURN_IF_ERROR(Open(&f, uint64_t{1} << 32, &t));
  uint32_t w = 0, h = 0;
  if (!TIFFGetField(t.get(), TIFFTAG_IMAGEWIDTH, &w) ||
      !TIFFGetField(t.get(), TIFFTAG_IMAGELENGTH, &h) || w > 0x7FFFFFFF || h > 0x7FFFFFFF) {
    return absl::DataLossError("corrupt TIFF: no valid image size");
  }
  return ImageSize{static_cast<int>(w), static_cast<int>(h)};
}

absl::Status TiffDecode(const uint8_t* data, size_t size, uint64_t max_pixels, Scratch& scratch,
                        Decoded* out) {
  MemFile f{data, size, 0, {}};
  Tiff t;
  RL_RETURN_IF_ERROR(Open(&f, max_pixels, &t));
  Layout l;
  RL_RETURN_IF_ERROR(ReadLayout(t.get(), &l));
  RL_RETURN_IF_ERROR(CheckPixelLimit("TIFF", l.width, l.height, max_pixels));
  if (scratch.labels) {
    // Pillow opens a palette TIFF as "P" (its indices) and 8-bit gray as "L" (min-is-white
    // inverted, "L;I"); 1-bit gray is "1", gray+alpha "LA".
    const bool gray = (l.photometric == PHOTOMETRIC_MINISBLACK ||
                       l.photometric == PHOTOMETRIC_MINISWHITE) && l.bits == 8 && l.samples == 1;
    if (l.photometric == PHOTOMETRIC_PALETTE) {
      for (int i = 0; i < 256; ++i) {
        l.palette[i][0] = l.palette[i][1] = l.palette[i][2] = static_cast<uint8_t>(i);
      }
    } else if (!gray) {
      return absl::UnimplementedError(absl::StrCat(
          "mode='mask' takes a label image Pillow opens as 'P' or 'L' (a palette or 8-bit gray "
          "TIFF); this TIFF has photometric ", l.photometric, ", ", l.samples, " x ", l.bits,
          "-bit samples"));
    }
  }
  const size_t w = static_cast<size_t>(l.width), h = static_cast<size_t>(l.height);
  const size_t row_bytes = (w * l.samples * l.bits + 7) / 8;
  const size_t stride = w * 3;
  uint8_t* samples = scratch.Raw(row_bytes * h);
  RL_RETURN_IF_ERROR(ReadSamples(t.get(), f, l, row_bytes, samples, scratch));
  uint8_t* px = scratch.Pixels(stride * h);
  for (size_t y = 0; y < h; ++y) ConvertRow(l, samples + y * row_bytes, px + y * stride);
  *out = Decoded{px, stride, 3, l.width, l.height};
  return absl::OkStatus();
}

}  // namespace ringloader::decode_internal
