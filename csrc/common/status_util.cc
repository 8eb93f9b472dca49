#include "common/status_util.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace ringloader {

absl::Status ErrnoStatus(int errno_value, absl::string_view operation, absl::string_view path) {
  return absl::ErrnoToStatus(errno_value, absl::StrCat(operation, "(", path, ")"));
}

}  // namespace ringloader
