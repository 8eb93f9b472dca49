/// Writes image_decode_fuzzer's seed corpus into argv[1]: small files of every format and
/// variant ImageDecoder reads (PNG colour types, bit depths and interlacing; lossy, lossless and
/// animated WebP; BMP depths, bitfields, RLE and row orders; uncompressed TIFF strips;
/// PBM/PGM/PPM maxvals; GIF frames offset, interlaced, transparent, with local tables), a JPEG,
/// and truncated copies so the error paths are reachable from the first execution. Encoded
/// here, never downloaded; deterministic.

#include <spng.h>
#include <webp/encode.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "testing/jpeg_fixtures.h"

namespace {

using Bytes = std::vector<uint8_t>;
using ringloader::testing::Chunk;
using ringloader::testing::Pattern;
using ringloader::testing::PutLe;
using ringloader::testing::RiffWebp;

/// libspng encode of pattern samples; palette images get `entries` colours and a tRNS chunk.
Bytes Png(int w, int h, int type, int depth, bool interlaced, int entries = 0) {
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr = {};
  ihdr.width = static_cast<uint32_t>(w);
  ihdr.height = static_cast<uint32_t>(h);
  ihdr.color_type = static_cast<uint8_t>(type);
  ihdr.bit_depth = static_cast<uint8_t>(depth);
  ihdr.interlace_method = interlaced ? 1 : 0;
  spng_set_ihdr(ctx, &ihdr);
  if (type == 3) {
    spng_plte plte = {};
    plte.n_entries = static_cast<uint32_t>(entries);
    const Bytes colours = Pattern(3 * entries, 5);
    for (int i = 0; i < entries; ++i) {
      plte.entries[i].red = colours[3 * i];
      plte.entries[i].green = colours[3 * i + 1];
      plte.entries[i].blue = colours[3 * i + 2];
    }
    spng_set_plte(ctx, &plte);
    spng_trns trns = {};
    trns.n_type3_entries = 1;
    trns.type3_alpha[0] = 0;
    spng_set_trns(ctx, &trns);
  }
  const int channels[] = {1, 0, 3, 1, 2, 0, 4};
  const size_t row = (static_cast<size_t>(w) * channels[type] * depth + 7) / 8;
  const Bytes raw = Pattern(row * h, static_cast<uint32_t>(w * h));
  spng_encode_image(ctx, raw.data(), raw.size(), SPNG_FMT_RAW, SPNG_ENCODE_FINALIZE);
  size_t len = 0;
  int err = 0;
  auto* buf = static_cast<uint8_t*>(spng_get_png_buffer(ctx, &len, &err));
  Bytes out(buf, buf + len);
  std::free(buf);
  spng_ctx_free(ctx);
  return out;
}

Bytes Webp(int w, int h, bool lossless, bool alpha) {
  const Bytes px = Pattern(static_cast<size_t>(w) * h * 4, 9);
  uint8_t* out = nullptr;
  size_t n = 0;
  if (lossless) {
    n = alpha ? WebPEncodeLosslessRGBA(px.data(), w, h, w * 4, &out)
              : WebPEncodeLosslessRGB(px.data(), w, h, w * 3, &out);
  } else {
    n = alpha ? WebPEncodeRGBA(px.data(), w, h, w * 4, 60, &out)
              : WebPEncodeRGB(px.data(), w, h, w * 3, 60, &out);
  }
  Bytes file(out, out + n);
  WebPFree(out);
  return file;
}

/// Two-frame animation on a 24 x 18 canvas; the first frame (16 x 10) sits at (4, 6).
Bytes AnimatedWebp() {
  const Bytes still = Webp(16, 10, true, true);
  Bytes vp8x, anim, anmf;
  PutLe(&vp8x, 0x12, 4);  // animation + alpha
  PutLe(&vp8x, 23, 3);
  PutLe(&vp8x, 17, 3);
  PutLe(&anim, 0, 4);
  PutLe(&anim, 0, 2);
  for (uint32_t v : {2u, 3u, 15u, 9u, 80u}) PutLe(&anmf, v, 3);
  anmf.push_back(0);
  anmf.insert(anmf.end(), still.begin() + 12, still.end());
  Bytes chunks;
  Chunk(&chunks, "VP8X", vp8x);
  Chunk(&chunks, "ANIM", anim);
  Chunk(&chunks, "ANMF", anmf);
  Chunk(&chunks, "ANMF", anmf);
  return RiffWebp(chunks);
}

/// BMP with a `header_size`-byte info header (12: OS/2 core), `colors` palette entries and, for
/// BITFIELDS (compression 3), masks after a 40-byte header.
Bytes Bmp(int w, int h, int bits, bool top_down, int header_size = 40, uint32_t compression = 0,
          int colors = 0) {
  const size_t stride = ((static_cast<size_t>(w) * bits + 31) / 32) * 4;
  const size_t entry = header_size == 12 ? 3 : 4;
  Bytes extra = Pattern(entry * colors, 3);
  if (compression == 3) {
    extra.clear();
    for (uint32_t m : {0xF800u, 0x7E0u, 0x1Fu}) PutLe(&extra, m, 4);
  }
  const uint32_t offset = static_cast<uint32_t>(14 + header_size + extra.size());
  Bytes b = {'B', 'M'};
  PutLe(&b, offset + static_cast<uint32_t>(stride * h), 4);
  PutLe(&b, 0, 4);
  PutLe(&b, offset, 4);
  PutLe(&b, static_cast<uint32_t>(header_size), 4);
  if (header_size == 12) {
    PutLe(&b, static_cast<uint32_t>(w), 2);
    PutLe(&b, static_cast<uint32_t>(h), 2);
    PutLe(&b, 1, 2);
    PutLe(&b, static_cast<uint32_t>(bits), 2);
  } else {
    PutLe(&b, static_cast<uint32_t>(w), 4);
    PutLe(&b, top_down ? static_cast<uint32_t>(-h) : static_cast<uint32_t>(h), 4);
    PutLe(&b, 1, 2);
    PutLe(&b, static_cast<uint32_t>(bits), 2);
    PutLe(&b, compression, 4);
    PutLe(&b, static_cast<uint32_t>(stride * h), 4);
    PutLe(&b, 2835, 4);
    PutLe(&b, 2835, 4);
    PutLe(&b, static_cast<uint32_t>(colors), 4);
    PutLe(&b, 0, 4);
    b.resize(14 + header_size, 0);
  }
  b.insert(b.end(), extra.begin(), extra.end());
  const Bytes px = Pattern(stride * h, 4);
  b.insert(b.end(), px.begin(), px.end());
  return b;
}

/// Little-endian uncompressed TIFF, one strip per `rows_per_strip` rows: 8-bit gray (spp 1) or
/// RGB (spp 3). Tags in ascending order, values that do not fit in 4 bytes after the IFD.
Bytes Tiff(int w, int h, int spp, int rows_per_strip) {
  const size_t row = static_cast<size_t>(w) * spp;
  const int strips = (h + rows_per_strip - 1) / rows_per_strip;
  const int tags = 9;
  const uint32_t ifd = 8, extra = ifd + 2 + tags * 12 + 4;
  const uint32_t bps_at = extra, offsets_at = bps_at + 8, counts_at = offsets_at + 4 * strips;
  const uint32_t data_at = counts_at + 4 * strips;
  Bytes b = {'I', 'I', 42, 0};
  PutLe(&b, ifd, 4);
  PutLe(&b, tags, 2);
  auto tag = [&](uint16_t id, uint16_t type, uint32_t count, uint32_t value) {
    PutLe(&b, id, 2);
    PutLe(&b, type, 2);
    PutLe(&b, count, 4);
    PutLe(&b, value, 4);
  };
  const uint32_t offsets = strips == 1 ? data_at : offsets_at;
  const uint32_t counts = strips == 1 ? static_cast<uint32_t>(row * h) : counts_at;
  tag(256, 4, 1, static_cast<uint32_t>(w));
  tag(257, 4, 1, static_cast<uint32_t>(h));
  tag(258, 3, static_cast<uint32_t>(spp), spp == 1 ? 8 : bps_at);
  tag(259, 3, 1, 1);
  tag(262, 3, 1, spp == 1 ? 1 : 2);
  tag(273, 4, static_cast<uint32_t>(strips), offsets);
  tag(277, 3, 1, static_cast<uint32_t>(spp));
  tag(278, 4, 1, static_cast<uint32_t>(rows_per_strip));
  tag(279, 4, static_cast<uint32_t>(strips), counts);
  PutLe(&b, 0, 4);  // no next IFD
  for (int i = 0; i < 4; ++i) PutLe(&b, 8, 2);
  for (int s = 0; s < strips; ++s) {
    PutLe(&b, data_at + static_cast<uint32_t>(row * rows_per_strip * s), 4);
  }
  for (int s = 0; s < strips; ++s) {
    const int rows = std::min(rows_per_strip, h - s * rows_per_strip);
    PutLe(&b, static_cast<uint32_t>(row * rows), 4);
  }
  const Bytes px = Pattern(row * h, 8);
  b.insert(b.end(), px.begin(), px.end());
  return b;
}

/// GIF89a: a `sw` x `sh` screen with a 4-entry global table, one `w` x `h` frame at (x, y)
/// whose indices (0..7, past the table too) are literal LZW codes; optionally interlaced, with a
/// transparency index and a 2-entry local table.
Bytes Gif(int sw, int sh, int x, int y, int w, int h, bool interlace, bool transparent,
          bool local) {
  Bytes b = {'G', 'I', 'F', '8', '9', 'a'};
  PutLe(&b, static_cast<uint32_t>(sw), 2);
  PutLe(&b, static_cast<uint32_t>(sh), 2);
  b.insert(b.end(), {0x81, 1, 0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120});
  if (transparent) b.insert(b.end(), {'!', 0xF9, 4, 1, 0, 0, 2, 0});
  b.push_back(',');
  for (int v : {x, y, w, h}) PutLe(&b, static_cast<uint32_t>(v), 2);
  b.push_back(static_cast<uint8_t>((interlace ? 0x40 : 0) | (local ? 0x80 : 0)));
  if (local) b.insert(b.end(), {200, 0, 0, 0, 200, 0});
  const int bits = 3, clear = 1 << bits;
  int size = bits + 1, next = clear + 2;
  uint64_t acc = uint64_t(clear);
  int nbits = size;
  Bytes packed;
  const Bytes px = Pattern(size_t(w) * h, 9);
  auto put = [&](int code) {
    acc |= uint64_t(code) << nbits;
    nbits += size;
    for (; nbits >= 8; nbits -= 8, acc >>= 8) packed.push_back(static_cast<uint8_t>(acc));
  };
  bool first = true;  // the first code after a clear adds no table entry
  for (const uint8_t v : px) {
    if (next >= 4000) put(clear), size = bits + 1, next = clear + 2, first = true;
    put(v & 7);
    if (first) {
      first = false;
    } else if (next < 4096) {
      if (next == (1 << size) - 1 && size < 12) ++size;
      ++next;
    }
  }
  put(clear + 1);
  if (nbits > 0) packed.push_back(static_cast<uint8_t>(acc));
  b.push_back(bits);
  for (size_t i = 0; i < packed.size(); i += 255) {
    const size_t n = std::min<size_t>(255, packed.size() - i);
    b.push_back(static_cast<uint8_t>(n));
    b.insert(b.end(), packed.begin() + i, packed.begin() + i + n);
  }
  b.insert(b.end(), {0, ';'});
  return b;
}

Bytes Pnm(const std::string& header, size_t data_bytes) {
  Bytes b(header.begin(), header.end());
  const Bytes px = Pattern(data_bytes, 6);
  b.insert(b.end(), px.begin(), px.end());
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<std::pair<std::string, Bytes>> seeds = {
      {"rgb8.png", Png(40, 30, 2, 8, false)},
      {"rgba8.png", Png(21, 17, 6, 8, false)},
      {"rgba16_interlaced.png", Png(17, 13, 6, 16, true)},
      {"gray1.png", Png(33, 9, 0, 1, false)},
      {"gray2_interlaced.png", Png(19, 11, 0, 2, true)},
      {"gray16.png", Png(8, 8, 0, 16, false)},
      {"gray_alpha8.png", Png(12, 7, 4, 8, false)},
      {"palette4_short.png", Png(23, 9, 3, 4, false, 11)},
      {"palette8_interlaced.png", Png(29, 21, 3, 8, true, 256)},
      {"lossy.webp", Webp(48, 32, false, false)},
      {"lossy_alpha.webp", Webp(30, 22, false, true)},
      {"lossless_alpha.webp", Webp(24, 20, true, true)},
      {"animated.webp", AnimatedWebp()},
      {"rgb24.bmp", Bmp(21, 13, 24, false)},
      {"rgbx32_top_down.bmp", Bmp(9, 7, 32, true)},
      {"palette8.bmp", Bmp(15, 10, 8, false, 40, 0, 200)},
      {"palette1.bmp", Bmp(33, 5, 1, false, 40, 0, 2)},
      {"palette4_core.bmp", Bmp(11, 6, 4, false, 12, 0, 16)},
      {"rgb565.bmp", Bmp(11, 6, 16, false, 40, 3)},
      {"rgb555_v5.bmp", Bmp(7, 5, 16, true, 124)},
      {"rle8.bmp", Bmp(15, 10, 8, false, 40, 1, 200)},
      {"rle4.bmp", Bmp(15, 10, 4, false, 40, 2, 16)},
      {"gray.tif", Tiff(19, 7, 1, 7)},
      {"rgb_strips.tif", Tiff(13, 11, 3, 4)},
      {"p6.ppm", Pnm("P6\n14 9\n255\n", 14 * 9 * 3)},
      {"p6_maxval100.ppm", Pnm("P6 10 6 100\n", 10 * 6 * 3)},
      {"p5_16bit.pgm", Pnm("P5\n# comment\n12 8\n1000\n", 12 * 8 * 2)},
      {"p4.pbm", Pnm("P4 13 7\n", 2 * 7)},
      {"plain.gif", Gif(23, 11, 0, 0, 23, 11, false, false, false)},
      {"offset_transparent_local.gif", Gif(30, 20, 5, 3, 17, 9, false, true, true)},
      {"interlaced_past_screen.gif", Gif(12, 10, 4, 2, 15, 13, true, false, false)},
  };
  ringloader::testing::JpegFlavor jpeg;
  jpeg.width = 40;
  jpeg.height = 30;
  jpeg.quality = 75;
  seeds.push_back({"small.jpg", ringloader::testing::EncodeJpeg(jpeg)});
  std::vector<std::pair<std::string, Bytes>> cut;
  for (const auto& [name, bytes] : seeds) {
    if (name == "rgb8.png" || name == "lossy.webp" || name == "animated.webp" ||
        name == "rgb24.bmp" || name == "rgb_strips.tif" || name == "p6.ppm" ||
        name == "plain.gif") {
      cut.push_back({"cut_half_" + name, Bytes(bytes.begin(), bytes.begin() + bytes.size() / 2)});
    }
  }
  seeds.insert(seeds.end(), cut.begin(), cut.end());
  for (const auto& [name, bytes] : seeds) ringloader::testing::WriteFile(dir + "/" + name, bytes);
  std::printf("make_image_seed_corpus: %zu files in %s\n", seeds.size(), dir.c_str());
  return 0;
}
