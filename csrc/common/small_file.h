#pragma once
/// The small text files of sysfs, procfs and cgroupfs (NUMA topology, CPU and memory budgets):
/// read whole, and whole-field integers parsed strictly.

#include <charconv>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace ringloader {

/// Reads `path` whole into `out`; false when it cannot be opened.
inline bool ReadSmallFile(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream buffer;
  buffer << in.rdbuf();
  *out = buffer.str();
  return true;
}

/// Parses `text`, ASCII whitespace around it ignored, as one decimal integer of type T; false
/// for anything else (empty, trailing characters, out of range).
template <typename T>
bool ParseWholeInteger(absl::string_view text, T* out) {
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

}  // namespace ringloader
