// ringloader-bench: --data, --list, the Python sample set, or a synthetic set generated once.
#include "dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "testing/jpeg_fixtures.h"

namespace ringloader::bench {
namespace {

std::string CacheDir() {
  if (const char* env = std::getenv("RINGLOADER_CACHE"); env != nullptr && *env != '\0') return env;
  const char* home = std::getenv("HOME");
  return absl::StrCat(home != nullptr && *home != '\0' ? home : "/tmp", "/.cache/ringloader");
}

absl::Status WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

constexpr char kSyntheticMarker[] = ".ringloader-bench-synthetic";

// ImageNet-like files: shorter side 300-500 px, aspect 3:4 .. 16:9, quality 85-95, mostly 4:2:0
// with some 4:4:4 / 4:2:2, a few progressive and grayscale ones. Deterministic in `i`.
testing::JpegFlavor SyntheticFlavor(int i) {
  static constexpr double kAspects[] = {4.0 / 3.0, 3.0 / 2.0, 1.0, 16.0 / 9.0, 3.0 / 4.0};
  testing::JpegFlavor f;
  const int shorter = 300 + (i * 37) % 201;
  const double aspect = kAspects[i % 5];
  if (aspect >= 1.0) {
    f.height = shorter;
    f.width = static_cast<int>(std::lround(shorter * aspect));
  } else {
    f.width = shorter;
    f.height = static_cast<int>(std::lround(shorter / aspect));
  }
  f.quality = 85 + (i * 7) % 11;
  if (i % 10 == 7) f.h_samp = f.v_samp = 1;
  if (i % 10 == 8) f.v_samp = 1;
  f.progressive = i % 20 == 3;
  if (i % 33 == 5) f.color = testing::JpegFlavor::Color::kGray;
  f.seed = static_cast<uint64_t>(i) + 1;
  return f;
}

// Generates into a private temporary folder and renames it into place, marker last, so an
// interrupted run is never mistaken for a complete set and concurrent runs do not collide.
absl::Status GenerateSynthetic(const std::string& root, int count) {
  namespace fs = std::filesystem;
  const std::string tmp = absl::StrCat(root, ".tmp-", getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  constexpr int kClasses = 10;
  for (int c = 0; c < kClasses; ++c) {
    fs::create_directories(absl::StrFormat("%s/class_%02d", tmp, c), ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot create ", tmp, ": ", ec.message()));
  }
  std::fprintf(stderr, "ringloader-bench: generating %d synthetic JPEGs into %s (once)\n", count,
               root.c_str());
  std::atomic<int> next{0};
  std::mutex error_mu;
  absl::Status error;
  std::vector<std::thread> threads;
  for (int t = 0; t < HardwareThreads(); ++t) {
    threads.emplace_back([&] {
      for (int i = next++; i < count; i = next++) {
        const std::string path =
            absl::StrFormat("%s/class_%02d/img_%05d.jpg", tmp, i % kClasses, i);
        absl::Status s = WriteBytes(path, testing::EncodeJpeg(SyntheticFlavor(i)));
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(error_mu);
          error = s;
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!error.ok()) return error;
  if (absl::Status s = WriteBytes(absl::StrCat(tmp, "/", kSyntheticMarker),
                                  {'v', '1', '\n'});
      !s.ok()) {
    return s;
  }
  fs::rename(tmp, root, ec);
  if (ec) {
    // Another run finished first: use its set.
    fs::remove_all(tmp, ec);
    if (!fs::exists(absl::StrCat(root, "/", kSyntheticMarker))) {
      return absl::InternalError(absl::StrCat("cannot move the synthetic set into ", root));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Dataset> ResolveDataset(const Config& cfg) {
  Dataset ds;
  if (!cfg.data.empty()) {
    ds.root = cfg.data;
    ds.source = "data";
  } else {
    const std::string cache = CacheDir();
    const std::string sample = absl::StrCat(cache, "/sample-v1");
    if (std::filesystem::exists(absl::StrCat(sample, "/.ringloader-sample.json"))) {
      ds.root = sample;
      ds.source = "sample";
    } else {
      ds.root = absl::StrCat(cache, "/bench-synthetic-v1-n", cfg.synthetic_images);
      ds.source = "synthetic";
      if (!std::filesystem::exists(absl::StrCat(ds.root, "/", kSyntheticMarker))) {
        std::error_code ec;
        std::filesystem::create_directories(cache, ec);
        if (absl::Status s = GenerateSynthetic(ds.root, cfg.synthetic_images); !s.ok()) return s;
        ds.generated_now = true;
      }
    }
  }
  absl::StatusOr<std::vector<Sample>> samples;
  if (!cfg.list.empty()) {
    ds.root = cfg.list;
    ds.source = "list";
    samples = ReadFileList(cfg.list);
    if (samples.ok()) {
      int64_t max_label = -1;
      for (const Sample& sample : *samples) max_label = std::max(max_label, sample.label);
      for (int64_t label = 0; label <= max_label; ++label) ds.classes.push_back(absl::StrCat(label));
    }
  } else {
    samples = ScanImageFolder(ds.root, &ds.classes);
  }
  if (!samples.ok()) {
    return absl::Status(samples.status().code(),
                        absl::StrCat("cannot list images in ", ds.root, ": ",
                                     samples.status().message()));
  }
  if (samples->empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no images found in ", ds.root));
  }
  ds.samples = *std::move(samples);
  ds.file_bytes.reserve(ds.samples.size());
  for (const Sample& s : ds.samples) {
    struct stat st;
    ds.file_bytes.push_back(::stat(s.path.c_str(), &st) == 0 ? st.st_size : 0);
    ds.total_bytes += ds.file_bytes.back();
  }
  return ds;
}

}  // namespace ringloader::bench
