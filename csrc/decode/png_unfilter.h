#pragma once
/// PNG scanline unfiltering (filter method 0: None, Sub, Up, Average, Paeth), in place, for
/// byte-aligned pixels of 1 to 4 bytes. The Sub/Average/Paeth chains run one pixel after the
/// other (each depends on the pixel just restored), so the fast form works on a whole pixel at a
/// time in SIMD lanes (SSE2 on x86-64, NEON on AArch64) rather than byte by byte.

#include <cstddef>
#include <cstdint>

namespace ringloader::decode_internal {

/// Reverses `filter` on `row` (`len` bytes, a multiple of `bpp`; the filter type byte excluded)
/// given `prev`, the previous row already unfiltered (all zeros for an image's first row).
/// `bpp` is 1 to 4. Reads and writes only `row[0, len)` and `prev[0, len)`. Returns false, with
/// `row` untouched, for a filter type above 4.
bool UnfilterRow(int filter, int bpp, const uint8_t* prev, uint8_t* row, size_t len);

/// The same, byte by byte as the PNG specification defines it: the reference UnfilterRow is
/// tested against.
bool UnfilterRowReference(int filter, int bpp, const uint8_t* prev, uint8_t* row, size_t len);

/// The SIMD form UnfilterRow runs for 3- and 4-byte pixels in this build: "SSE2", "NEON" or
/// "scalar" (UnfilterRowReference). Named by the checks, so that a build that silently lost its
/// SIMD path (a changed macro) does not pass as tested.
const char* UnfilterRowSimd();

}  // namespace ringloader::decode_internal
