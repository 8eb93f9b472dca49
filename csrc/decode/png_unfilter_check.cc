// Holds the PNG unfilter's SIMD form (png_unfilter.cc: SSE2 on x86-64, NEON on AArch64) to its
// byte-by-byte reference, without GoogleTest or any library beyond the C++ runtime, so that it
// can be cross-compiled for AArch64 and run under qemu-user (scripts/test_neon.sh) where
// png_decoder_test.cc (GoogleTest, on the build machine) only reaches the SSE2 form.
// Every filter (None, Sub, Up, Average, Paeth) and pixel size 1-4 over random rows and previous
// rows of every length up to 70 pixels plus a long one, rows with only 0 and 255 (Paeth's and
// Average's extremes) and ties, each row between canaries: UnfilterRow writes exactly row[0, len)
// and equals UnfilterRowReference there.
// Usage: png_unfilter_check [--expect SSE2|NEON|scalar]   (the SIMD form the build must have;
//        scripts/test_neon.sh asks for NEON, so a build that lost it fails instead of passing
//        on the scalar path)
// Exit status 0 when everything agrees; the first mismatches are printed.
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "decode/png_unfilter.h"

namespace {

using ringloader::decode_internal::UnfilterRow;
using ringloader::decode_internal::UnfilterRowReference;
using ringloader::decode_internal::UnfilterRowSimd;

constexpr size_t kCanary = 16;
constexpr uint8_t kCanaryByte = 0xA5;

int failures = 0;
int checked = 0;

void Check(std::mt19937& rng, int filter, int bpp, size_t pixels, int kind) {
  const size_t len = pixels * static_cast<size_t>(bpp);
  std::vector<uint8_t> prev(len), row(len);
  for (size_t i = 0; i < len; ++i) {
    if (kind == 0) {  // noise
      prev[i] = static_cast<uint8_t>(rng());
      row[i] = static_cast<uint8_t>(rng());
    } else if (kind == 1) {  // only 0 and 255: the sums' and differences' extremes
      prev[i] = (rng() & 1) ? 255 : 0;
      row[i] = (rng() & 1) ? 255 : 0;
    } else {  // a few nearby values: Paeth's ties
      prev[i] = static_cast<uint8_t>(100 + rng() % 3);
      row[i] = static_cast<uint8_t>(rng() % 3);
    }
  }
  std::vector<uint8_t> expected = row;
  std::vector<uint8_t> guarded(len + 2 * kCanary, kCanaryByte);
  std::memcpy(guarded.data() + kCanary, row.data(), len);
  if (!UnfilterRowReference(filter, bpp, prev.data(), expected.data(), len) ||
      !UnfilterRow(filter, bpp, prev.data(), guarded.data() + kCanary, len)) {
    if (failures++ < 5) std::fprintf(stderr, "MISMATCH: filter %d refused\n", filter);
    return;
  }
  ++checked;
  for (size_t i = 0; i < guarded.size(); ++i) {
    const bool inside = i >= kCanary && i < kCanary + len;
    const uint8_t want = inside ? expected[i - kCanary] : kCanaryByte;
    if (guarded[i] != want) {
      if (failures++ < 5) {
        std::fprintf(stderr,
                     "MISMATCH: filter %d, %d bytes per pixel, %zu pixels, kind %d: byte %td "
                     "is %d, expected %d%s\n",
                     filter, bpp, pixels, kind, static_cast<ptrdiff_t>(i) - ptrdiff_t{kCanary},
                     guarded[i], want, inside ? "" : " (outside the row)");
      }
      return;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* expect = nullptr;
  if (argc == 3 && std::strcmp(argv[1], "--expect") == 0) {
    expect = argv[2];
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: png_unfilter_check [--expect SSE2|NEON|scalar]\n");
    return 2;
  }
  if (expect != nullptr && std::strcmp(expect, UnfilterRowSimd()) != 0) {
    std::fprintf(stderr, "png_unfilter_check: this build unfilters with %s, expected %s\n",
                 UnfilterRowSimd(), expect);
    return 1;
  }
  std::mt19937 rng(38);
  for (int bpp = 1; bpp <= 4; ++bpp) {
    for (int filter = 0; filter <= 4; ++filter) {
      for (int kind = 0; kind < 3; ++kind) {
        for (size_t pixels = 1; pixels <= 70; ++pixels) Check(rng, filter, bpp, pixels, kind);
        Check(rng, filter, bpp, 4099, kind);
      }
    }
  }
  if (failures > 0) {
    std::fprintf(stderr, "png_unfilter_check: %d of %d rows differ from the reference (%s)\n",
                 failures, checked, UnfilterRowSimd());
    return 1;
  }
  std::printf("png_unfilter_check: %d rows, every filter and pixel size 1-4: %s == reference\n",
              checked, UnfilterRowSimd());
  return 0;
}
