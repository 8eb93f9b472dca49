#include "decode/signature.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"

namespace ringloader::decode_internal {
namespace {

bool StartsWith(const uint8_t* d, size_t n, const char* sig, size_t len) {
  return n >= len && std::memcmp(d, sig, len) == 0;
}

}  // namespace

Signature SignatureOf(const uint8_t* d, size_t n) {
  if (d == nullptr || n == 0) return Signature::kNone;
  if (StartsWith(d, n, "\xff\xd8", 2)) return Signature::kJpeg;
  if (StartsWith(d, n, "\x89PNG\r\n\x1a\n", 8)) return Signature::kPng;
  if (StartsWith(d, n, "RIFF", 4)) {
    return n >= 12 && std::memcmp(d + 8, "WEBP", 4) == 0 ? Signature::kWebp : Signature::kRiff;
  }
  if (StartsWith(d, n, "BM", 2)) return Signature::kBmp;
  if (StartsWith(d, n, "II*\0", 4) || StartsWith(d, n, "MM\0*", 4)) return Signature::kTiff;
  if (StartsWith(d, n, "GIF87a", 6) || StartsWith(d, n, "GIF89a", 6)) return Signature::kGif;
  if (n >= 12 && std::memcmp(d + 4, "ftyp", 4) == 0) return Signature::kIsoMedia;
  if (StartsWith(d, n, "\0\0\0\x0cjP  ", 8) || StartsWith(d, n, "\xff\x4f\xff\x51", 4)) {
    return Signature::kJpeg2000;
  }
  return Signature::kNone;
}

bool IsPrintableText(const uint8_t* d, size_t n) {
  const size_t m = std::min<size_t>(n, 64);
  for (size_t i = 0; i < m; ++i) {
    const uint8_t c = d[i];
    if (!(c == '\t' || c == '\n' || c == '\r' || (c >= 0x20 && c < 0x7f))) return false;
  }
  return true;
}

std::string DescribeBytes(const uint8_t* d, size_t n) {
  if (d == nullptr || n == 0) return "empty file";
  switch (SignatureOf(d, n)) {
    case Signature::kJpeg: return "JPEG signature";
    case Signature::kPng: return "PNG signature";
    case Signature::kWebp: return "WebP (RIFF/WEBP) signature";
    case Signature::kRiff: return "RIFF container signature";
    case Signature::kBmp: return "BMP signature";
    case Signature::kTiff: return "TIFF signature";
    case Signature::kGif: return "GIF signature";
    case Signature::kIsoMedia: return "ISO media (HEIF/AVIF/MP4 'ftyp') signature";
    case Signature::kJpeg2000: return "JPEG 2000 signature";
    case Signature::kNone: break;
  }
  if (IsPrintableText(d, n)) return "text data";
  std::string what = "unknown data starting with";
  for (size_t i = 0; i < std::min<size_t>(n, 4); ++i) absl::StrAppendFormat(&what, " %02x", d[i]);
  return what;
}

}  // namespace ringloader::decode_internal
