#pragma once
/// What a file's first bytes announce, by the signatures Pillow's plugins check: one table for
/// the image decoder's format sniffing (image_decoder.cc) and for the JPEG decoder's "not a JPEG"
/// errors (jpeg_decoder.cc), so both name the same bytes the same way.
///
/// Threading: pure functions.

#include <cstddef>
#include <cstdint>
#include <string>

namespace ringloader::decode_internal {

enum class Signature {
  kNone,       ///< none of the below
  kJpeg,       ///< FF D8 (start of image)
  kPng,
  kWebp,       ///< RIFF....WEBP
  kRiff,       ///< another RIFF container
  kBmp,        ///< "BM"
  kTiff,       ///< "II*\0" or "MM\0*"
  kGif,        ///< GIF87a, GIF89a
  kIsoMedia,   ///< an ISO media 'ftyp' box: HEIF, AVIF, MP4
  kJpeg2000,   ///< JP2 box or a J2K codestream
};

Signature SignatureOf(const uint8_t* d, size_t n);

/// Printable ASCII (tabs and line ends included) over the first 64 bytes: an HTML error page,
/// a Git LFS pointer, a CSV saved under an image's name.
bool IsPrintableText(const uint8_t* d, size_t n);

/// Words for an error about bytes that are not what a decoder wanted: "PNG signature",
/// "text data", "unknown data starting with 3c 68 74 6d"; "empty file" for no bytes.
std::string DescribeBytes(const uint8_t* d, size_t n);

}  // namespace ringloader::decode_internal
