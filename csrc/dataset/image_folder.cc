#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dataset/image_folder.h"
#include "ringloader/ringloader.h"

namespace ringloader {

const std::vector<std::string>& ImageExtensions() {
  // torchvision.datasets.folder.IMG_EXTENSIONS, in its order.
  static const auto* extensions = new std::vector<std::string>{
      ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
  return *extensions;
}

namespace {

namespace fs = std::filesystem;

bool HasImageExtension(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const std::string& ext : ImageExtensions()) {
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

// The image files Walk would list under `top` and the bytes of their paths (dirpath, '/', name),
// counted without keeping a name: the table is sized before it is filled, so its path arena is
// never regrown (doubling holds the old and the new arena at once, and a shrink copies it again:
// ~2x the arena's bytes at the scan's peak). A listing that changes between the two passes only
// makes the count wrong, never the table.
void CountImages(const std::string& top, size_t* files, size_t* bytes) {
  DIR* dir = opendir(top.c_str());
  if (dir == nullptr) return;
  const size_t prefix = top.size() + (!top.empty() && top.back() != '/' ? 1 : 0);
  std::vector<std::string> subdirs;
  while (const dirent* entry = readdir(dir)) {
    const char* name = entry->d_name;
    if (std::strcmp(name, ".") == 0 || std::strcmp(name, "..") == 0) continue;
    bool is_dir = entry->d_type == DT_DIR;
    if (entry->d_type == DT_LNK || entry->d_type == DT_UNKNOWN) {
      struct stat st;
      is_dir = stat((fs::path(top) / name).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    }
    if (is_dir) {
      subdirs.push_back((fs::path(top) / name).string());
    } else if (HasImageExtension(name)) {
      ++*files;
      *bytes += prefix + std::strlen(name);
    }
  }
  closedir(dir);
  for (const std::string& sub : subdirs) CountImages(sub, files, bytes);
}

}  // namespace

absl::StatusOr<SampleTable> ScanImageFolderTable(const std::string& root,
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
  SampleTable table;
  size_t files = 0, bytes = 0;
  for (const std::string& name : classes) CountImages((fs::path(root) / name).string(), &files, &bytes);
  table.paths.reserve(bytes);
  table.ends.reserve(files);
  table.labels.reserve(files);
  std::vector<std::string> empty_classes;
  std::string path;
  for (size_t label = 0; label < classes.size(); ++label) {
    std::vector<std::pair<std::string, std::vector<std::string>>> walk;
    absl::Status status = Walk(fs::path(root) / classes[label], &walk);
    if (!status.ok()) return status;
    std::sort(walk.begin(), walk.end());
    const size_t before = table.size();
    for (auto& [dir, files] : walk) {
      std::sort(files.begin(), files.end());
      for (const std::string& name : files) {
        if (!HasImageExtension(name)) continue;
        // os.path.join(dirpath, fname): one separator unless dirpath already ends with one.
        path = dir;
        if (!path.empty() && path.back() != '/') path += '/';
        path += name;
        table.Add(path, static_cast<int32_t>(label));
      }
    }
    if (table.size() == before) empty_classes.push_back(classes[label]);
  }
  if (!empty_classes.empty()) {
    std::string names;
    for (const auto& name : empty_classes) absl::StrAppend(&names, names.empty() ? "" : ", ", name);
    return absl::NotFoundError(
        absl::StrCat("found no valid file for the classes ", names, " in ", root));
  }
  // Only when the count was far off (the listing changed between the passes): a shrink copies.
  if (table.paths.capacity() - table.paths.size() > table.paths.size() / 8) table.paths.shrink_to_fit();
  if (classes_out != nullptr) *classes_out = std::move(classes);
  return table;
}

absl::StatusOr<std::vector<Sample>> ScanImageFolder(const std::string& root,
                                                    std::vector<std::string>* classes_out) {
  absl::StatusOr<SampleTable> table = ScanImageFolderTable(root, classes_out);
  if (!table.ok()) return table.status();
  std::vector<Sample> samples;
  samples.reserve(table->size());
  uint64_t start = 0;
  for (size_t i = 0; i < table->size(); ++i) {
    samples.emplace_back(table->paths.substr(start, table->ends[i] - start), table->labels[i]);
    start = table->ends[i];
  }
  return samples;
}

}  // namespace ringloader
