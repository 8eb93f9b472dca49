/// Writes the fuzzer's seed corpus into the directory given as argv[1]: small JPEGs of every
/// flavour the decoder handles, encoded here (nothing is downloaded), plus a few damaged
/// variants so the error paths are reachable from the first execution. Deterministic, so
/// rerunning rewrites identical files.

#include <cstdio>
#include <string>
#include <vector>

#include "testing/jpeg_fixtures.h"

namespace {

using ringloader::testing::EncodeJpeg;
using ringloader::testing::JpegFlavor;
using ringloader::testing::WriteFile;
using Color = JpegFlavor::Color;

JpegFlavor Make(int w, int h, int hs = 2, int vs = 2) {
  JpegFlavor f;
  f.width = w;
  f.height = h;
  f.h_samp = hs;
  f.v_samp = vs;
  f.quality = 75;  // smaller files: faster executions, same code paths
  f.seed = static_cast<uint64_t>(w * 131 + h);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<std::pair<std::string, JpegFlavor>> seeds;
  // Chroma sampling: 4:2:0, 4:2:2, 4:4:4, 4:1:1, 4:4:0.
  seeds.push_back({"420_160x120", Make(160, 120, 2, 2)});
  seeds.push_back({"422_150x100", Make(150, 100, 2, 1)});
  seeds.push_back({"444_96x96", Make(96, 96, 1, 1)});
  seeds.push_back({"411_128x64", Make(128, 64, 4, 1)});
  seeds.push_back({"440_64x128", Make(64, 128, 1, 2)});
  // Large enough that the 64 px pipelines choose 1/8, 1/4 and 1/2 DCT scales and crop columns.
  seeds.push_back({"420_400x300", Make(400, 300)});
  // Edge sizes: single pixel, below one MCU, MCU-unaligned, extreme aspect both ways.
  seeds.push_back({"420_1x1", Make(1, 1)});
  seeds.push_back({"420_7x5", Make(7, 5)});
  seeds.push_back({"420_17x9", Make(17, 9)});
  seeds.push_back({"420_600x4", Make(600, 4)});
  seeds.push_back({"420_3x500", Make(3, 500)});
  {
    JpegFlavor f = Make(120, 90);
    f.progressive = true;
    seeds.push_back({"progressive_120x90", f});
    f = Make(80, 60, 1, 1);
    f.progressive = true;
    seeds.push_back({"progressive_444_80x60", f});
  }
  {
    JpegFlavor f = Make(100, 70);
    f.restart_interval = 2;
    seeds.push_back({"restart_100x70", f});
    f = Make(90, 60);
    f.arithmetic = true;
    seeds.push_back({"arithmetic_90x60", f});
    f.progressive = true;
    seeds.push_back({"arithmetic_progressive_90x60", f});
  }
  for (auto [name, color] : {std::pair{"gray_110x80", Color::kGray},
                             std::pair{"cmyk_72x48", Color::kCmyk},
                             std::pair{"ycck_72x48", Color::kYcck}}) {
    JpegFlavor f = Make(color == Color::kGray ? 110 : 72, color == Color::kGray ? 80 : 48);
    f.color = color;
    seeds.push_back({name, f});
  }

  int written = 0;
  for (const auto& [name, flavor] : seeds) {
    const std::vector<uint8_t> jpeg = EncodeJpeg(flavor);
    WriteFile(dir + "/" + name + ".jpg", jpeg);
    ++written;
    if (name == "420_160x120" || name == "progressive_120x90") {
      // Truncated (no EOI), re-terminated mid-scan (libjpeg warns and fills), junk after EOI.
      WriteFile(dir + "/" + name + "_cut_half.jpg",
                std::vector<uint8_t>(jpeg.begin(), jpeg.begin() + jpeg.size() / 2));
      std::vector<uint8_t> reterminated(jpeg.begin(), jpeg.begin() + jpeg.size() / 2);
      reterminated.push_back(0xFF);
      reterminated.push_back(0xD9);
      WriteFile(dir + "/" + name + "_reterminated.jpg", reterminated);
      std::vector<uint8_t> junk = jpeg;
      for (int i = 0; i < 64; ++i) junk.push_back(static_cast<uint8_t>(i * 37));
      WriteFile(dir + "/" + name + "_trailing_junk.jpg", junk);
      written += 3;
    }
  }
  std::printf("make_seed_corpus: %d files in %s\n", written, dir.c_str());
  return 0;
}
