// Device-option parsing: plain C++, built with and without CUDA.
#include <charconv>

#include "absl/strings/str_cat.h"
#include "cuda/device_stager.h"

namespace ringloader {

absl::StatusOr<int> ParseDevice(const std::string& device) {
  if (device.empty() || device == "cpu") return -1;
  if (device == "cuda") return 0;
  if (device.rfind("cuda:", 0) == 0) {
    const char* begin = device.data() + 5;
    const char* end = device.data() + device.size();
    int ordinal = -1;
    auto [ptr, ec] = std::from_chars(begin, end, ordinal);
    if (ec == std::errc() && ptr == end && begin != end && ordinal >= 0) return ordinal;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("device must be 'cpu', 'cuda' or 'cuda:N', got '", device, "'"));
}

}  // namespace ringloader
