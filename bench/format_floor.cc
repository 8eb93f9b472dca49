// format_floor: single-thread decode rate of ringloader's ImageDecoder::DecodeFull (signature
// sniffing, Pillow's RGB conversion, the copy out) against the library's own plain RGB decode
// of the same files (libspng's spng_decode_image(SPNG_FMT_RGB8), libwebp's WebPDecodeRGB):
// the floor a whole-image decoder cannot beat. Files are read into memory first; each side runs
// `passes` passes over all files and the best pass counts.
//
//   build/py/format_floor [--passes N] FILE...     (PNG and WebP files; others are skipped)

#include <spng.h>
#include <webp/decode.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "decode/image_decoder.h"

namespace {

using Clock = std::chrono::steady_clock;

std::vector<uint8_t> ReadFile(const char* path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

bool IsPng(const std::vector<uint8_t>& f) {
  return f.size() > 8 && std::memcmp(f.data(), "\x89PNG\r\n\x1a\n", 8) == 0;
}
bool IsWebp(const std::vector<uint8_t>& f) {
  return f.size() > 12 && std::memcmp(f.data(), "RIFF", 4) == 0 &&
         std::memcmp(f.data() + 8, "WEBP", 4) == 0;
}

/// The library's plain decode to packed RGB; false on failure.
bool LibraryDecode(const std::vector<uint8_t>& f, std::vector<uint8_t>* out) {
  if (IsPng(f)) {
    spng_ctx* ctx = spng_ctx_new(0);
    size_t size = 0;
    bool ok = spng_set_png_buffer(ctx, f.data(), f.size()) == 0 &&
              spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &size) == 0;
    if (ok) {
      out->resize(size);
      ok = spng_decode_image(ctx, out->data(), size, SPNG_FMT_RGB8, 0) == 0;
    }
    spng_ctx_free(ctx);
    return ok;
  }
  int w = 0, h = 0;
  uint8_t* rgb = WebPDecodeRGB(f.data(), f.size(), &w, &h);
  if (rgb == nullptr) return false;
  out->assign(rgb, rgb + static_cast<size_t>(w) * h * 3);
  WebPFree(rgb);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int passes = 3;
  std::vector<std::vector<uint8_t>> files;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--passes") == 0 && i + 1 < argc) {
      passes = std::max(1, std::atoi(argv[++i]));
      continue;
    }
    std::vector<uint8_t> f = ReadFile(argv[i]);
    if (IsPng(f) || IsWebp(f)) files.push_back(std::move(f));
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: format_floor [--passes N] FILE...  (PNG or WebP files)\n");
    return 2;
  }
  ringloader::ImageDecoder decoder;
  std::vector<uint8_t> scratch;
  double best_ours = 1e30, best_lib = 1e30;
  for (int pass = 0; pass < passes; ++pass) {
    auto t0 = Clock::now();
    for (const auto& f : files) {
      if (!decoder.DecodeFull(f.data(), f.size()).ok()) {
        std::fprintf(stderr, "format_floor: ringloader refused a file\n");
        return 1;
      }
    }
    best_ours = std::min(best_ours, std::chrono::duration<double>(Clock::now() - t0).count());
    t0 = Clock::now();
    for (const auto& f : files) {
      if (!LibraryDecode(f, &scratch)) {
        std::fprintf(stderr, "format_floor: the library refused a file\n");
        return 1;
      }
    }
    best_lib = std::min(best_lib, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double n = static_cast<double>(files.size());
  std::printf("files %zu  ringloader %.0f/s  library %.0f/s  ratio %.2fx\n", files.size(),
              n / best_ours, n / best_lib, best_lib / best_ours);
  return 0;
}
