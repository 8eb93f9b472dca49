// The PNG reader's fast path (libdeflate + in-place unfiltering) against the PNG specification
// and against the libspng path it must agree with, pixel for pixel and verdict for verdict.

#include <libdeflate.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "decode/image_formats.h"
#include "decode/png_unfilter.h"
#include "gtest/gtest.h"

namespace ringloader::decode_internal {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

TEST(PngUnfilter, EveryFilterAndPixelSizeMatchesTheSpecification) {
  for (int bpp = 1; bpp <= 4; ++bpp) {
    for (int filter = 0; filter <= 4; ++filter) {
      for (size_t pixels : {1, 2, 7, 64, 333}) {
        SCOPED_TRACE(::testing::Message() << "bpp " << bpp << " filter " << filter << " pixels "
                                          << pixels);
        const size_t len = pixels * bpp;
        const Bytes prev = Random(len, 1 + bpp * 100 + filter * 10);
        Bytes row = Random(len, 2 + bpp * 100 + filter * 10);
        Bytes expected = row;
        ASSERT_TRUE(UnfilterRowReference(filter, bpp, prev.data(), expected.data(), len));
        ASSERT_TRUE(UnfilterRow(filter, bpp, prev.data(), row.data(), len));
        EXPECT_EQ(row, expected);
      }
    }
  }
}

TEST(PngUnfilter, HandWorkedRowsFollowTheSpecification) {
  // Two RGB pixels. Paeth's three outcomes: channel 1 of pixel 1 takes up (b), channel 0 of
  // pixel 1 takes upper-left (c: left and up on opposite sides of it), channel 2 of pixel 1 a
  // tie between left and up that goes to left (a). Average rounds down.
  const Bytes prev = {15, 0, 7, 0, 30, 8};
  const Bytes filtered = {25, 1, 1, 5, 5, 5};
  const struct {
    int filter;
    Bytes expected;
  } cases[] = {{0, {25, 1, 1, 5, 5, 5}},
               {1, {25, 1, 1, 30, 6, 6}},
               {2, {40, 1, 8, 5, 35, 13}},
               {3, {32, 1, 4, 21, 20, 11}},
               {4, {40, 1, 8, 20, 35, 13}}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.filter);
    Bytes row = filtered;
    ASSERT_TRUE(UnfilterRow(c.filter, 3, prev.data(), row.data(), row.size()));
    EXPECT_EQ(row, c.expected);
    row = filtered;
    ASSERT_TRUE(UnfilterRowReference(c.filter, 3, prev.data(), row.data(), row.size()));
    EXPECT_EQ(row, c.expected);
  }
}

TEST(PngUnfilter, UnknownFilterTypeIsRefusedAndLeavesTheRow) {
  const Bytes prev(12, 3);
  Bytes row = Random(12, 9);
  const Bytes before = row;
  EXPECT_FALSE(UnfilterRow(5, 3, prev.data(), row.data(), row.size()));
  EXPECT_FALSE(UnfilterRowReference(255, 3, prev.data(), row.data(), row.size()));
  EXPECT_EQ(row, before);
}

// ---------------------------------------------------------------------------------------------
// Whole files: the fast path against the libspng path.

void Put32(Bytes& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

void PutChunk(Bytes& out, const char* type, const uint8_t* data, size_t len) {
  Put32(out, static_cast<uint32_t>(len));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data, data + len);
  Put32(out, libdeflate_crc32(0, out.data() + start, len + 4));
}

uint8_t Predict(int filter, int a, int b, int c) {
  switch (filter) {
    case 1: return static_cast<uint8_t>(a);
    case 2: return static_cast<uint8_t>(b);
    case 3: return static_cast<uint8_t>((a + b) / 2);
    case 4: {
      const int pa = std::abs(b - c), pb = std::abs(a - c), pc = std::abs(a + b - 2 * c);
      return static_cast<uint8_t>(pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
    }
    default: return 0;
  }
}

/// `pixels` (h rows of w * channels bytes) filtered as PNG scanlines, row y with filter
/// `filter_of(y)`, each row prefixed by its filter type byte.
template <typename FilterOf>
Bytes FilterRows(const Bytes& pixels, int w, int h, int channels, FilterOf filter_of) {
  const size_t row = static_cast<size_t>(w) * channels;
  Bytes out;
  for (int y = 0; y < h; ++y) {
    const int f = filter_of(y);
    out.push_back(static_cast<uint8_t>(f));
    const uint8_t* cur = &pixels[row * y];
    for (size_t i = 0; i < row; ++i) {
      const int a = i >= static_cast<size_t>(channels) ? cur[i - channels] : 0;
      const int b = y > 0 ? cur[i - row] : 0;
      const int c = y > 0 && i >= static_cast<size_t>(channels) ? cur[i - row - channels] : 0;
      out.push_back(static_cast<uint8_t>(cur[i] - Predict(f, a, b, c)));
    }
  }
  return out;
}

Bytes Zlib(const Bytes& data) {
  libdeflate_compressor* c = libdeflate_alloc_compressor(6);
  Bytes out(libdeflate_zlib_compress_bound(c, data.size()));
  out.resize(libdeflate_zlib_compress(c, data.data(), data.size(), out.data(), out.size()));
  libdeflate_free_compressor(c);
  return out;
}

/// A PNG of the zlib stream `z`, split into IDAT chunks of `idat_size` bytes.
Bytes PngFile(int w, int h, int color_type, const Bytes& z, size_t idat_size = 97) {
  Bytes out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  Bytes ihdr;
  Put32(ihdr, w);
  Put32(ihdr, h);
  ihdr.insert(ihdr.end(), {8, static_cast<uint8_t>(color_type), 0, 0, 0});
  PutChunk(out, "IHDR", ihdr.data(), ihdr.size());
  for (size_t at = 0; at < z.size(); at += idat_size) {
    PutChunk(out, "IDAT", z.data() + at, std::min(idat_size, z.size() - at));
  }
  PutChunk(out, "IEND", nullptr, 0);
  return out;
}

/// A decode's outcome as packed RGB, and where its pixels lie.
struct Outcome {
  absl::Status status;
  Bytes rgb;
  const uint8_t* pixels = nullptr;
};

Outcome DecodeWith(bool fast, const Bytes& file, Scratch& scratch) {
  Decoded d;
  Outcome o;
  o.status = fast ? PngDecode(file.data(), file.size(), uint64_t{1} << 30, scratch, &d)
                  : PngDecodeSpng(file.data(), file.size(), uint64_t{1} << 30, scratch, &d);
  if (!o.status.ok()) return o;
  o.pixels = d.pixels;
  for (int y = 0; y < d.height; ++y) {
    const uint8_t* in = d.pixels + d.stride * y;
    for (int x = 0; x < d.width; ++x) o.rgb.insert(o.rgb.end(), in + x * d.bytes_per_pixel,
                                                   in + x * d.bytes_per_pixel + 3);
  }
  return o;
}

/// The pixels a decode of `pixels` (`channels` 1, 3 or 4) must give: packed RGB.
Bytes AsRgb(const Bytes& pixels, int channels) {
  Bytes rgb;
  for (size_t i = 0; i < pixels.size(); i += channels) {
    for (int k = 0; k < 3; ++k) rgb.push_back(pixels[i + (channels == 1 ? 0 : k)]);
  }
  return rgb;
}

TEST(PngFastPath, EveryFilterOfEveryCommonModeDecodesExactly) {
  const int w = 45, h = 23;
  for (const auto& [type, channels] : {std::pair{0, 1}, std::pair{2, 3}, std::pair{6, 4}}) {
    SCOPED_TRACE(::testing::Message() << "color type " << type);
    const Bytes pixels = Random(static_cast<size_t>(w) * h * channels, 40 + type);
    const Bytes file = PngFile(w, h, type, Zlib(FilterRows(pixels, w, h, channels,
                                                           [](int y) { return y % 5; })));
    Scratch scratch;
    const Outcome fast = DecodeWith(true, file, scratch);
    ASSERT_TRUE(fast.status.ok()) << fast.status;
    EXPECT_EQ(fast.rgb, AsRgb(pixels, channels));
    if (type != 0) {
      // RGB and RGBA rows are handed on where they were unfiltered, after each filter byte.
      EXPECT_EQ(fast.pixels, scratch.raw.data() + 1);
    }
    Scratch spng_scratch;
    const Outcome spng = DecodeWith(false, file, spng_scratch);
    ASSERT_TRUE(spng.status.ok()) << spng.status;
    EXPECT_EQ(spng.rgb, fast.rgb);
  }
}

/// Rewrites the CRC of the chunk whose length field is at `at`.
void FixCrc(Bytes& file, size_t at) {
  const uint32_t len = (uint32_t{file[at]} << 24) | (uint32_t{file[at + 1]} << 16) |
                       (uint32_t{file[at + 2]} << 8) | file[at + 3];
  const uint32_t crc = libdeflate_crc32(0, &file[at + 4], len + 4);
  for (int k = 0; k < 4; ++k) file[at + 8 + len + k] = static_cast<uint8_t>(crc >> (24 - 8 * k));
}

TEST(PngFastPath, UnusualAndDamagedFilesGetLibspngsVerdict) {
  const int w = 37, h = 19;
  const Bytes pixels = Random(static_cast<size_t>(w) * h * 3, 7);
  const Bytes filtered = FilterRows(pixels, w, h, 3, [](int y) { return (y * 3) % 5; });
  const Bytes z = Zlib(filtered);
  const Bytes good = PngFile(w, h, 2, z, 1 << 20);  // one IDAT chunk: offsets below are simple
  const size_t idat = 8 + 25;                         // signature + IHDR chunk
  const size_t zstart = idat + 8;

  std::vector<std::pair<std::string, Bytes>> files;
  auto add = [&](const std::string& name, Bytes f) { files.emplace_back(name, std::move(f)); };
  {
    Bytes f = good;
    f[zstart + z.size() - 1] ^= 1;  // Adler-32
    FixCrc(f, idat);
    add("bad adler", f);
  }
  {
    Bytes f = good;
    f[zstart + z.size() / 2] ^= 0x5a;  // the deflate data
    FixCrc(f, idat);
    add("corrupt deflate data", f);
  }
  {
    Bytes f = good;
    f[zstart + 3] ^= 1;
    add("bad IDAT CRC", f);
  }
  for (size_t keep : {good.size() - 1, good.size() - 12, zstart + z.size() / 2, zstart + 1}) {
    add("truncated to " + std::to_string(keep), Bytes(good.begin(), good.begin() + keep));
  }
  {
    Bytes f = good;
    f.push_back(0);
    add("a byte after IEND", f);
  }
  add("no IEND", Bytes(good.begin(), good.end() - 12));
  add("an IDAT chunk per byte", PngFile(w, h, 2, z, 1));  // some 2,000 chunks
  {
    Bytes f = filtered;
    f[(w * 3 + 1) * 5] = 5;  // row 5's filter type
    add("filter type 5", PngFile(w, h, 2, Zlib(f)));
  }
  add("one row short", PngFile(w, h, 2, Zlib(Bytes(filtered.begin(),
                                                   filtered.end() - (w * 3 + 1)))));
  {
    Bytes f = filtered;
    f.insert(f.end(), filtered.begin(), filtered.begin() + w * 3 + 1);
    add("one row too many", PngFile(w, h, 2, Zlib(f)));
  }
  {
    Bytes zz = z;
    zz.insert(zz.end(), {1, 2, 3});
    add("data after the zlib stream", PngFile(w, h, 2, zz));
  }
  {
    // CMF 0x48: a 4 KiB window, still valid zlib if no distance reaches past it.
    Bytes zz = z;
    zz[0] = 0x48;
    zz[1] = static_cast<uint8_t>(zz[1] - (zz[1] % 32));
    zz[1] = static_cast<uint8_t>(zz[1] + (31 - ((zz[0] << 8) | zz[1]) % 31) % 31);
    add("declared 4 KiB window", PngFile(w, h, 2, zz));
    // The same declaration over a stream whose matches reach 6 KiB back: zlib does not hold a
    // stream to its declared window (only a build with INFLATE_STRICT would), nor does
    // libdeflate.
    const int rows = 20, wide = 100;
    Bytes block = Random(static_cast<size_t>(rows) * (wide * 3 + 1), 11);
    for (size_t i = 0; i < block.size(); i += wide * 3 + 1) block[i] = 0;  // filter None
    Bytes repeated;
    for (int k = 0; k < 3; ++k) repeated.insert(repeated.end(), block.begin(), block.end());
    Bytes far = Zlib(repeated);
    const uint8_t flg = static_cast<uint8_t>(far[1] - far[1] % 32);
    far[0] = 0x48;
    far[1] = static_cast<uint8_t>(flg + (31 - ((0x48 << 8) | flg) % 31) % 31);
    add("declared 4 KiB window, matches 6 KiB back", PngFile(wide, 3 * rows, 2, far));
    zz[0] = 0x88;  // a 64 KiB window: no such deflate window
    zz[1] = static_cast<uint8_t>(zz[1] - zz[1] % 32);
    zz[1] = static_cast<uint8_t>(zz[1] + (31 - ((0x88 << 8) | zz[1]) % 31) % 31);
    add("declared 64 KiB window", PngFile(w, h, 2, zz));
  }
  {
    Bytes f = PngFile(w, h, 2, z, 101);
    const Bytes text = {'k', 0, 'v'};
    Bytes between;
    PutChunk(between, "tEXt", text.data(), text.size());
    f.insert(f.begin() + idat + 12 + 101, between.begin(), between.end());
    add("tEXt between IDAT chunks", f);
  }
  {
    Bytes f = good;
    const Bytes gama = {0, 0, 0, 0};  // gamma 0: libspng drops the chunk (not strict)
    Bytes chunk;
    PutChunk(chunk, "gAMA", gama.data(), gama.size());
    f.insert(f.begin() + idat, chunk.begin(), chunk.end());
    add("invalid gAMA", f);
  }
  {
    Bytes f = good;
    Bytes chunk;
    PutChunk(chunk, "xYZW", nullptr, 0);
    chunk[4] = 'X';  // critical (upper-case first letter), unknown
    FixCrc(chunk, 0);
    f.insert(f.begin() + idat, chunk.begin(), chunk.end());
    add("unknown critical chunk", f);
  }

  int errors = 0;
  Scratch fast_scratch, spng_scratch;
  for (const auto& [name, file] : files) {
    SCOPED_TRACE(name);
    const Outcome fast = DecodeWith(true, file, fast_scratch);
    const Outcome spng = DecodeWith(false, file, spng_scratch);
    EXPECT_EQ(fast.status, spng.status);
    EXPECT_EQ(fast.rgb, spng.rgb);
    if (name == "bad adler" || name == "corrupt deflate data" || name == "bad IDAT CRC" ||
        name == "filter type 5" || name == "one row short" || name == "declared 64 KiB window") {
      // Damage inside the image data: refused, with CRC and Adler-32 checked as before.
      EXPECT_TRUE(absl::IsDataLoss(fast.status)) << fast.status;
      ++errors;
    }
  }
  EXPECT_EQ(errors, 6);
  // The undamaged original decodes on the fast path.
  const Outcome fast = DecodeWith(true, good, fast_scratch);
  ASSERT_TRUE(fast.status.ok()) << fast.status;
  EXPECT_EQ(fast.pixels, fast_scratch.raw.data() + 1);
  EXPECT_EQ(fast.rgb, pixels);
}

}  // namespace
}  // namespace ringloader::decode_internal
