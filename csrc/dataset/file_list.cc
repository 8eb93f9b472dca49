#include <cerrno>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_util.h"
#include "ringloader/ringloader.h"

namespace ringloader {

absl::StatusOr<std::vector<Sample>> ReadFileList(const std::string& list_path) {
  std::ifstream in(list_path);
  if (!in) return ErrnoStatus(errno, "open", list_path);
  const std::filesystem::path base = std::filesystem::path(list_path).parent_path();
  std::vector<Sample> samples;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text.front() == '#') continue;
    const size_t split = text.find_last_of(" \t");
    if (split == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(list_path, ":", number, ": expected \"<path> <label>\", got \"", text, "\""));
    }
    const absl::string_view label_text = text.substr(split + 1);
    const absl::string_view path_text = absl::StripTrailingAsciiWhitespace(text.substr(0, split));
    int64_t label = 0;
    const auto [end, error] = std::from_chars(label_text.data(), label_text.data() + label_text.size(), label);
    if (error != std::errc() || end != label_text.data() + label_text.size() || label < 0) {
      return absl::InvalidArgumentError(absl::StrCat(list_path, ":", number, ": label \"", label_text,
                                                     "\" is not a non-negative integer"));
    }
    std::filesystem::path path{std::string(path_text)};
    if (path.is_relative()) path = base / path;
    samples.push_back(Sample{path.string(), label});
  }
  if (samples.empty()) return absl::InvalidArgumentError(absl::StrCat(list_path, " lists no samples"));
  return samples;
}

}  // namespace ringloader
