#include "decode/image_decoder.h"

#include <spng.h>
#include <webp/decode.h>
#include <tiffio.h>
#include <webp/encode.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "testing/jpeg_fixtures.h"
#include "transform/image_transform.h"
#include "transform/random.h"

namespace ringloader {
namespace {

using Bytes = std::vector<uint8_t>;
using testing::Chunk;
using testing::Pattern;
using testing::PutLe;
using testing::RiffWebp;
using Kind = TransformStep::Kind;

// ---------------------------------------------------------------------------------------------
// Encoders for the fixtures. Pixel values are a deterministic texture; each test states the RGB
// Pillow's convert("RGB") gives for them.

struct PngSpec {
  int width = 37;
  int height = 23;
  int color_type = 2;
  int bit_depth = 8;
  bool interlaced = false;
  std::vector<uint8_t> palette;  ///< RGB triples
  std::vector<uint8_t> trns;     ///< palette alpha entries
};

/// libspng encode of `raw` (the PNG's own big-endian sample layout, rows packed).
Bytes EncodePng(const PngSpec& spec, const Bytes& raw) {
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr = {};
  ihdr.width = static_cast<uint32_t>(spec.width);
  ihdr.height = static_cast<uint32_t>(spec.height);
  ihdr.color_type = static_cast<uint8_t>(spec.color_type);
  ihdr.bit_depth = static_cast<uint8_t>(spec.bit_depth);
  ihdr.interlace_method = spec.interlaced ? 1 : 0;
  EXPECT_EQ(spng_set_ihdr(ctx, &ihdr), 0);
  if (!spec.palette.empty()) {
    spng_plte plte = {};
    plte.n_entries = static_cast<uint32_t>(spec.palette.size() / 3);
    for (uint32_t i = 0; i < plte.n_entries; ++i) {
      plte.entries[i].red = spec.palette[3 * i];
      plte.entries[i].green = spec.palette[3 * i + 1];
      plte.entries[i].blue = spec.palette[3 * i + 2];
    }
    EXPECT_EQ(spng_set_plte(ctx, &plte), 0);
  }
  if (!spec.trns.empty()) {
    spng_trns trns = {};
    trns.n_type3_entries = static_cast<uint32_t>(spec.trns.size());
    std::memcpy(trns.type3_alpha, spec.trns.data(), spec.trns.size());
    EXPECT_EQ(spng_set_trns(ctx, &trns), 0);
  }
  const int e = spng_encode_image(ctx, raw.data(), raw.size(), SPNG_FMT_RAW, SPNG_ENCODE_FINALIZE);
  EXPECT_EQ(e, 0) << spng_strerror(e);
  size_t len = 0;
  int err = 0;
  auto* buf = static_cast<uint8_t*>(spng_get_png_buffer(ctx, &len, &err));
  Bytes out(buf, buf + len);
  std::free(buf);
  spng_ctx_free(ctx);
  return out;
}

size_t PngRowBytes(const PngSpec& s) {
  const int channels[] = {1, 0, 3, 1, 2, 0, 4};
  return (static_cast<size_t>(s.width) * channels[s.color_type] * s.bit_depth + 7) / 8;
}

Bytes Decode(const Bytes& file, ImageDecoder* decoder = nullptr) {
  ImageDecoder local;
  ImageDecoder& d = decoder ? *decoder : local;
  absl::StatusOr<RgbImage> image = d.DecodeFull(file.data(), file.size());
  EXPECT_TRUE(image.ok()) << image.status();
  if (!image.ok()) return {};
  return image->pixels;
}

absl::Status DecodeStatus(const Bytes& file) {
  ImageDecoder d;
  return d.DecodeFull(file.data(), file.size()).status();
}

// ---------------------------------------------------------------------------------------------
// PNG.

/// Expected RGB for each PNG kind, by Pillow's rules (see png_decoder.cc).
Bytes ExpectedPng(const PngSpec& s, const Bytes& raw) {
  const size_t row = PngRowBytes(s);
  Bytes out;
  for (int y = 0; y < s.height; ++y) {
    const uint8_t* in = raw.data() + row * y;
    for (int x = 0; x < s.width; ++x) {
      uint8_t rgb[3];
      auto be16 = [&](int i) { return in[2 * i] << 8 | in[2 * i + 1]; };
      auto sub = [&](int i) {  // sub-byte sample
        const int per = 8 / s.bit_depth;
        return (in[i / per] >> (8 - s.bit_depth * (i % per + 1))) & ((1 << s.bit_depth) - 1);
      };
      switch (s.color_type) {
        case 0:
          if (s.bit_depth == 16) {
            rgb[0] = rgb[1] = rgb[2] = static_cast<uint8_t>(std::min(be16(x), 255));
          } else {
            rgb[0] = rgb[1] = rgb[2] =
                static_cast<uint8_t>(sub(x) * (255 / ((1 << s.bit_depth) - 1)));
          }
          break;
        case 2:
        case 6: {
          const int ch = s.color_type == 2 ? 3 : 4;
          for (int c = 0; c < 3; ++c) {
            rgb[c] = s.bit_depth == 16 ? static_cast<uint8_t>(be16(x * ch + c) >> 8)
                                       : in[x * ch + c];
          }
          break;
        }
        case 3: {
          const size_t i = static_cast<size_t>(s.bit_depth == 8 ? in[x] : sub(x));
          for (int c = 0; c < 3; ++c) {
            rgb[c] = 3 * i + 2 < s.palette.size() ? s.palette[3 * i + c] : 0;
          }
          break;
        }
        default:  // gray + alpha
          rgb[0] = rgb[1] = rgb[2] =
              s.bit_depth == 16 ? static_cast<uint8_t>(be16(2 * x) >> 8) : in[2 * x];
      }
      out.insert(out.end(), rgb, rgb + 3);
    }
  }
  return out;
}

struct PngCase {
  const char* name;
  PngSpec spec;
};

std::vector<PngCase> PngCases() {
  std::vector<PngCase> cases;
  auto add = [&](const char* name, int type, int depth, bool interlaced = false) {
    PngSpec s;
    s.color_type = type;
    s.bit_depth = depth;
    s.interlaced = interlaced;
    cases.push_back({name, s});
  };
  add("rgb8", 2, 8);
  add("rgba8", 6, 8);
  add("rgb16", 2, 16);
  add("rgba16", 6, 16);
  add("gray1", 0, 1);
  add("gray2", 0, 2);
  add("gray4", 0, 4);
  add("gray8", 0, 8);
  add("gray16", 0, 16);
  add("gray_alpha8", 4, 8);
  add("gray_alpha16", 4, 16);
  add("rgb8_interlaced", 2, 8, true);
  add("rgba16_interlaced", 6, 16, true);
  add("gray2_interlaced", 0, 2, true);
  for (int depth : {1, 2, 4, 8}) {
    PngSpec s;
    s.color_type = 3;
    s.bit_depth = depth;
    // Fewer entries than indices: the missing ones are black, as in Pillow.
    s.palette = Pattern(3 * ((1 << depth) - (depth > 1 ? 1 : 0)), 7);
    s.trns = {0, 128};
    cases.push_back({depth == 1 ? "palette1" : depth == 2 ? "palette2" : depth == 4 ? "palette4"
                                                                                  : "palette8",
                     s});
  }
  PngCase interlaced = cases.back();
  cases.push_back(interlaced);
  cases.back().name = "palette8_interlaced";
  cases.back().spec.interlaced = true;
  return cases;
}

TEST(ImageDecoderPng, EveryModeMatchesPillowRules) {
  ImageDecoder decoder;  // one decoder for every case: no state leaks between images
  for (const PngCase& c : PngCases()) {
    SCOPED_TRACE(c.name);
    const Bytes raw = Pattern(PngRowBytes(c.spec) * c.spec.height, 3);
    const Bytes file = EncodePng(c.spec, raw);
    absl::StatusOr<ImageInfo> info = decoder.ReadInfo(file.data(), file.size());
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->format, ImageFormat::kPng);
    EXPECT_EQ(info->width, c.spec.width);
    EXPECT_EQ(info->height, c.spec.height);
    EXPECT_EQ(Decode(file, &decoder), ExpectedPng(c.spec, raw));
  }
}

/// A valid 8-bit RGB PNG and the offset of its IDAT chunk's length field.
Bytes SmallPng(size_t* idat = nullptr) {
  PngSpec s;
  Bytes file = EncodePng(s, Pattern(PngRowBytes(s) * s.height, 1));
  for (size_t i = 8; idat && i + 8 < file.size(); ++i) {
    if (std::memcmp(&file[i + 4], "IDAT", 4) == 0) {
      *idat = i;
      break;
    }
  }
  return file;
}

TEST(ImageDecoderPng, BadCrcIsDataLossNamingTheChunk) {
  size_t idat = 0;
  Bytes file = SmallPng(&idat);
  ASSERT_GT(idat, 0u);
  file[idat + 8 + 5] ^= 0x40;  // a byte of the compressed data
  const absl::Status s = DecodeStatus(file);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("bad CRC in IDAT"), std::string::npos) << s;
}

TEST(ImageDecoderPng, TruncationIsDataLoss) {
  const Bytes file = SmallPng();
  for (size_t keep : {file.size() / 2, file.size() - 20}) {
    const absl::Status s = DecodeStatus(Bytes(file.begin(), file.begin() + keep));
    EXPECT_TRUE(absl::IsDataLoss(s)) << keep << ": " << s;
    EXPECT_NE(s.message().find("PNG"), std::string::npos) << s;
  }
}

// ---------------------------------------------------------------------------------------------
// WebP.

Bytes WebpLossless(const Bytes& rgb, int w, int h, bool alpha) {
  uint8_t* out = nullptr;
  size_t n = 0;
  if (alpha) {
    Bytes rgba;
    for (int i = 0; i < w * h; ++i) {
      rgba.insert(rgba.end(), &rgb[3 * i], &rgb[3 * i] + 3);
      // Never 0: the encoder may rewrite the colour of fully transparent pixels.
      rgba.push_back(static_cast<uint8_t>(1 + i * 7 % 255));
    }
    n = WebPEncodeLosslessRGBA(rgba.data(), w, h, w * 4, &out);
  } else {
    n = WebPEncodeLosslessRGB(rgb.data(), w, h, w * 3, &out);
  }
  Bytes file(out, out + n);
  WebPFree(out);
  return file;
}

RgbImage Texture(int w, int h) { return testing::MakeTexture(w, h, 11); }

TEST(ImageDecoderWebp, LosslessIsExactAndAlphaIsDropped) {
  const RgbImage t = Texture(45, 31);
  for (bool alpha : {false, true}) {
    SCOPED_TRACE(alpha ? "rgba" : "rgb");
    const Bytes file = WebpLossless(t.pixels, t.width, t.height, alpha);
    ImageDecoder d;
    absl::StatusOr<ImageInfo> info = d.ReadInfo(file.data(), file.size());
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->format, ImageFormat::kWebp);
    EXPECT_EQ(info->width, t.width);
    EXPECT_EQ(Decode(file), t.pixels);
  }
}

TEST(ImageDecoderWebp, LossyMatchesLibwebpRgbDecode) {
  const RgbImage t = Texture(64, 48);
  uint8_t* out = nullptr;
  const size_t n = WebPEncodeRGB(t.pixels.data(), t.width, t.height, t.width * 3, 80, &out);
  const Bytes file(out, out + n);
  WebPFree(out);
  int w = 0, h = 0;
  uint8_t* ref = WebPDecodeRGB(file.data(), file.size(), &w, &h);
  ASSERT_NE(ref, nullptr);
  const Bytes expected(ref, ref + size_t(w) * h * 3);
  WebPFree(ref);
  EXPECT_EQ(Decode(file), expected);
}

/// An animated WebP: a canvas with two frames, the first one smaller than the canvas.
Bytes AnimatedWebp(const Bytes& frame1, int fw, int fh, int x, int y, int cw, int ch) {
  Bytes vp8x;
  PutLe(&vp8x, 0x02, 4);  // animation flag (byte 0), reserved bytes
  PutLe(&vp8x, cw - 1, 3);
  PutLe(&vp8x, ch - 1, 3);
  Bytes anim;
  PutLe(&anim, 0xFF00FF00u, 4);  // background colour (ignored by decoders)
  PutLe(&anim, 0, 2);
  Bytes body(frame1.begin() + 12, frame1.end());  // the VP8L chunk of a still file
  Bytes anmf;
  PutLe(&anmf, x / 2, 3);
  PutLe(&anmf, y / 2, 3);
  PutLe(&anmf, fw - 1, 3);
  PutLe(&anmf, fh - 1, 3);
  PutLe(&anmf, 100, 3);  // duration
  anmf.push_back(0);     // blend, no dispose
  anmf.insert(anmf.end(), body.begin(), body.end());
  Bytes anmf2 = anmf;
  anmf2[0] = anmf2[3] = 0;  // second frame at the origin
  Bytes chunks;
  Chunk(&chunks, "VP8X", vp8x);
  Chunk(&chunks, "ANIM", anim);
  Chunk(&chunks, "ANMF", anmf);
  Chunk(&chunks, "ANMF", anmf2);
  return RiffWebp(chunks);
}

TEST(ImageDecoderWebp, AnimatedGivesFirstFrameOnBlackCanvas) {
  const RgbImage t = Texture(20, 10);
  const Bytes frame = WebpLossless(t.pixels, t.width, t.height, false);
  const int cw = 30, ch = 16, x0 = 6, y0 = 4;
  const Bytes file = AnimatedWebp(frame, t.width, t.height, x0, y0, cw, ch);
  Bytes expected(size_t(cw) * ch * 3, 0);
  for (int y = 0; y < t.height; ++y) {
    std::memcpy(&expected[(size_t(y + y0) * cw + x0) * 3], &t.pixels[size_t(y) * t.width * 3],
                size_t(t.width) * 3);
  }
  EXPECT_EQ(Decode(file), expected);
  const absl::Status s = DecodeStatus(Bytes(file.begin(), file.end() - 30));
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
}

TEST(ImageDecoderWebp, TruncationIsDataLoss) {
  const RgbImage t = Texture(45, 31);
  const Bytes file = WebpLossless(t.pixels, t.width, t.height, false);
  const absl::Status s = DecodeStatus(Bytes(file.begin(), file.begin() + file.size() / 2));
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("truncated WebP"), std::string::npos) << s;
}

// ---------------------------------------------------------------------------------------------
// BMP.

/// A BITMAPINFOHEADER file: `bits` 8 (with `palette`, BGRX entries), 24 or 32, rows padded to
/// 4 bytes, bottom-up unless `top_down`.
Bytes Bmp(int w, int h, int bits, bool top_down, const Bytes& pixels_in_file_order,
          const Bytes& palette = {}, uint32_t compression = 0) {
  Bytes b = {'B', 'M'};
  const uint32_t offset = 14 + 40 + static_cast<uint32_t>(palette.size());
  PutLe(&b, offset + static_cast<uint32_t>(pixels_in_file_order.size()), 4);
  PutLe(&b, 0, 4);
  PutLe(&b, offset, 4);
  PutLe(&b, 40, 4);
  PutLe(&b, static_cast<uint32_t>(w), 4);
  PutLe(&b, top_down ? static_cast<uint32_t>(-h) : static_cast<uint32_t>(h), 4);
  PutLe(&b, 1, 2);
  PutLe(&b, static_cast<uint32_t>(bits), 2);
  PutLe(&b, compression, 4);
  PutLe(&b, static_cast<uint32_t>(pixels_in_file_order.size()), 4);
  PutLe(&b, 2835, 4);
  PutLe(&b, 2835, 4);
  PutLe(&b, static_cast<uint32_t>(palette.size() / 4), 4);
  PutLe(&b, 0, 4);
  b.insert(b.end(), palette.begin(), palette.end());
  b.insert(b.end(), pixels_in_file_order.begin(), pixels_in_file_order.end());
  return b;
}

TEST(ImageDecoderBmp, TrueColourAndPaletteRowsInBothOrders) {
  const int w = 13, h = 7;
  const RgbImage t = Texture(w, h);
  for (int bits : {24, 32}) {
    for (bool top_down : {false, true}) {
      SCOPED_TRACE(::testing::Message() << bits << (top_down ? " top-down" : " bottom-up"));
      const size_t stride = ((size_t(w) * bits + 31) / 32) * 4;
      Bytes data(stride * h, 0);
      for (int y = 0; y < h; ++y) {
        const int fy = top_down ? y : h - 1 - y;
        for (int x = 0; x < w; ++x) {
          uint8_t* p = &data[stride * fy + size_t(x) * bits / 8];
          const uint8_t* rgb = &t.pixels[(size_t(y) * w + x) * 3];
          p[0] = rgb[2], p[1] = rgb[1], p[2] = rgb[0];
          if (bits == 32) p[3] = 0x5A;  // ignored, as Pillow's "BGRX"
        }
      }
      EXPECT_EQ(Decode(Bmp(w, h, bits, top_down, data)), t.pixels);
    }
  }
  // 8-bit palette of 20 colours: indices past it are black.
  const Bytes palette = Pattern(20 * 4, 9);
  const size_t stride = (w + 3) / 4 * 4;
  const Bytes data = Pattern(stride * h, 4);
  Bytes expected;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const int i = data[stride * (h - 1 - y) + x];
      for (int c = 2; c >= 0; --c) expected.push_back(i < 20 ? palette[4 * i + c] : 0);
    }
  }
  EXPECT_EQ(Decode(Bmp(w, h, 8, false, data, palette)), expected);
}

/// Each value of `values` replicated into R, G and B: a label image as DecodeLabels gives it.
Bytes Replicated(const Bytes& values) {
  Bytes out;
  for (uint8_t v : values) out.insert(out.end(), {v, v, v});
  return out;
}

TEST(ImageDecoderLabels, PaletteIndicesAndGrayValuesAsStored) {
  ImageDecoder decoder;
  PngSpec palette;  // 8-bit palette of 5 colours, indices past it kept (Pillow's "P")
  palette.color_type = 3;
  palette.palette = Pattern(5 * 3, 7);
  Bytes indices = Pattern(PngRowBytes(palette) * palette.height, 2);
  for (uint8_t& i : indices) i %= 9;
  const Bytes palette_file = EncodePng(palette, indices);
  absl::StatusOr<RgbImage> got = decoder.DecodeLabels(palette_file.data(), palette_file.size());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->pixels, Replicated(indices));
  // The RGB decode of the same file looks the indices up.
  EXPECT_NE(Decode(EncodePng(palette, indices)), Replicated(indices));

  palette.bit_depth = 4;  // packed indices: still "P", unscaled
  palette.interlaced = true;
  const Bytes packed = Pattern(PngRowBytes(palette) * palette.height, 3);
  Bytes unpacked;
  for (int y = 0; y < palette.height; ++y) {
    for (int x = 0; x < palette.width; ++x) {
      const uint8_t b = packed[PngRowBytes(palette) * y + x / 2];
      unpacked.push_back(x % 2 == 0 ? b >> 4 : b & 15);
    }
  }
  const Bytes packed_file = EncodePng(palette, packed);
  got = decoder.DecodeLabels(packed_file.data(), packed_file.size());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->pixels, Replicated(unpacked));

  PngSpec gray;  // 8-bit gray: its values ("L")
  gray.color_type = 0;
  const Bytes values = Pattern(PngRowBytes(gray) * gray.height, 4);
  const Bytes gray_file = EncodePng(gray, values);
  got = decoder.DecodeLabels(gray_file.data(), gray_file.size());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->pixels, Replicated(values));

  // BMP: an 8-bit palette's indices.
  const int w = 13, h = 7;
  const size_t stride = (w + 3) / 4 * 4;
  const Bytes data = Pattern(stride * h, 4);
  Bytes want;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) want.push_back(data[stride * (h - 1 - y) + x]);
  }
  const Bytes bmp = Bmp(w, h, 8, false, data, Pattern(20 * 4, 9));
  got = decoder.DecodeLabels(bmp.data(), bmp.size());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->pixels, Replicated(want));
  // The next RGB decode looks palettes up again.
  EXPECT_EQ(Decode(EncodePng(palette, packed), &decoder), Decode(EncodePng(palette, packed)));
}

TEST(ImageDecoderLabels, RefusesWhatPillowDoesNotOpenAsPOrLNamingIt) {
  ImageDecoder decoder;
  auto refused = [&](const Bytes& file, const std::string& what) {
    const absl::Status s = decoder.DecodeLabels(file.data(), file.size()).status();
    EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
    EXPECT_NE(s.message().find(what), std::string::npos) << s;
  };
  PngSpec rgb;
  refused(EncodePng(rgb, Pattern(PngRowBytes(rgb) * rgb.height, 1)), "8-bit RGB PNG");
  PngSpec gray16;
  gray16.color_type = 0;
  gray16.bit_depth = 16;
  refused(EncodePng(gray16, Pattern(PngRowBytes(gray16) * gray16.height, 1)), "16-bit gray PNG");
  refused(Bmp(4, 2, 24, false, Pattern(12 * 2, 1)), "colour 24-bit BMP");
  testing::JpegFlavor jpeg;
  jpeg.width = jpeg.height = 16;
  refused(testing::EncodeJpeg(jpeg), "this is JPEG");
}

TEST(ImageDecoderBmp, RleRunsAndTruncation) {
  const Bytes palette = Pattern(8 * 4, 5);
  // Bottom row: an encoded run of index 1, end of line; top row: an absolute run, end.
  const Bytes rle = {4, 1, 0, 0, 0, 4, 2, 3, 4, 5, 0, 1};
  Bytes expected;
  for (int i : {2, 3, 4, 5, 1, 1, 1, 1}) {
    for (int c = 2; c >= 0; --c) expected.push_back(palette[4 * i + c]);
  }
  EXPECT_EQ(Decode(Bmp(4, 2, 8, false, rle, palette, /*RLE8=*/1)), expected);
  // Pillow refuses a stream that stops before every pixel has a value.
  absl::Status s = DecodeStatus(Bmp(4, 2, 8, false, {4, 1, 0, 1}, palette, 1));
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("RLE"), std::string::npos) << s;
  s = DecodeStatus(Bmp(4, 4, 24, false, Bytes(16 * 3, 7), {}, /*RLE8=*/1));
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  const Bytes file = Bmp(4, 4, 24, false, Bytes(16 * 3, 7));
  s = DecodeStatus(Bytes(file.begin(), file.end() - 5));
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
}

// ---------------------------------------------------------------------------------------------
// TIFF.

struct TiffSpec {
  int width = 37;
  int height = 23;
  uint16_t photometric = PHOTOMETRIC_RGB;
  uint16_t bits = 8;
  uint16_t samples = 3;
  uint16_t compression = COMPRESSION_LZW;
  int tile = 0;  ///< tile size, 0: strips of 5 rows
  std::vector<uint16_t> colormap;  ///< 3 x 2^bits entries (R..., G..., B...)
};

/// libtiff encode of `raw` (packed rows) through a temporary file.
Bytes EncodeTiff(const TiffSpec& s, const Bytes& raw) {
  const std::string path = testing::MakeTempDir() + "/x.tif";
  TIFF* t = TIFFOpen(path.c_str(), "w");
  TIFFSetField(t, TIFFTAG_IMAGEWIDTH, uint32_t(s.width));
  TIFFSetField(t, TIFFTAG_IMAGELENGTH, uint32_t(s.height));
  TIFFSetField(t, TIFFTAG_PHOTOMETRIC, s.photometric);
  TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, s.bits);
  TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, s.samples);
  TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  TIFFSetField(t, TIFFTAG_COMPRESSION, s.compression);
  if (s.compression == COMPRESSION_LZW && s.bits == 8) TIFFSetField(t, TIFFTAG_PREDICTOR, 2);
  if (!s.colormap.empty()) {
    const size_t n = s.colormap.size() / 3;
    TIFFSetField(t, TIFFTAG_COLORMAP, &s.colormap[0], &s.colormap[n], &s.colormap[2 * n]);
  }
  const size_t row = (size_t(s.width) * s.samples * s.bits + 7) / 8;
  if (s.tile > 0) {
    TIFFSetField(t, TIFFTAG_TILEWIDTH, uint32_t(s.tile));
    TIFFSetField(t, TIFFTAG_TILELENGTH, uint32_t(s.tile));
    const size_t tile_row = size_t(s.tile) * s.samples * s.bits / 8;
    for (int y = 0; y < s.height; y += s.tile) {
      for (int x = 0; x < s.width; x += s.tile) {
        Bytes tile(tile_row * s.tile, 0);
        const size_t x0 = size_t(x) * s.samples * s.bits / 8;
        for (int r = 0; r < s.tile && y + r < s.height; ++r) {
          std::memcpy(&tile[tile_row * r], &raw[row * (y + r) + x0], std::min(tile_row, row - x0));
        }
        TIFFWriteTile(t, tile.data(), uint32_t(x), uint32_t(y), 0, 0);
      }
    }
  } else {
    TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, uint32_t(5));
    Bytes line(row);  // the predictor rewrites the row it is given
    for (int y = 0; y < s.height; ++y) {
      std::memcpy(line.data(), &raw[row * y], row);
      TIFFWriteScanline(t, line.data(), uint32_t(y), 0);
    }
  }
  TIFFClose(t);
  std::ifstream in(path, std::ios::binary);
  Bytes out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  return out;
}

TEST(ImageDecoderTiff, StripsTilesPaletteAndGrayFollowPillow) {
  const RgbImage t = Texture(37, 23);
  {
    TiffSpec s;  // RGB, LZW + horizontal predictor, strips
    EXPECT_EQ(Decode(EncodeTiff(s, t.pixels)), t.pixels);
    s.tile = 16;
    s.compression = COMPRESSION_ADOBE_DEFLATE;
    EXPECT_EQ(Decode(EncodeTiff(s, t.pixels)), t.pixels);
  }
  Bytes gray(size_t(37) * 23), expect_white, expect_black;
  for (size_t i = 0; i < gray.size(); ++i) {
    gray[i] = t.pixels[3 * i + 1];
    expect_black.insert(expect_black.end(), 3, gray[i]);
    expect_white.insert(expect_white.end(), 3, static_cast<uint8_t>(255 - gray[i]));
  }
  TiffSpec g;
  g.photometric = PHOTOMETRIC_MINISBLACK;
  g.samples = 1;
  EXPECT_EQ(Decode(EncodeTiff(g, gray)), expect_black);
  g.photometric = PHOTOMETRIC_MINISWHITE;  // Pillow's "L;I"
  g.tile = 16;
  EXPECT_EQ(Decode(EncodeTiff(g, gray)), expect_white);
  // 4-bit palette: a 16-bit colour map, of which Pillow keeps the high byte.
  TiffSpec p;
  p.photometric = PHOTOMETRIC_PALETTE;
  p.bits = 4;
  p.samples = 1;
  p.compression = COMPRESSION_PACKBITS;
  for (int i = 0; i < 48; ++i) p.colormap.push_back(static_cast<uint16_t>(i * 1361 + 77));
  const size_t row = (37 * 4 + 7) / 8;
  const Bytes idx = Pattern(row * 23, 8);
  Bytes expected;
  for (int y = 0; y < 23; ++y) {
    for (int x = 0; x < 37; ++x) {
      const int v = (idx[row * y + x / 2] >> (x % 2 ? 0 : 4)) & 15;
      for (int c = 0; c < 3; ++c) {
        expected.push_back(static_cast<uint8_t>(p.colormap[c * 16 + v] >> 8));
      }
    }
  }
  EXPECT_EQ(Decode(EncodeTiff(p, idx)), expected);
}

TEST(ImageDecoderTiff, UnsupportedLayoutsAndDamage) {
  TiffSpec cmyk;
  cmyk.photometric = PHOTOMETRIC_SEPARATED;
  cmyk.samples = 4;
  absl::Status s = DecodeStatus(EncodeTiff(cmyk, Pattern(37 * 23 * 4, 1)));
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  EXPECT_NE(s.message().find("photometric 5"), std::string::npos) << s;
  TiffSpec wide;
  wide.bits = 16;
  s = DecodeStatus(EncodeTiff(wide, Pattern(37 * 23 * 6, 1)));
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  TiffSpec rgb;
  rgb.compression = COMPRESSION_NONE;
  const Bytes file = EncodeTiff(rgb, Pattern(37 * 23 * 3, 2));
  // libtiff writes the strips before the directory: cutting into them leaves the header intact.
  Bytes cut = file;
  std::memset(cut.data() + 8, 0, 1000);  // zeroed strip data still decodes...
  EXPECT_TRUE(DecodeStatus(cut).ok());
  s = DecodeStatus(Bytes(file.begin(), file.begin() + file.size() / 3));
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("TIFF"), std::string::npos) << s;
}

// ---------------------------------------------------------------------------------------------
// PNM.

Bytes Pnm(const std::string& header, const Bytes& data) {
  Bytes b(header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

TEST(ImageDecoderPnm, BinaryVariantsFollowPillow) {
  const Bytes rgb = Pattern(5 * 3 * 3, 2);
  // A comment inside the header is skipped.
  EXPECT_EQ(Decode(Pnm("P6\n# made in a test\n5 3\n255\n", rgb)), rgb);
  // maxval below 255: rescaled with round-half-even, values past maxval clip.
  Bytes small = {0, 50, 100, 101, 200, 255};
  Bytes expected;
  for (int v : small) {
    const int s = std::min(255, int(std::nearbyint(v / 100.0 * 255)));
    expected.insert(expected.end(), {uint8_t(s), uint8_t(s), uint8_t(s)});
  }
  EXPECT_EQ(Decode(Pnm("P5 6 1 100\n", small)), expected);
  // 16-bit PGM: Pillow mode "I", whose RGB conversion clips at 255.
  const Bytes wide = {0x00, 0x07, 0x00, 0xFF, 0x01, 0x00, 0xFF, 0xFF};
  EXPECT_EQ(Decode(Pnm("P5 4 1 65535\n", wide)),
            (Bytes{7, 7, 7, 255, 255, 255, 255, 255, 255, 255, 255, 255}));
  // 16-bit PPM: rescaled to 0..255.
  EXPECT_EQ(Decode(Pnm("P6 1 1 65535\n", {0x00, 0x80, 0x80, 0x00, 0xFF, 0xFF})),
            (Bytes{0, 128, 255}));
  // PBM: a set bit is black; rows padded to bytes.
  EXPECT_EQ(Decode(Pnm("P4 3 2\n", {0b10100000, 0b01000000})),
            (Bytes{0, 0, 0, 255, 255, 255, 0, 0, 0, 255, 255, 255, 0, 0, 0, 255, 255, 255}));
}

TEST(ImageDecoderPnm, PlainAndTruncated) {
  absl::Status s = DecodeStatus(Pnm("P3 1 1 255\n1 2 3\n", {}));
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  EXPECT_NE(s.message().find("P3"), std::string::npos) << s;
  s = DecodeStatus(Pnm("P6 4 4 255\n", Bytes(40, 1)));
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  s = DecodeStatus(Pnm("P6 4", {}));
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
}

// ---------------------------------------------------------------------------------------------
// GIF.

/// Literal-only LZW codes for `indices` (minimum code size `bits`), packed LSB first, in
/// sub-blocks with a terminator. `keep` < size: the end code follows that many indices.
Bytes GifLzw(const Bytes& indices, int bits, size_t keep = SIZE_MAX) {
  const int clear = 1 << bits;
  std::vector<std::pair<int, int>> codes = {{clear, bits + 1}};
  int size = bits + 1, next = clear + 2;
  bool first = true;
  for (size_t i = 0; i < std::min(keep, indices.size()); ++i) {
    if (next >= 4000) {
      codes.push_back({clear, size});
      size = bits + 1, next = clear + 2, first = true;
    }
    codes.push_back({indices[i], size});
    if (first) {
      first = false;
      continue;
    }
    if (next < 4096) {
      if (next == (1 << size) - 1 && size < 12) ++size;
      ++next;
    }
  }
  codes.push_back({clear + 1, size});
  Bytes packed;
  uint64_t acc = 0;
  int nbits = 0;
  for (auto [c, s] : codes) {
    acc |= uint64_t(c) << nbits;
    nbits += s;
    for (; nbits >= 8; nbits -= 8, acc >>= 8) packed.push_back(uint8_t(acc));
  }
  if (nbits > 0) packed.push_back(uint8_t(acc));
  Bytes out = {uint8_t(bits)};
  for (size_t i = 0; i < packed.size(); i += 255) {
    const size_t n = std::min<size_t>(255, packed.size() - i);
    out.push_back(uint8_t(n));
    out.insert(out.end(), packed.begin() + i, packed.begin() + i + n);
  }
  out.push_back(0);
  return out;
}

struct GifFrame {
  int x = 0, y = 0, w = 0, h = 0;
  Bytes indices;           ///< in file order (interlaced order when `interlace`)
  int bits = 2;
  int transparency = -1;
  bool interlace = false;
  Bytes local_palette;     ///< 3 << k bytes, or empty
  size_t keep = SIZE_MAX;
};

/// A GIF89a with a `screen_w` x `screen_h` logical screen, a global table of 3 << k bytes (or
/// none) and one frame.
Bytes Gif(int screen_w, int screen_h, const Bytes& global, const GifFrame& f) {
  auto le16 = [](Bytes& b, int v) { b.push_back(uint8_t(v)), b.push_back(uint8_t(v >> 8)); };
  auto table_bits = [](size_t bytes) { return std::countr_zero(bytes / 3) - 1; };
  Bytes b = {'G', 'I', 'F', '8', '9', 'a'};
  le16(b, screen_w);
  le16(b, screen_h);
  b.push_back(global.empty() ? 0 : uint8_t(0x80 | table_bits(global.size())));
  b.push_back(1);  // background index: unused by Pillow for the first frame
  b.push_back(0);
  b.insert(b.end(), global.begin(), global.end());
  if (f.transparency >= 0) b.insert(b.end(), {'!', 0xF9, 4, 1, 0, 0, uint8_t(f.transparency), 0});
  b.push_back(',');
  le16(b, f.x);
  le16(b, f.y);
  le16(b, f.w);
  le16(b, f.h);
  uint8_t flags = f.interlace ? 0x40 : 0;
  if (!f.local_palette.empty()) flags |= 0x80 | table_bits(f.local_palette.size());
  b.push_back(flags);
  b.insert(b.end(), f.local_palette.begin(), f.local_palette.end());
  const Bytes lzw = GifLzw(f.indices, f.bits, f.keep);
  b.insert(b.end(), lzw.begin(), lzw.end());
  b.push_back(';');
  return b;
}

const Bytes kPal4 = {10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120};
const Bytes kGrey4 = {0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3};

Bytes Rgb(std::initializer_list<int> colours) {  // each colour as 0xRRGGBB
  Bytes out;
  for (int c : colours) out.insert(out.end(), {uint8_t(c >> 16), uint8_t(c >> 8), uint8_t(c)});
  return out;
}

TEST(ImageDecoderGif, PaletteLookupAndIndicesPastTheTable) {
  GifFrame f;
  f.w = 3, f.h = 2, f.bits = 8, f.indices = {0, 1, 3, 4, 200, 2};
  // Past the 4-entry table: black.
  EXPECT_EQ(Decode(Gif(3, 2, kPal4, f)),
            Rgb({0x0a141e, 0x28323c, 0x646e78, 0, 0, 0x46505a}));
  // A grey-ramp table counts as none: index i is grey i, past the table too.
  EXPECT_EQ(Decode(Gif(3, 2, kGrey4, f)),
            Rgb({0, 0x010101, 0x030303, 0x040404, 0xc8c8c8, 0x020202}));
  EXPECT_EQ(Decode(Gif(3, 2, {}, f)), Decode(Gif(3, 2, kGrey4, f)));
  // A grey-ramp local table over a coloured global one: the global colours.
  f.local_palette = kGrey4;
  EXPECT_EQ(Decode(Gif(3, 2, kPal4, f)), Decode(Gif(3, 2, kPal4, GifFrame{0, 0, 3, 2,
                                                                        f.indices, 8})));
  // A coloured local table wins over the global one.
  f.local_palette = {9, 9, 9, 8, 8, 8};
  EXPECT_EQ(Decode(Gif(3, 2, kPal4, f)),
            Rgb({0x090909, 0x080808, 0, 0, 0, 0}));
}

TEST(ImageDecoderGif, CanvasOutsideTheFrameAndInterlace) {
  GifFrame f;
  f.x = 1, f.y = 1, f.w = 2, f.h = 1, f.indices = {1, 2};
  // Outside the frame: index 0 without transparency...
  EXPECT_EQ(Decode(Gif(3, 3, kPal4, f)),
            Rgb({0x0a141e, 0x0a141e, 0x0a141e, 0x0a141e, 0x28323c, 0x46505a, 0x0a141e,
                 0x0a141e, 0x0a141e}));
  // ...the transparency index with it.
  f.transparency = 3;
  EXPECT_EQ(Decode(Gif(3, 2, kPal4, f)),
            Rgb({0x646e78, 0x646e78, 0x646e78, 0x646e78, 0x28323c, 0x46505a}));
  // A frame past the screen grows the canvas.
  f.transparency = -1;
  f.x = 2;
  ImageDecoder d;
  const Bytes grown = Gif(3, 1, kPal4, f);
  absl::StatusOr<RgbImage> img = d.DecodeFull(grown.data(), grown.size());
  ASSERT_TRUE(img.ok()) << img.status();
  EXPECT_EQ(img->width, 4);
  EXPECT_EQ(img->height, 2);
  // Interlaced rows: 0, 8 | 4 | 2, 6 | 1, 3, 5, 7, 9 for 10 rows.
  GifFrame il;
  il.w = 1, il.h = 10, il.interlace = true, il.bits = 4;
  const int order[10] = {0, 8, 4, 2, 6, 1, 3, 5, 7, 9};
  for (int r : order) il.indices.push_back(uint8_t(r));
  Bytes expected;
  for (int r = 0; r < 10; ++r) expected.insert(expected.end(), {uint8_t(r), uint8_t(r), uint8_t(r)});
  EXPECT_EQ(Decode(Gif(1, 10, {}, il)), expected);
}

TEST(ImageDecoderGif, DamageIsDataLossAndTheScreenIsLimited) {
  GifFrame f;
  f.w = 40, f.h = 30;
  f.indices = Pattern(40 * 30, 3);
  for (uint8_t& v : f.indices) v &= 3;
  const Bytes good = Gif(40, 30, kPal4, f);
  EXPECT_EQ(Decode(good).size(), size_t(40 * 30 * 3));
  // The frame is complete before the terminator and trailer: they may be missing.
  EXPECT_TRUE(DecodeStatus(Bytes(good.begin(), good.end() - 2)).ok());
  absl::Status s = DecodeStatus(Bytes(good.begin(), good.end() - 20));
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("truncated GIF"), std::string::npos) << s;
  f.keep = 500;  // an end code before the frame is complete, in a file that ends there
  s = DecodeStatus(Gif(40, 30, kPal4, f));
  EXPECT_NE(s.message().find("truncated GIF"), std::string::npos) << s;
  s = DecodeStatus(Bytes(good.begin(), good.begin() + 20));
  EXPECT_NE(s.message().find("truncated GIF"), std::string::npos) << s;
  f.keep = SIZE_MAX;
  f.bits = 13;
  s = DecodeStatus(Gif(40, 30, kPal4, f));
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("corrupt GIF"), std::string::npos) << s;
  // The limit counts the logical screen, not the 1 x 1 frame on it.
  GifFrame dot;
  dot.w = dot.h = 1, dot.indices = {1};
  const Bytes big = Gif(5000, 4000, kPal4, dot);
  ImageDecoder d;
  d.set_max_image_pixels(5000 * 4000 - 1);
  s = d.DecodeFull(big.data(), big.size()).status();
  EXPECT_TRUE(absl::IsOutOfRange(s)) << s;
  EXPECT_NE(s.message().find("GIF image 5000 x 4000"), std::string::npos) << s;
  d.set_max_image_pixels(5000 * 4000);
  absl::StatusOr<ImageInfo> info = d.ReadInfo(big.data(), big.size());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->format, ImageFormat::kGif);
  EXPECT_EQ(info->width, 5000);
}

// ---------------------------------------------------------------------------------------------
// Dispatch, limits, the transform stage.

TEST(ImageDecoder, SignatureDecidesAndUnknownDataIsNamed) {
  ImageDecoder d;
  // A GIF header with no image after it goes to the GIF reader.
  const Bytes gif = {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0, 0};
  absl::Status s = d.DecodeFull(gif.data(), gif.size()).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("truncated GIF"), std::string::npos);
  const Bytes jp2 = {0, 0, 0, 0x0c, 'j', 'P', ' ', ' ', 0x0d, 0x0a, 0x87, 0x0a};
  s = d.DecodeFull(jp2.data(), jp2.size()).status();
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  const std::string text = "just some text\n";
  s = d.DecodeFull(reinterpret_cast<const uint8_t*>(text.data()), text.size()).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("text"), std::string::npos);
  s = d.DecodeFull(nullptr, 0).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  // JPEG goes to the JPEG decoder.
  testing::JpegFlavor f;
  f.width = 40;
  f.height = 30;
  const Bytes jpeg = testing::EncodeJpeg(f);
  JpegDecoder jd;
  absl::StatusOr<RgbImage> ref = jd.DecodeFull(jpeg.data(), jpeg.size());
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(Decode(jpeg, &d), ref->pixels);
  absl::StatusOr<ImageInfo> info = d.ReadInfo(jpeg.data(), jpeg.size());
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->format, ImageFormat::kJpeg);
}

TEST(ImageDecoder, PixelLimitBeforeDecodingEveryFormat) {
  const RgbImage t = Texture(45, 31);
  PngSpec spec;
  spec.width = t.width;
  spec.height = t.height;
  TiffSpec tiff;
  tiff.width = t.width;
  tiff.height = t.height;
  const std::vector<Bytes> files = {
      EncodePng(spec, t.pixels), WebpLossless(t.pixels, t.width, t.height, false),
      Bmp(t.width, t.height, 24, true, Bytes(size_t(48 * 3) * 31, 0)),
      Pnm("P6 45 31 255\n", t.pixels), EncodeTiff(tiff, t.pixels)};
  for (const Bytes& file : files) {
    ImageDecoder d;
    d.set_max_image_pixels(45 * 31 - 1);
    absl::Status s = d.ReadInfo(file.data(), file.size()).status();
    EXPECT_TRUE(absl::IsOutOfRange(s)) << s;
    s = d.DecodeFull(file.data(), file.size()).status();
    EXPECT_TRUE(absl::IsOutOfRange(s)) << s;
    EXPECT_NE(s.message().find("exceeds the limit"), std::string::npos) << s;
    d.set_max_image_pixels(45 * 31);
    EXPECT_TRUE(d.DecodeFull(file.data(), file.size()).ok());
  }
}

TEST(ImageDecoder, DecodeIntoRendersTheSamePixelsWhateverTheFormat) {
  const RgbImage t = Texture(83, 61);
  ResizeParams resize;
  resize.size_h = 40;
  CenterCropParams crop;
  crop.size_h = crop.size_w = 32;
  const TransformPipeline p = *TransformPipeline::Create({resize, crop}, DType::kUint8,
                                                         Layout::kHWC);
  PngSpec rgb;
  rgb.width = t.width;
  rgb.height = t.height;
  PngSpec rgba = rgb;
  rgba.color_type = 6;
  Bytes with_alpha;
  for (size_t i = 0; i < t.pixels.size(); i += 3) {
    with_alpha.insert(with_alpha.end(), &t.pixels[i], &t.pixels[i] + 3);
    with_alpha.push_back(static_cast<uint8_t>(i));
  }
  const std::vector<Bytes> files = {EncodePng(rgb, t.pixels), EncodePng(rgba, with_alpha),
                                    WebpLossless(t.pixels, t.width, t.height, true),
                                    Pnm("P6 83 61 255\n", t.pixels)};
  ImageDecoder d;
  Bytes first;
  for (const Bytes& file : files) {
    Bytes out(p.SampleBytes(), 0xCD);
    SampleRng rng(1);
    DecodeStats stats;
    ASSERT_TRUE(d.DecodeInto(file.data(), file.size(), p, rng, out.data(), &stats).ok());
    EXPECT_EQ(stats.decoded_width, t.width);
    if (first.empty()) {
      first = out;
    } else {
      EXPECT_EQ(out, first);
    }
  }
}

TEST(ImageDecoder, DamagedInputsNeverCrash) {
  const RgbImage t = Texture(24, 17);
  PngSpec spec;
  spec.width = t.width;
  spec.height = t.height;
  spec.interlaced = true;
  uint8_t* lossy = nullptr;
  const size_t lossy_n = WebPEncodeRGB(t.pixels.data(), t.width, t.height, t.width * 3, 70, &lossy);
  const std::vector<Bytes> files = {
      EncodePng(spec, t.pixels), WebpLossless(t.pixels, t.width, t.height, true),
      Bytes(lossy, lossy + lossy_n), Bmp(4, 4, 24, false, Bytes(16 * 3, 7)),
      Pnm("P6 24 17 255\n", t.pixels)};
  WebPFree(lossy);
  ImageDecoder d;
  for (const Bytes& file : files) {
    for (size_t keep = 0; keep < file.size(); keep += 1 + file.size() / 97) {
      (void)d.DecodeFull(file.data(), keep);
    }
    for (uint32_t seed = 0; seed < 200; ++seed) {
      Bytes bad = file;
      const Bytes noise = Pattern(8, seed);
      for (int i = 0; i < 4; ++i) {
        bad[(noise[2 * i] * 131 + noise[2 * i + 1]) % bad.size()] ^= 1 << (seed % 8);
      }
      absl::StatusOr<RgbImage> r = d.DecodeFull(bad.data(), bad.size());
      if (r.ok()) {
        EXPECT_EQ(r->pixels.size(), size_t(r->width) * r->height * 3);
      } else {
        EXPECT_NE(r.status().code(), absl::StatusCode::kUnknown);
        EXPECT_FALSE(r.status().message().empty());
      }
    }
  }
  // The decoder is still good afterwards.
  EXPECT_EQ(Decode(EncodePng(spec, t.pixels), &d), t.pixels);
}

}  // namespace
}  // namespace ringloader

namespace ringloader {
namespace {

/// A JPEG with an EXIF APP1 segment (big-endian TIFF, IFD0 holding Orientation) after SOI.
Bytes WithExifOrientation(const Bytes& jpeg, int orientation) {
  const Bytes tiff = {'M', 'M', 0, 42, 0, 0, 0, 8,            // header, IFD0 at 8
                      0, 1,                                    // one entry
                      0x01, 0x12, 0, 3, 0, 0, 0, 1,            // Orientation, SHORT, count 1
                      0, static_cast<uint8_t>(orientation), 0, 0,
                      0, 0, 0, 0};                             // no next IFD
  Bytes app1 = {0xFF, 0xE1, 0, 0, 'E', 'x', 'i', 'f', 0, 0};
  app1.insert(app1.end(), tiff.begin(), tiff.end());
  const size_t len = app1.size() - 2;
  app1[2] = static_cast<uint8_t>(len >> 8);
  app1[3] = static_cast<uint8_t>(len);
  Bytes out(jpeg.begin(), jpeg.begin() + 2);
  out.insert(out.end(), app1.begin(), app1.end());
  out.insert(out.end(), jpeg.begin() + 2, jpeg.end());
  return out;
}

TEST(ImageDecoderExif, OrientationTurnsTheImageUprightOnlyWhenAsked) {
  testing::JpegFlavor flavor;
  flavor.width = 48;
  flavor.height = 32;
  const Bytes plain = testing::EncodeJpeg(flavor);
  ImageDecoder decoder;
  const RgbImage stored = *decoder.DecodeFull(plain.data(), plain.size());
  auto at = [](const RgbImage& im, int x, int y) {
    const uint8_t* p = im.pixels.data() + (static_cast<size_t>(y) * im.width + x) * 3;
    return std::vector<uint8_t>(p, p + 3);
  };
  for (int orientation = 1; orientation <= 8; ++orientation) {
    SCOPED_TRACE(orientation);
    const Bytes jpeg = WithExifOrientation(plain, orientation);
    decoder.set_exif_transpose(false);
    const RgbImage as_stored = *decoder.DecodeFull(jpeg.data(), jpeg.size());
    EXPECT_EQ(as_stored.pixels, stored.pixels);
    decoder.set_exif_transpose(true);
    const RgbImage upright = *decoder.DecodeFull(jpeg.data(), jpeg.size());
    const ImageInfo info = *decoder.ReadInfo(jpeg.data(), jpeg.size());
    const bool swapped = orientation >= 5;
    ASSERT_EQ(upright.width, swapped ? 32 : 48);
    ASSERT_EQ(info.width, upright.width);
    ASSERT_EQ(info.height, upright.height);
    // Where the stored image's top-left pixel lands, per ImageOps.exif_transpose.
    const int w = upright.width - 1, h = upright.height - 1;
    const int corner[9][2] = {{0, 0}, {0, 0}, {w, 0}, {w, h}, {0, h},
                              {0, 0}, {w, 0}, {w, h}, {0, h}};
    EXPECT_EQ(at(upright, corner[orientation][0], corner[orientation][1]), at(stored, 0, 0));
    // A transform plans on the upright size.
    CenterCropParams crop;
    crop.size_h = upright.height;
    crop.size_w = upright.width;
    const TransformPipeline p = *TransformPipeline::Create({crop}, DType::kUint8, Layout::kHWC);
    Bytes out(p.SampleBytes());
    SampleRng rng(1);
    ASSERT_TRUE(decoder.DecodeInto(jpeg.data(), jpeg.size(), p, rng, out.data()).ok());
    EXPECT_EQ(out, upright.pixels);
  }
}

// Names come from the decoder's one row per format (the pixel-limit and reader errors use them).
TEST(ImageFormatName, EveryFormatHasItsOwnName) {
  const std::vector<std::string> names = {
      ImageFormatName(ImageFormat::kJpeg), ImageFormatName(ImageFormat::kPng),
      ImageFormatName(ImageFormat::kWebp), ImageFormatName(ImageFormat::kBmp),
      ImageFormatName(ImageFormat::kTiff), ImageFormatName(ImageFormat::kPnm),
      ImageFormatName(ImageFormat::kGif)};
  EXPECT_EQ(names, (std::vector<std::string>{"JPEG", "PNG", "WebP", "BMP", "TIFF", "PNM", "GIF"}));
  EXPECT_STREQ(ImageFormatName(static_cast<ImageFormat>(200)), "unknown");
}

TEST(ImageDecoderLabels, TiffPaletteIndicesAndGrayValues) {
  ImageDecoder decoder;
  TiffSpec palette;
  palette.photometric = PHOTOMETRIC_PALETTE;
  palette.samples = 1;
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 256; ++i) palette.colormap.push_back(static_cast<uint16_t>((i * 97 + c * 31) << 8));
  }
  const Bytes indices = Pattern(static_cast<size_t>(palette.width) * palette.height, 6);
  const Bytes palette_file = EncodeTiff(palette, indices);
  absl::StatusOr<RgbImage> got = decoder.DecodeLabels(palette_file.data(), palette_file.size());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->pixels, Replicated(indices));

  TiffSpec gray;
  gray.photometric = PHOTOMETRIC_MINISBLACK;
  gray.samples = 1;
  const Bytes gray_file = EncodeTiff(gray, indices);
  got = decoder.DecodeLabels(gray_file.data(), gray_file.size());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->pixels, Replicated(indices));

  TiffSpec rgb;
  const Bytes rgb_file = EncodeTiff(rgb, Pattern(static_cast<size_t>(rgb.width) * rgb.height * 3, 1));
  const absl::Status refused = decoder.DecodeLabels(rgb_file.data(), rgb_file.size()).status();
  EXPECT_TRUE(absl::IsUnimplemented(refused)) << refused;
  EXPECT_NE(refused.message().find("3 x 8-bit samples"), std::string::npos) << refused;
}

TEST(ImageDecoderSniff, BothDecodersNameBytesThatAreNoImageTheSameWay) {
  // One signature table (decode/signature.h) serves the format sniffing and the JPEG decoder's
  // "not a JPEG" error: the same bytes get the same words from both.
  ImageDecoder images;
  JpegDecoder jpeg;
  auto bytes = [](const std::string& s) { return Bytes(s.begin(), s.end()); };
  struct Case {
    Bytes data;
    std::string words;
  };
  const std::vector<Case> cases = {
      {bytes("<!DOCTYPE html><html>403 Forbidden</html>"), "text data"},
      {bytes(std::string("\x00\x01\x02\x03\x04", 5)), "unknown data starting with 00 01 02 03"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.words);
    absl::StatusOr<ImageInfo> info = images.ReadInfo(c.data.data(), c.data.size());
    ASSERT_FALSE(info.ok());
    EXPECT_EQ(info.status().message(), "not an image: " + c.words);
    absl::StatusOr<JpegInfo> header = jpeg.ReadInfo(c.data.data(), c.data.size());
    ASSERT_FALSE(header.ok());
    EXPECT_EQ(header.status().message(), "not a JPEG: " + c.words);
  }
  const Bytes png = bytes(std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16));
  EXPECT_EQ(jpeg.ReadInfo(png.data(), png.size()).status().message(), "not a JPEG: PNG signature");
  const Bytes riff = bytes(std::string("RIFF\x10\0\0\0AVI LIST", 16));
  EXPECT_EQ(images.ReadInfo(riff.data(), riff.size()).status().message(),
            "not an image: RIFF container that is not WebP");
  EXPECT_EQ(jpeg.ReadInfo(riff.data(), riff.size()).status().message(), "not a JPEG: RIFF container signature");
  const Bytes mp4 = bytes(std::string("\0\0\0\x18" "ftypisom\0\0\0\0", 16));
  EXPECT_TRUE(absl::IsUnimplemented(images.ReadInfo(mp4.data(), mp4.size()).status()));
  EXPECT_EQ(jpeg.ReadInfo(mp4.data(), mp4.size()).status().message(),
            "not a JPEG: ISO media (HEIF/AVIF/MP4 'ftyp') signature");
}

}  // namespace
}  // namespace ringloader
