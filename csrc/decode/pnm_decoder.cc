/// Binary Netpbm reader following Pillow's PpmImagePlugin: P4 (PBM), P5 (PGM) and P6 (PPM) with
/// any maxval below 65536. The plain (ASCII) variants P1-P3, PFM and Pillow's "Py" extensions
/// are Unimplemented.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_util.h"
#include "decode/image_formats.h"

namespace ringloader::decode_internal {
namespace {

bool IsSpace(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

struct Header {
  char kind = 0;  ///< '4', '5' or '6'
  int width = 0;
  int height = 0;
  int maxval = 1;
  size_t offset = 0;  ///< first pixel byte
};

/// PpmImageFile._read_token: skips leading whitespace and '#' comments (to CR or LF, also in the
/// middle of a token), ends at one whitespace byte (consumed); at most 10 characters. Returns the
/// value of a decimal token.
absl::StatusOr<int64_t> ReadNumber(const uint8_t* d, size_t n, size_t* pos) {
  std::string token;
  while (*pos < n) {
    const uint8_t c = d[(*pos)++];
    if (IsSpace(c)) {
      if (token.empty()) continue;
      break;
    }
    if (c == '#') {
      while (*pos < n && d[*pos] != '\r' && d[*pos] != '\n') ++*pos;
      if (*pos < n) ++*pos;
      continue;
    }
    token.push_back(static_cast<char>(c));
    if (token.size() > 10) return absl::DataLossError("corrupt PNM: header token too long");
  }
  if (token.empty()) return absl::DataLossError("truncated PNM: header ends early");
  int64_t v = 0;
  for (char c : token) {
    if (c < '0' || c > '9') return absl::DataLossError("corrupt PNM: header field not a number");
    v = v * 10 + (c - '0');
  }
  return v;
}

absl::Status ParseHeader(const uint8_t* d, size_t n, Header* h) {
  // PpmImageFile._read_magic: up to 6 bytes, ended by whitespace.
  size_t pos = 0;
  std::string magic;
  while (pos < n && pos < 6) {
    const uint8_t c = d[pos++];
    if (IsSpace(c)) break;
    magic.push_back(static_cast<char>(c));
  }
  if (magic != "P4" && magic != "P5" && magic != "P6") {  // the rest of ImageDecoder's Sniff
    return absl::UnimplementedError(absl::StrCat(
        "unsupported PNM variant ", magic,
        magic.size() == 2 && magic[1] <= '3' ? " (plain text)" : ""));
  }
  h->kind = magic[1];
  RL_ASSIGN_OR_RETURN(const int64_t width, ReadNumber(d, n, &pos));
  RL_ASSIGN_OR_RETURN(const int64_t height, ReadNumber(d, n, &pos));
  if (width < 1 || height < 1 || width > 0x7FFFFFFF || height > 0x7FFFFFFF) {
    return absl::DataLossError(absl::StrCat("corrupt PNM: image size ", width, " x ", height));
  }
  h->width = static_cast<int>(width);
  h->height = static_cast<int>(height);
  if (h->kind != '4') {
    RL_ASSIGN_OR_RETURN(const int64_t maxval, ReadNumber(d, n, &pos));
    if (maxval < 1 || maxval > 65535) {
      return absl::DataLossError(absl::StrCat("corrupt PNM: maxval ", maxval));
    }
    h->maxval = static_cast<int>(maxval);
  }
  h->offset = pos;
  return absl::OkStatus();
}

/// PpmDecoder's rescaling: min(out_max, round(v / maxval * out_max)), Python's round (half to
/// even, which nearbyint gives in the default rounding mode).
inline int Rescale(int v, int maxval, int out_max) {
  const double scaled = std::nearbyint(static_cast<double>(v) / maxval * out_max);
  return static_cast<int>(std::min<double>(scaled, out_max));
}

}  // namespace

absl::StatusOr<ImageSize> PnmHeader(const uint8_t* data, size_t size) {
  Header h;
  RL_RETURN_IF_ERROR(ParseHeader(data, size, &h));
  return ImageSize{h.width, h.height};
}

absl::Status PnmDecode(const uint8_t* data, size_t size, uint64_t max_pixels, Scratch& scratch,
                       Decoded* out) {
  Header h;
  RL_RETURN_IF_ERROR(ParseHeader(data, size, &h));
  RL_RETURN_IF_ERROR(CheckPixelLimit("PNM", h.width, h.height, max_pixels));
  const size_t w = static_cast<size_t>(h.width);
  const int channels = h.kind == '6' ? 3 : 1;
  const int sample_bytes = h.maxval > 255 ? 2 : 1;
  const size_t row_bytes =
      h.kind == '4' ? (w + 7) / 8 : w * static_cast<size_t>(channels * sample_bytes);
  if ((size - h.offset) / row_bytes < static_cast<size_t>(h.height)) {
    return absl::DataLossError("truncated PNM: pixel data ends early");
  }
  const size_t stride = w * 3;
  uint8_t* px = scratch.Pixels(stride * static_cast<size_t>(h.height));
  *out = Decoded{px, stride, 3, h.width, h.height};
  // 8-bit samples: one table for every maxval. A PGM with maxval > 255 is Pillow mode "I"
  // (rescaled to 0..65535 unless maxval is 65535), whose convert("RGB") clips at 255; a PPM
  // with maxval > 255 rescales to 0..255 directly.
  uint8_t lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = static_cast<uint8_t>(Rescale(v, h.maxval, 255));
  for (int y = 0; y < h.height; ++y) {
    const uint8_t* in = data + h.offset + row_bytes * static_cast<size_t>(y);
    uint8_t* o = px + stride * static_cast<size_t>(y);
    if (h.kind == '4') {  // Pillow's "1;I": a set bit is black
      for (size_t x = 0; x < w; ++x, o += 3) {
        o[0] = o[1] = o[2] = ((in[x >> 3] >> (7 - (x & 7))) & 1) ? 0 : 255;
      }
    } else if (sample_bytes == 1) {
      if (channels == 3) {
        for (size_t i = 0; i < w * 3; ++i) o[i] = lut[in[i]];
      } else {
        for (size_t x = 0; x < w; ++x, o += 3) o[0] = o[1] = o[2] = lut[in[x]];
      }
    } else if (channels == 3) {
      for (size_t i = 0; i < w * 3; ++i) {
        o[i] = static_cast<uint8_t>(Rescale(in[2 * i] << 8 | in[2 * i + 1], h.maxval, 255));
      }
    } else {
      for (size_t x = 0; x < w; ++x, o += 3) {
        const int v = in[2 * x] << 8 | in[2 * x + 1];
        const int wide = h.maxval == 65535 ? v : Rescale(v, h.maxval, 65535);
        o[0] = o[1] = o[2] = static_cast<uint8_t>(std::min(wide, 255));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace ringloader::decode_internal
