// jpeg_entropy: the project's baseline entropy decoder (decode/jpeg_entropy.h) against
// libjpeg's, on the JPEGs under each DIR (recursively), files in memory, one thread.
//
// First every file is decoded whole by both (libjpeg, ISLOW IDCT, RGB) and the pixels compared:
// the counts of files it took, gave up on and decoded differently (which must be 0). Then,
// alternating, best of --passes passes of each:
//
//   entropy   after jpeg_start_decompress, every MCU of the scan through the entropy decoder
//             into a zeroed coefficient buffer, and nothing else (the files it takes)
//   decode    the whole decode of those files: entropy decoding, IDCT, upsampling, colour
//
// Last, the loader's own decodes (JpegDecoder, strict, the train chain to float32, three rounds of
// draws): each sample decoded with the library's entropy decoder and with the project's, whose
// later rounds start from the resume points the first recorded (decode/jpeg_entropy.h), must be
// equal; the count of those that differ (which must be 0) is printed.
//
//   build/py/jpeg_entropy [--passes N] DIR...

#include <csetjmp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <jpeglib.h>
#include <jpegint.h>

#include "decode/jpeg_decoder.h"
#include "decode/jpeg_entropy.h"
#include "ringloader/transforms.h"
#include "transform/image_transform.h"
#include "transform/random.h"

namespace {

using ringloader::decode_internal::BaselineEntropy;

struct Error {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
};

void ErrorExit(j_common_ptr cinfo) { std::longjmp(reinterpret_cast<Error*>(cinfo->err)->jump, 1); }
void Quiet(j_common_ptr, int) {}

std::vector<uint8_t> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

class Decoder {
 public:
  Decoder() {
    cinfo_.err = jpeg_std_error(&err_.pub);
    err_.pub.error_exit = ErrorExit;
    err_.pub.emit_message = Quiet;
    jpeg_create_decompress(&cinfo_);
  }
  ~Decoder() { jpeg_destroy_decompress(&cinfo_); }

  /// Decodes `data`; `entropy_only`: the scan's MCUs alone. Returns false on failure;
  /// `installed`: whether the project's decoder took the file (with `own`).
  bool Run(const std::vector<uint8_t>& data, bool own, bool entropy_only, bool* installed) {
    *installed = false;
    if (setjmp(err_.jump) != 0) {
      jpeg_abort_decompress(&cinfo_);
      return false;
    }
    jpeg_mem_src(&cinfo_, data.data(), data.size());
    jpeg_read_header(&cinfo_, TRUE);
    cinfo_.out_color_space = JCS_RGB;
    cinfo_.dct_method = JDCT_ISLOW;
    jpeg_start_decompress(&cinfo_);
    if (own) *installed = entropy_.Install(&cinfo_);
    if (entropy_only) {
      JBLOCK blocks[D_MAX_BLOCKS_IN_MCU];
      JBLOCKROW rows[D_MAX_BLOCKS_IN_MCU];
      for (int i = 0; i < D_MAX_BLOCKS_IN_MCU; ++i) rows[i] = &blocks[i];
      const uint64_t mcus = uint64_t{cinfo_.MCUs_per_row} * cinfo_.MCU_rows_in_scan;
      for (uint64_t m = 0; m < mcus; ++m) {
        std::memset(blocks, 0, sizeof(JBLOCK) * static_cast<size_t>(cinfo_.blocks_in_MCU));
        (*cinfo_.entropy->decode_mcu)(&cinfo_, rows);
      }
      jpeg_abort_decompress(&cinfo_);
      return true;
    }
    const size_t stride = size_t{cinfo_.output_width} * 3;
    pixels_.resize(stride * cinfo_.output_height);
    while (cinfo_.output_scanline < cinfo_.output_height) {
      JSAMPROW row = pixels_.data() + stride * cinfo_.output_scanline;
      jpeg_read_scanlines(&cinfo_, &row, 1);
    }
    jpeg_finish_decompress(&cinfo_);
    return true;
  }

  bool bailed() const { return entropy_.bailed(); }
  const std::vector<uint8_t>& pixels() const { return pixels_; }

 private:
  jpeg_decompress_struct cinfo_;
  Error err_;
  BaselineEntropy entropy_;
  std::vector<uint8_t> pixels_;
};

}  // namespace

int main(int argc, char** argv) {
  int passes = 5;
  std::vector<std::vector<uint8_t>> files;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--passes") == 0 && i + 1 < argc) {
      passes = std::max(1, std::atoi(argv[++i]));
      continue;
    }
    for (const auto& e : std::filesystem::recursive_directory_iterator(argv[i])) {
      std::string ext = e.path().extension().string();
      for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (e.is_regular_file() && (ext == ".jpg" || ext == ".jpeg")) files.push_back(ReadFile(e.path()));
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: jpeg_entropy [--passes N] DIR...  (no JPEG found)\n");
    return 2;
  }
  Decoder lib, own;
  std::vector<const std::vector<uint8_t>*> taken;
  int bailed = 0, different = 0, failed = 0;
  for (const auto& f : files) {
    bool installed = false;
    const bool ok_lib = lib.Run(f, false, false, &installed);
    const bool ok_own = own.Run(f, true, false, &installed);
    if (own.bailed()) ++bailed;
    if (!ok_lib || !ok_own) {
      failed += ok_lib != ok_own;
      continue;
    }
    if (installed) taken.push_back(&f);
    if (lib.pixels() != own.pixels()) ++different;
  }
  std::printf("files %zu: taken by the project's decoder %zu, given up %d, "
              "different pixels %d, different verdicts %d\n",
              files.size(), taken.size(), bailed, different, failed);
  for (const bool entropy_only : {true, false}) {
    double best[2] = {1e30, 1e30};
    for (int p = 0; p < passes; ++p) {
      for (int which = 0; which < 2; ++which) {
        Decoder& d = which == 0 ? lib : own;
        const auto t0 = std::chrono::steady_clock::now();
        bool installed = false;
        for (const auto* f : taken) d.Run(*f, which == 1, entropy_only, &installed);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best[which] = std::min(best[which], s);
      }
    }
    std::printf("%-8s libjpeg %.3f s, project's %.3f s: %.3fx the time\n",
                entropy_only ? "entropy" : "decode", best[0], best[1], best[1] / best[0]);
  }
  // The loader's decodes, resumed from points after the first round.
  setenv("RINGLOADER_SCAN_MEMO", "process", /*overwrite=*/0);
  namespace di = ringloader::decode_internal;
  const ringloader::TransformPipeline pipeline = *ringloader::TransformPipeline::Create(
      ringloader::transforms::ImageNetTrain(), ringloader::DType::kFloat32, ringloader::Layout::kCHW);
  std::vector<uint8_t> a(pipeline.SampleBytes()), b(pipeline.SampleBytes());
  ringloader::JpegDecoder decoder;
  int samples = 0, unequal = 0;
  for (uint64_t round = 0; round < 3; ++round) {
    for (size_t i = 0; i < files.size(); ++i) {
      ringloader::SampleRng r1(ringloader::SampleSeed(0, round, i));
      ringloader::SampleRng r2(ringloader::SampleSeed(0, round, i));
      di::SetOwnEntropyEnabled(false);
      const auto s1 = decoder.DecodeInto(files[i].data(), files[i].size(), pipeline, r1, a.data());
      di::SetOwnEntropyEnabled(true);
      const auto s2 = decoder.DecodeInto(files[i].data(), files[i].size(), pipeline, r2, b.data());
      unequal += !(s1 == s2) || (s1.ok() && a != b);
      ++samples;
    }
  }
  const di::ScanIndex& index = di::ScanIndex::ProcessWide();
  std::printf("loader decodes %d (train chain, 3 rounds), unequal %d; resume points of %llu files "
              "(%llu bytes)\n",
              samples, unequal, static_cast<unsigned long long>(index.scans()),
              static_cast<unsigned long long>(index.bytes()));
  return different == 0 && failed == 0 && unequal == 0 ? 0 : 1;
}
