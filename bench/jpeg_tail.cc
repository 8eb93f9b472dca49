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
//   build/py/jpeg_tail [--passes N] [--eval] [--once] DIR...   (the JPEGs under each DIR,
//                                                              recursively)

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "decode/clean_scans.h"
#include "decode/jpeg_decoder.h"
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

}  // namespace

int main(int argc, char** argv) {
  using ringloader::JpegDecoder;
  int passes = 3;
  bool eval = false;
  bool once = false;
  std::vector<std::vector<uint8_t>> files;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--passes") == 0 && i + 1 < argc) {
      passes = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--eval") == 0) {
      eval = true;
    } else if (std::strcmp(argv[i], "--once") == 0) {
      once = true;
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
    std::fprintf(stderr, "usage: jpeg_tail [--passes N] [--eval] [--once] DIR...  (folders of JPEGs)\n");
    return 2;
  }
  if (!once) setenv("RINGLOADER_SCAN_MEMO", "process", /*overwrite=*/0);
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
