#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ringloader/ringloader.h"

namespace ringloader {
namespace {

namespace fs = std::filesystem;

// torchvision.datasets.folder.IMG_EXTENSIONS
constexpr const char* kImageExtensions[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                            ".pgm", ".tif",  ".tiff", ".webp"};

bool HasImageExtension(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const char* ext : kImageExtensions) {
    if (absl::EndsWith(lower, ext)) return true;
  }
  return false;
}

// os.walk(top, followlinks=True): (dirpath, file names) for top and every directory below.
absl::Status Walk(const fs::path& top, std::vector<std::pair<std::string, std::vector<std::string>>>* out) {
  std::error_code ec;
  fs::directory_iterator it(top, ec);
  if (ec) return absl::OkStatus();  // os.walk ignores unreadable directories
  std::vector<std::string> files;
  std::vector<fs::path> dirs;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    std::error_code type_ec;
    if (it->is_directory(type_ec)) {
      dirs.push_back(it->path());
    } else {
      files.push_back(it->path().filename().string());
    }
  }
  out->emplace_back(top.string(), std::move(files));
  for (const fs::path& dir : dirs) {
    absl::Status status = Walk(dir, out);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Sample>> ScanImageFolder(const std::string& root,
                                                    std::vector<std::string>* classes_out) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return absl::NotFoundError(absl::StrCat("image folder root ", root, " is not a directory"));
  }
  std::vector<std::string> classes;
  for (fs::directory_iterator it(root, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_directory(type_ec)) classes.push_back(it->path().filename().string());
  }
  if (ec) return absl::PermissionDeniedError(absl::StrCat("cannot list ", root, ": ", ec.message()));
  std::sort(classes.begin(), classes.end());
  if (classes.empty()) {
    return absl::NotFoundError(absl::StrCat("couldn't find any class folder in ", root));
  }
  std::vector<Sample> samples;
  std::vector<std::string> empty_classes;
  for (size_t label = 0; label < classes.size(); ++label) {
    std::vector<std::pair<std::string, std::vector<std::string>>> walk;
    absl::Status status = Walk(fs::path(root) / classes[label], &walk);
    if (!status.ok()) return status;
    std::sort(walk.begin(), walk.end());
    const size_t before = samples.size();
    for (auto& [dir, files] : walk) {
      std::sort(files.begin(), files.end());
      for (const std::string& name : files) {
        if (HasImageExtension(name)) {
          samples.push_back(Sample{(fs::path(dir) / name).string(), static_cast<int64_t>(label)});
        }
      }
    }
    if (samples.size() == before) empty_classes.push_back(classes[label]);
  }
  if (!empty_classes.empty()) {
    std::string names;
    for (const auto& name : empty_classes) absl::StrAppend(&names, names.empty() ? "" : ", ", name);
    return absl::NotFoundError(
        absl::StrCat("found no valid file for the classes ", names, " in ", root));
  }
  if (classes_out != nullptr) *classes_out = std::move(classes);
  return samples;
}

}  // namespace ringloader
