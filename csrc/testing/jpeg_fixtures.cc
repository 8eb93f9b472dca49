#include "testing/jpeg_fixtures.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>

#include "transform/random.h"

namespace ringloader::testing {
namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "jpeg_fixtures: %s\n", what.c_str());
  std::abort();
}

/// Fixture encoding never fails on valid parameters; if it does the test setup is broken.
void EncoderErrorExit(j_common_ptr cinfo) {
  char message[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, message);
  Fail(std::string("libjpeg encoder error: ") + message);
}

uint8_t Clamp8(double v) { return static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L)); }

}  // namespace

RgbImage MakeTexture(int width, int height, uint64_t seed) {
  RgbImage image;
  image.width = width;
  image.height = height;
  image.pixels.resize(static_cast<size_t>(width) * height * 3);
  SampleRng rng(seed);
  // Smooth, photo-like base: low-frequency waves with per-seed phases.
  const double fx = rng.Uniform(0.01, 0.05), fy = rng.Uniform(0.01, 0.05);
  const double px = rng.Uniform(0, 6.3), py = rng.Uniform(0, 6.3);
  // A few hard-edged shapes so resampling and chroma subsampling have edges to get wrong.
  struct Disc {
    double cx, cy, r;
    uint8_t color[3];
  };
  Disc discs[6];
  for (Disc& d : discs) {
    d.cx = rng.Uniform(0, width);
    d.cy = rng.Uniform(0, height);
    d.r = rng.Uniform(0.05, 0.25) * std::min(width, height) + 1;
    for (uint8_t& c : d.color) c = static_cast<uint8_t>(rng.RandInt(0, 256));
  }
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      double r = 128 + 90 * std::sin(x * fx + px) * std::cos(y * fy + py);
      double g = 40 + 170.0 * x / std::max(width, 1);
      double b = 220 - 180.0 * y / std::max(height, 1);
      for (const Disc& d : discs) {
        const double dx = x - d.cx, dy = y - d.cy;
        if (dx * dx + dy * dy < d.r * d.r) {
          r = 0.3 * r + 0.7 * d.color[0];
          g = 0.3 * g + 0.7 * d.color[1];
          b = 0.3 * b + 0.7 * d.color[2];
        }
      }
      // Fine stripes plus per-pixel noise: high-frequency content like real photographs.
      const double stripe = ((x / 3 + y / 5) % 2) ? 6.0 : -6.0;
      const uint64_t h = Mix64(seed * 0x100000001b3ULL + static_cast<uint64_t>(y) * 65537 + x);
      const double noise = static_cast<double>(h & 15) - 7.5;
      uint8_t* p = &image.pixels[(static_cast<size_t>(y) * width + x) * 3];
      p[0] = Clamp8(r + stripe + noise);
      p[1] = Clamp8(g + noise * 0.7);
      p[2] = Clamp8(b - stripe * 0.5 + noise * 0.5);
    }
  }
  return image;
}

std::vector<uint8_t> EncodeJpeg(const JpegFlavor& flavor) {
  const RgbImage rgb = MakeTexture(flavor.width, flavor.height, flavor.seed);
  const int w = flavor.width, h = flavor.height;
  int comps = 3;
  J_COLOR_SPACE in_space = JCS_RGB;
  std::vector<uint8_t> input;
  switch (flavor.color) {
    case JpegFlavor::Color::kYCbCr:
      input = rgb.pixels;
      break;
    case JpegFlavor::Color::kGray:
      comps = 1;
      in_space = JCS_GRAYSCALE;
      input.resize(static_cast<size_t>(w) * h);
      for (size_t i = 0; i < input.size(); ++i) {
        const uint8_t* p = &rgb.pixels[i * 3];
        input[i] = static_cast<uint8_t>((77 * p[0] + 150 * p[1] + 29 * p[2] + 128) >> 8);
      }
      break;
    case JpegFlavor::Color::kCmyk:
    case JpegFlavor::Color::kYcck:
      // Adobe-inverted CMYK (what Photoshop writes and Pillow assumes): stored k is the
      // brightness and stored c = r / k, so that c * k / 255 reproduces the texture.
      comps = 4;
      in_space = JCS_CMYK;
      input.resize(static_cast<size_t>(w) * h * 4);
      for (size_t i = 0; i < static_cast<size_t>(w) * h; ++i) {
        const uint8_t* p = &rgb.pixels[i * 3];
        const int k = std::max({int{p[0]}, int{p[1]}, int{p[2]}, 1});
        for (int c = 0; c < 3; ++c) {
          input[i * 4 + c] = static_cast<uint8_t>((p[c] * 255 + k / 2) / k);
        }
        input[i * 4 + 3] = static_cast<uint8_t>(k);
      }
      break;
  }

  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jerr.error_exit = EncoderErrorExit;
  jpeg_create_compress(&cinfo);
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  jpeg_mem_dest(&cinfo, &out, &out_size);
  cinfo.image_width = static_cast<JDIMENSION>(w);
  cinfo.image_height = static_cast<JDIMENSION>(h);
  cinfo.input_components = comps;
  cinfo.in_color_space = in_space;
  jpeg_set_defaults(&cinfo);
  if (flavor.color == JpegFlavor::Color::kCmyk) jpeg_set_colorspace(&cinfo, JCS_CMYK);
  if (flavor.color == JpegFlavor::Color::kYcck) jpeg_set_colorspace(&cinfo, JCS_YCCK);
  jpeg_set_quality(&cinfo, flavor.quality, TRUE);
  if (flavor.color == JpegFlavor::Color::kYCbCr || flavor.color == JpegFlavor::Color::kYcck) {
    for (int c = 0; c < cinfo.num_components; ++c) {
      // Luma (and K for YCCK) carry the sampling factors; chroma stays at 1x1.
      const bool full_res = c == 0 || c == 3;
      cinfo.comp_info[c].h_samp_factor = full_res ? flavor.h_samp : 1;
      cinfo.comp_info[c].v_samp_factor = full_res ? flavor.v_samp : 1;
    }
  }
  if (flavor.progressive) jpeg_simple_progression(&cinfo);
  std::vector<jpeg_scan_info> script;  // read by jpeg_start_compress's passes: lives to the end
  if (flavor.deep_refinement) {
    const int n = cinfo.num_components;
    const auto scan = [&script](int first, int count, int ss, int se, int ah, int al) {
      jpeg_scan_info info{};
      info.comps_in_scan = count;
      for (int i = 0; i < count; ++i) info.component_index[i] = first + i;
      info.Ss = ss;
      info.Se = se;
      info.Ah = ah;
      info.Al = al;
      script.push_back(info);
    };
    scan(0, n, 0, 0, 0, 2);
    for (int c = 0; c < n; ++c) {
      scan(c, 1, 1, 2, 0, 1);
      scan(c, 1, 3, 63, 0, 2);
    }
    scan(0, n, 0, 0, 2, 1);
    for (int c = 0; c < n; ++c) scan(c, 1, 3, 63, 2, 1);
    scan(0, n, 0, 0, 1, 0);
    for (int c = 0; c < n; ++c) scan(c, 1, 1, 63, 1, 0);
    cinfo.scan_info = script.data();
    cinfo.num_scans = static_cast<int>(script.size());
  }
  cinfo.restart_interval = static_cast<unsigned>(flavor.restart_interval);
  cinfo.arith_code = flavor.arithmetic ? TRUE : FALSE;
  cinfo.optimize_coding = flavor.optimize_coding ? TRUE : FALSE;
  jpeg_start_compress(&cinfo, TRUE);
  const size_t stride = static_cast<size_t>(w) * comps;
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = input.data() + stride * cinfo.next_scanline;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::vector<uint8_t> bytes(out, out + out_size);
  jpeg_destroy_compress(&cinfo);
  std::free(out);
  return bytes;
}

std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n);
  uint32_t x = seed * 2654435761u + 12345u;
  for (uint8_t& b : out) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return out;
}

void PutLe(std::vector<uint8_t>* b, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void Chunk(std::vector<uint8_t>* b, const char* tag, const std::vector<uint8_t>& payload) {
  b->insert(b->end(), tag, tag + 4);
  PutLe(b, static_cast<uint32_t>(payload.size()), 4);
  b->insert(b->end(), payload.begin(), payload.end());
  if (payload.size() & 1) b->push_back(0);
}

std::vector<uint8_t> RiffWebp(const std::vector<uint8_t>& chunks) {
  std::vector<uint8_t> file = {'R', 'I', 'F', 'F'};
  PutLe(&file, static_cast<uint32_t>(chunks.size() + 4), 4);
  file.insert(file.end(), {'W', 'E', 'B', 'P'});
  file.insert(file.end(), chunks.begin(), chunks.end());
  return file;
}

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::error_code ec;
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) Fail("create_directories(" + p.parent_path().string() + "): " + ec.message());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) Fail("fopen(" + path + ") failed");
  const size_t written = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
  if (std::fclose(f) != 0 || written != bytes.size()) Fail("write(" + path + ") failed");
}

void WriteText(const std::string& path, const std::string& text) {
  WriteFile(path, std::vector<uint8_t>(text.begin(), text.end()));
}

namespace {

/// The directories MakeTempDir made in this process, removed when it exits.
struct TempDirs {
  std::mutex mu;
  std::vector<std::string> paths;
  pid_t owner = getpid();  // a forked child that exits must not delete its parent's data
};

TempDirs& Made() {
  static TempDirs* dirs = new TempDirs;  // never destroyed: the exit handler runs after statics
  return *dirs;
}

void RemoveTempDirs() {
  TempDirs& dirs = Made();
  if (getpid() != dirs.owner) return;
  std::lock_guard<std::mutex> lock(dirs.mu);
  for (const std::string& path : dirs.paths) {
    std::error_code ignored;  // a test may have removed it already
    std::filesystem::remove_all(path, ignored);
  }
  dirs.paths.clear();
}

}  // namespace

std::string MakeTempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/ringloader_test_XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) Fail("mkdtemp(" + pattern + ") failed");
  static const bool registered = std::atexit(RemoveTempDirs) == 0;
  if (!registered) Fail("atexit failed");
  TempDirs& dirs = Made();
  std::lock_guard<std::mutex> lock(dirs.mu);
  dirs.paths.emplace_back(buf.data());
  return dirs.paths.back();
}

std::vector<Sample> WriteJpegDataset(const std::string& dir, int n, int classes) {
  std::vector<Sample> samples;
  for (int i = 0; i < n; ++i) {
    JpegFlavor f;
    f.width = 120 + (i * 37) % 90;
    f.height = 100 + (i * 53) % 80;
    f.seed = static_cast<uint64_t>(i + 1);
    f.progressive = i % 7 == 3;
    if (i % 11 == 5) f.color = JpegFlavor::Color::kGray;
    const int label = i % classes;
    const std::string path = dir + "/class_" + std::to_string(label) + "/img_" + std::to_string(i) + ".jpg";
    WriteFile(path, EncodeJpeg(f));
    samples.push_back(Sample{path, label});
  }
  return samples;
}

}  // namespace ringloader::testing
