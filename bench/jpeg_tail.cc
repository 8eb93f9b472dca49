// jpeg_tail: what the strict verdict costs a JPEG decode with a crop. Single thread, files in
// memory, thread CPU time per image of JpegDecoder::DecodeInto on the train chain
// (RandomResizedCrop(224) + flip + ToTensor + Normalize; --eval: Resize(256) + CenterCrop(224)):
//
//   first read  strict, bytes new to the process: the scan is read past the crop to its end
//               (and fingerprinted for the memo of clean scans)
//   memo        strict, the same bytes again: the memo stops the decode after the crop
//   lenient     strict_decode=false: the scan is still read to its end, nothing fingerprinted
//
// first read - memo is the tail a first epoch pays. Each first-read pass appends one byte after
// the end-of-image marker (accepted, and new bytes to the memo); best of --passes passes. These
// passes use a memo of their own process (RINGLOADER_SCAN_MEMO=process unless set otherwise), so
// their altered bytes never land in the memo file other processes share.
//
// --once: one strict pass over the files as they are, through the memo RINGLOADER_SCAN_MEMO
// chooses (by default the file shared by the machine's processes): run it twice in fresh
// processes on one memo file for a first read by the machine against a read another process
// already vouched for (docs/bad-data.md).
//
// --entropy: the project's entropy decoder (decode/jpeg_entropy.h) against libjpeg's,
// instead. First every file is decoded whole by both (ISLOW IDCT, RGB) and the pixels compared:
// the files it took (baseline and progressive), gave up on and decoded differently (which must
// be none). Then, alternating, best of --passes passes, for the baseline and the progressive
// files it takes: `entropy`, every MCU of a baseline scan through the entropy decoder alone into
// a zeroed coefficient buffer, or jpeg_start_decompress of a progressive file (every scan read
// into the coefficient buffer, no IDCT), and `decode`, the whole decode of those files. Last,
// the loader's decodes (JpegDecoder, strict, the train chain, three rounds of draws) with the
// library's entropy decoder and with the project's, whose later rounds start from the resume
// points the first recorded: the count of unequal samples (must be 0).
//
//   build/py/jpeg_tail [--passes N] [--eval] [--once | --entropy] DIR...   (the JPEGs under
//                                                                         each DIR, recursively)

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include <chrono>
#include <csetjmp>

#include <jpeglib.h>

#include "decode/clean_scans.h"
#include "decode/jpeg_decoder.h"
#include "decode/jpeg_entropy.h"
#include "ringloader/transforms.h"
#include "transform/image_transform.h"
#include "transform/random.h"

namespace {

double ThreadCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

std::vector<uint8_t> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

using ringloader::decode_internal::BaselineEntropy;

struct Error {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
};

void ErrorExit(j_common_ptr cinfo) { std::longjmp(reinterpret_cast<Error*>(cinfo->err)->jump, 1); }
void Quiet(j_common_ptr, int) {}


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
    progress_.Arm(&cinfo_, own);
    jpeg_start_decompress(&cinfo_);  // a progressive file's scans are all read here
    *installed = progress_.installed || (own && entropy_.Install(&cinfo_));
    if (entropy_only && cinfo_.progressive_mode) {
      jpeg_abort_decompress(&cinfo_);
      return true;
    }
    if (entropy_only) {
      JBLOCK blocks[D_MAX_BLOCKS_IN_MCU];
      JBLOCKROW rows[D_MAX_BLOCKS_IN_MCU];
      for (int i = 0; i < D_MAX_BLOCKS_IN_MCU; ++i) rows[i] = &blocks[i];
      const uint64_t mcus = uint64_t{cinfo_.MCUs_per_row} * cinfo_.MCU_rows_in_scan;
      for (uint64_t m = 0; m < mcus; ++m) {
        std::memset(blocks, 0, sizeof(JBLOCK) * static_cast<size_t>(cinfo_.blocks_in_MCU));
        const auto* entropy =
            reinterpret_cast<const ringloader::decode_internal::EntropyInterface*>(cinfo_.entropy);
        (*entropy->decode_mcu)(&cinfo_, rows);
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
  ringloader::decode_internal::ProgressiveMonitor progress_{&entropy_};
  std::vector<uint8_t> pixels_;
};


/// Whether the file's first frame header is a progressive one (SOF2, or SOF6/10/14).
bool IsProgressive(const std::vector<uint8_t>& f) {
  for (size_t i = 2; i + 4 < f.size();) {
    if (f[i] != 0xFF) return false;
    const int marker = f[i + 1];
    if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC) {
      return (marker & 3) == 2;
    }
    i += 2 + ((size_t{f[i + 2]} << 8) | f[i + 3]);
  }
  return false;
}

/// --entropy (see the top of the file).
int CompareEntropyDecoders(const std::vector<std::vector<uint8_t>>& files, int passes) {
  Decoder lib, own;
  std::vector<const std::vector<uint8_t>*> taken[2];  // baseline, progressive
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
    if (installed) taken[IsProgressive(f)].push_back(&f);
    if (lib.pixels() != own.pixels()) ++different;
  }
  std::printf("files %zu: taken by the project's decoder %zu baseline and %zu progressive, "
              "given up %d, different pixels %d, different verdicts %d\n",
              files.size(), taken[0].size(), taken[1].size(), bailed, different, failed);
  for (const int progressive : {0, 1}) {
    for (const bool entropy_only : {true, false}) {
      double best[2] = {1e30, 1e30};
      for (int p = 0; p < passes; ++p) {
        for (int which = 0; which < 2; ++which) {
          Decoder& d = which == 0 ? lib : own;
          const auto t0 = std::chrono::steady_clock::now();
          bool installed = false;
          for (const auto* f : taken[progressive]) d.Run(*f, which == 1, entropy_only, &installed);
          const double s =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          best[which] = std::min(best[which], s);
        }
      }
      // A progressive file's "entropy" is jpeg_start_decompress: every scan read into the
      // coefficient buffer, no IDCT.
      std::printf("%-11s %-7s libjpeg %.3f s, project's %.3f s: %.3fx the time\n",
                  progressive ? "progressive" : "baseline", entropy_only ? "entropy" : "decode",
                  best[0], best[1], best[1] / best[0]);
    }
  }
  // The loader's decodes, resumed from points after the first round.
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

}  // namespace

int main(int argc, char** argv) {
  using ringloader::JpegDecoder;
  int passes = 3;
  bool eval = false;
  bool once = false;
  bool entropy = false;
  std::vector<std::vector<uint8_t>> files;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--passes") == 0 && i + 1 < argc) {
      passes = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--eval") == 0) {
      eval = true;
    } else if (std::strcmp(argv[i], "--once") == 0) {
      once = true;
    } else if (std::strcmp(argv[i], "--entropy") == 0) {
      entropy = true;
    } else {
      std::error_code ec;
      for (const auto& e : std::filesystem::recursive_directory_iterator(argv[i], ec)) {
        if (!e.is_regular_file()) continue;
        std::vector<uint8_t> f = ReadFile(e.path());
        if (f.size() > 3 && f[0] == 0xFF && f[1] == 0xD8) files.push_back(std::move(f));
      }
      if (ec) std::fprintf(stderr, "jpeg_tail: %s: %s\n", argv[i], ec.message().c_str());
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: jpeg_tail [--passes N] [--eval] [--once | --entropy] DIR...  "
                         "(folders of JPEGs)\n");
    return 2;
  }
  if (!once) setenv("RINGLOADER_SCAN_MEMO", "process", /*overwrite=*/0);
  if (entropy) return CompareEntropyDecoders(files, passes);
  namespace rt = ringloader::transforms;
  const ringloader::TransformPipeline pipeline =
      *ringloader::TransformPipeline::Create(eval ? rt::ImageNetEval() : rt::ImageNetTrain(),
                                             ringloader::DType::kFloat32,
                                             ringloader::Layout::kCHW);
  std::vector<uint8_t> out(pipeline.SampleBytes());
  // Best of `passes` passes over every file, in microseconds of thread CPU per image.
  auto measure = [&](bool strict, bool new_bytes) {
    double best = 1e30;
    for (int pass = 0; pass < passes; ++pass) {
      if (new_bytes) {
        for (std::vector<uint8_t>& f : files) f.push_back(static_cast<uint8_t>(pass));
      }
      JpegDecoder decoder;
      decoder.set_strict(strict);
      const double t0 = ThreadCpuSeconds();
      for (size_t i = 0; i < files.size(); ++i) {
        ringloader::SampleRng rng(ringloader::SampleSeed(0, 0, i));
        if (!decoder.DecodeInto(files[i].data(), files[i].size(), pipeline, rng, out.data())
                 .ok()) {
          std::fprintf(stderr, "jpeg_tail: file %zu was refused\n", i);
          std::exit(1);
        }
      }
      best = std::min(best, ThreadCpuSeconds() - t0);
    }
    return best * 1e6 / static_cast<double>(files.size());
  };
  if (once) {
    namespace di = ringloader::decode_internal;
    const di::CleanScanInfo before = di::DescribeProcessWideCleanScans();
    passes = 1;
    const double us = measure(/*strict=*/true, /*new_bytes=*/false);
    const di::CleanScanInfo after = di::DescribeProcessWideCleanScans();
    std::printf("files %zu, %s, one strict read: %.1f us of CPU per image; memo %s%s%s: %lld -> %lld "
                "of %lld slots\n",
                files.size(), eval ? "eval" : "train", us, before.memo.c_str(),
                before.note.empty() ? "" : " ", before.note.c_str(),
                static_cast<long long>(before.entries), static_cast<long long>(after.entries),
                static_cast<long long>(after.slots));
    return 0;
  }
  const double first = measure(/*strict=*/true, /*new_bytes=*/true);
  const double memo = measure(/*strict=*/true, /*new_bytes=*/false);
  const double lenient = measure(/*strict=*/false, /*new_bytes=*/false);
  std::printf("files %zu, %s, best of %d passes, us of CPU per image\n", files.size(),
              eval ? "eval" : "train", passes);
  std::printf("first read %.1f  memo %.1f  lenient %.1f  tail %.1f (%.1f%% of a first read)\n",
              first, memo, lenient, first - memo, 100.0 * (first - memo) / first);
  return 0;
}
